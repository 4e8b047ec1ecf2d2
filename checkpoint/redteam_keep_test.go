//go:build linux || darwin || freebsd

package checkpoint

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// keptPaths lists the paths a restore says another writer changed.
// restoreAlone restores checkpoint 1 of s to root with no writer beside
// it: nothing may be kept as changed by another writer.
func restoreAlone(t *testing.T, s *Store, root string, saveFirst bool) {
	t.Helper()
	res, err := s.Restore(t.Context(), root, "1", RestoreOptions{SaveFirst: saveFirst})
	must(t, err)
	if k := keptPaths(res); len(k) > 0 {
		t.Errorf("no writer ran beside the restore, yet it kept %q", k)
	}
}

// keptPaths are the paths res left as changed by another writer.
func keptPaths(res RestoreResult) []string {
	var out []string
	for _, sk := range res.Skipped {
		if sk.Reason == keptReason {
			out = append(out, sk.Path)
		}
	}
	return out
}

// TestRedTeamRestoreOwnUnlinkOfHardLinkKeepsFile: nobody writes during
// the restore. The agent rewrote a.txt and hard-linked it as c.txt (added
// since the checkpoint). The restore removes c.txt first; unlinking it
// moves the shared inode's ctime, so when the restore reaches a.txt its
// stat no longer matches the walk's and the keep rule takes the restore's
// own unlink for "another writer": a.txt is left holding the agent's
// content and reported as changed during the restore by another writer.
// The restore is not exact although nothing ran beside it.
func TestRedTeamRestoreOwnUnlinkOfHardLinkKeepsFile(t *testing.T) {
	for _, saveFirst := range []bool{true, false} {
		t.Run(map[bool]string{true: "save first", false: "no undo"}[saveFirst], func(t *testing.T) {
			root := t.TempDir()
			build(t, root, map[string]node{"a.txt": file(0o644, "v1")})
			s := openStore(t, t.TempDir(), Options{NoSync: true})
			save(t, s, root, "one")
			want := snapshot(t, root)
			must(t, os.WriteFile(filepath.Join(root, "a.txt"), []byte("v2 by the agent"), 0o644))
			must(t, os.Link(filepath.Join(root, "a.txt"), filepath.Join(root, "c.txt")))
			restoreAlone(t, s, root, saveFirst)
			sameSnap(t, "restored", want, snapshot(t, root))
		})
	}
}

// TestRedTeamRestoreOwnRenameOverHardLinkKeepsSibling: both names exist
// in the checkpoint as separate files; the agent made them one inode with
// new content. Restoring a.txt renames a fresh file over it, which drops
// the inode's link count and moves its ctime; b.txt, reached next, then
// looks "changed since the walk" and keeps the agent's content.
func TestRedTeamRestoreOwnRenameOverHardLinkKeepsSibling(t *testing.T) {
	root := t.TempDir()
	build(t, root, map[string]node{"a.txt": file(0o644, "A"), "b.txt": file(0o644, "B")})
	s := openStore(t, t.TempDir(), Options{NoSync: true})
	save(t, s, root, "one")
	want := snapshot(t, root)
	must(t, os.Remove(filepath.Join(root, "b.txt")))
	must(t, os.WriteFile(filepath.Join(root, "a.txt"), []byte("agent"), 0o644))
	must(t, os.Link(filepath.Join(root, "a.txt"), filepath.Join(root, "b.txt")))
	restoreAlone(t, s, root, true)
	sameSnap(t, "restored", want, snapshot(t, root))
}

// TestRedTeamRestoreHardLinkedCheckpointReportsPhantomWriter: the
// checkpoint itself holds two hard links of one file (a local git clone,
// a pnpm store, cp -al); the agent only adds a file beside them. The
// restore rewrites a hard-linked file rather than chmod it in place, and
// that rewrite moves the sibling name's ctime: the sibling is reported as
// changed by another writer although nobody touched it.
func TestRedTeamRestoreHardLinkedCheckpointReportsPhantomWriter(t *testing.T) {
	root := t.TempDir()
	build(t, root, map[string]node{"a.txt": file(0o644, "same")})
	must(t, os.Link(filepath.Join(root, "a.txt"), filepath.Join(root, "b.txt")))
	s := openStore(t, t.TempDir(), Options{NoSync: true})
	save(t, s, root, "one")
	must(t, os.WriteFile(filepath.Join(root, "new.txt"), []byte("added"), 0o644))
	must(t, os.Chmod(filepath.Join(root, "a.txt"), 0o600)) // both names: one inode
	restoreAlone(t, s, root, true)
	for _, n := range []string{"a.txt", "b.txt"} {
		if fi, err := os.Lstat(filepath.Join(root, n)); err != nil || fi.Mode().Perm() != 0o644 {
			t.Errorf("%s after restore: %v, %v; want mode 0644", n, fi.Mode(), err)
		}
	}
	if _, err := os.Lstat(filepath.Join(root, "new.txt")); err == nil {
		t.Errorf("new.txt survives the restore")
	}
}

// TestRedTeamRestoreKeepsTooDeepTree: a directory deeper than maxDepth is
// skipped by the walk (kindSkipped, no tree). Removing what was added
// since the checkpoint, the restore finds no walked tree below that entry,
// so everything in it counts as "made since the walk" and is kept: an
// agent nests a directory deep enough and keeps any amount of data
// through every restore, each reported as another writer's change.
func TestRedTeamRestoreKeepsTooDeepTree(t *testing.T) {
	root := t.TempDir()
	build(t, root, map[string]node{"a.txt": file(0o644, "v1")})
	s := openStore(t, t.TempDir(), Options{NoSync: true})
	save(t, s, root, "one")
	deep := filepath.Join(root, strings.Repeat("d/", maxDepth+2))
	must(t, os.MkdirAll(deep, 0o755))
	must(t, os.WriteFile(filepath.Join(deep, "payload"), []byte("survives"), 0o644))
	res, err := s.Restore(t.Context(), root, "1", RestoreOptions{SaveFirst: true})
	must(t, err)
	if _, err := os.Lstat(filepath.Join(root, "d")); err == nil {
		t.Errorf("a tree added since checkpoint 1 survives its restore (kept: %d paths, e.g. %.60q)", len(keptPaths(res)), keptPaths(res))
	}
}

// TestRedTeamRestoreKeepsUnreadableFile (not root): a file the walk could
// not read is a kindSkipped entry with no size, ctime or inode; the keep
// rule compares the file's stat with those zeros and always finds it
// "changed since the walk". A file the agent made mode 000 therefore
// survives every restore, and a checkpointed file the agent rewrote and
// chmod'ed 000 is never put back.
func TestRedTeamRestoreKeepsUnreadableFile(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root reads a mode-000 file; run as another user: go test -c, then setpriv --reuid=65534 --regid=65534 --clear-groups ./checkpoint.test -test.run TestRedTeamRestoreKeepsUnreadableFile")
	}
	root := t.TempDir()
	build(t, root, map[string]node{"a.txt": file(0o644, "v1")})
	s := openStore(t, t.TempDir(), Options{NoSync: true})
	save(t, s, root, "one")
	must(t, os.WriteFile(filepath.Join(root, "a.txt"), []byte("v2"), 0o644))
	must(t, os.Chmod(filepath.Join(root, "a.txt"), 0))
	must(t, os.WriteFile(filepath.Join(root, "hidden"), []byte("kept"), 0))
	restoreAlone(t, s, root, true)
	if _, err := os.Lstat(filepath.Join(root, "hidden")); err == nil {
		t.Errorf("hidden, added since checkpoint 1, survives its restore")
	}
	if fi, err := os.Lstat(filepath.Join(root, "a.txt")); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("a.txt after restore: %v, %v; want the checkpoint's 0644 v1", fi.Mode(), err)
	} else if b, err := os.ReadFile(filepath.Join(root, "a.txt")); err != nil || string(b) != "v1" {
		t.Errorf("a.txt after restore = %q, %v; want v1", b, err)
	}
}
