//go:build linux || darwin || freebsd

package checkpoint

import (
	"crypto/sha256"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

// A writer the restore's locks do not exclude (another replica's
// channel, a command-line restore beside a server) writes after the undo
// checkpoint's walk: what it wrote is in no checkpoint, so the restore
// leaves each such path as it is — a file rewritten, a file made, a file
// made in a directory the restore removes — lists it in Skipped and not
// in Changes, and restores everything else.
func TestRestoreKeepsWhatChangedAfterItsWalk(t *testing.T) {
	for _, saveFirst := range []bool{true, false} {
		t.Run(map[bool]string{true: "save first", false: "no undo"}[saveFirst], func(t *testing.T) {
			root := t.TempDir()
			build(t, root, map[string]node{"a.txt": file(0o644, "v1"), "b.txt": file(0o644, "v1")})
			s := openStore(t, t.TempDir(), Options{NoSync: true})
			save(t, s, root, "one")
			build(t, root, map[string]node{
				"a.txt": file(0o644, "v2"), "b.txt": file(0o644, "v2"), "extra.txt": file(0o644, "added"),
				"newdir": dir(0o755), "newdir/f": file(0o644, "f"), "gone": dir(0o755), "gone/g": file(0o644, "g"),
			})
			s.hook = func(point, _ string) {
				if point != "restore-apply" {
					return
				}
				must(t, os.WriteFile(filepath.Join(root, "a.txt"), []byte("v3 from another writer"), 0o644))
				must(t, os.WriteFile(filepath.Join(root, "extra.txt"), []byte("rewritten"), 0o644))
				must(t, os.WriteFile(filepath.Join(root, "newdir", "late.txt"), []byte("late"), 0o644))
				must(t, os.WriteFile(filepath.Join(root, "brandnew.txt"), []byte("new"), 0o644))
				must(t, os.MkdirAll(filepath.Join(root, "late", "sub"), 0o755))
				must(t, os.WriteFile(filepath.Join(root, "late", "sub", "x"), []byte("x"), 0o644))
			}
			res, err := s.Restore(t.Context(), root, "1", RestoreOptions{SaveFirst: saveFirst})
			if err != nil {
				t.Fatal(err)
			}
			for name, want := range map[string]string{
				"a.txt": "v3 from another writer", "extra.txt": "rewritten", "newdir/late.txt": "late",
				"brandnew.txt": "new", "late/sub/x": "x", "b.txt": "v1",
			} {
				if got, err := os.ReadFile(filepath.Join(root, name)); err != nil || string(got) != want {
					t.Errorf("%s = %q, %v; want %q", name, got, err, want)
				}
			}
			for _, gone := range []string{"newdir/f", "gone"} {
				if _, err := os.Lstat(filepath.Join(root, gone)); err == nil {
					t.Errorf("%s was not removed", gone)
				}
			}
			var kept, changed []string
			for _, sk := range res.Skipped {
				if sk.Reason == keptReason {
					kept = append(kept, sk.Path)
				}
			}
			for _, c := range res.Changes {
				changed = append(changed, c.Path)
			}
			slices.Sort(kept)
			if want := []string{"a.txt", "brandnew.txt", "extra.txt", "late", "newdir/late.txt"}; !slices.Equal(kept, want) {
				t.Errorf("kept %q, want %q", kept, want)
			}
			for _, p := range []string{"a.txt", "extra.txt", "newdir"} {
				if slices.Contains(changed, p) {
					t.Errorf("Changes lists %s, which the restore left", p)
				}
			}
			for _, p := range []string{"b.txt", "newdir/f", "gone", "gone/g"} {
				if !slices.Contains(changed, p) {
					t.Errorf("Changes %q lacks %s", changed, p)
				}
			}
		})
	}
}

// A racy file (its stat cannot vouch for a write in the walk's clock
// tick: on a kernel with coarse timestamps, a same-size write then leaves
// size, mtime and ctime as the walk saw them) is read again before the
// restore replaces or removes it: content other than the walk's is a
// writer's, kept.
func TestRacyChangedReadsAgain(t *testing.T) {
	root := t.TempDir()
	must(t, os.WriteFile(filepath.Join(root, "a"), []byte("new!"), 0o644))
	fd, err := openDir(unix.AT_FDCWD, root, false)
	must(t, err)
	defer unix.Close(fd)
	walked := func(content string) *entry {
		return &entry{name: "a", kind: kindFile, size: int64(len(content)), hash: sha256.Sum256([]byte(content))}
	}
	a := &applier{guard: true, racy: map[string]bool{"a": true}}
	if !a.racyChanged(fd, "a", "a", walked("old!")) {
		t.Error("a racy file whose bytes are not the walk's: not seen as changed")
	}
	if a.racyChanged(fd, "a", "a", walked("new!")) {
		t.Error("a racy file holding what the walk read: seen as changed")
	}
	a.racy = nil
	if a.racyChanged(fd, "a", "a", walked("old!")) {
		t.Error("a file the walk vouched for was read again")
	}
}
