//go:build linux || darwin || freebsd

package checkpoint

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// A tree with every kind of entry saves and restores exactly, forwards
// and backwards, and the counts of each checkpoint are its changes.
func TestRoundTrip(t *testing.T) {
	t.Parallel()
	root := filepath.Join(t.TempDir(), "user-data")
	outside := t.TempDir()
	binary := make([]byte, 300<<10) // above smallFile: the streaming path
	rand.Read(binary)
	spec := map[string]node{
		"workspace/main.go":           file(0o644, "package main\n"),
		"workspace/run.sh":            file(0o755, "#!/bin/sh\necho hi\n"),
		"workspace/secret":            file(0o600, "s3cret"),
		"workspace/ro.txt":            file(0o444, "read only"),
		"workspace/zero":              file(0o644, ""),
		"workspace/bin.dat":           file(0o644, string(binary)),
		"workspace/small.bin":         file(0o644, "\x00\x01\x02\xff\xfe\x00"),
		"workspace/empty":             dir(0o755),
		"workspace/deep/a/b/c":        dir(0o750),
		"workspace/private":           dir(0o700),
		"workspace/setgid":            dir(os.ModeSetgid | 0o750),
		"workspace/sticky":            dir(os.ModeSticky | 0o777),
		"workspace/ünïcødé ✓.txt":     file(0o644, "ü"),
		"workspace/new\nline":         file(0o644, "newline in the name"),
		"workspace/tab\there":         file(0o644, "tab"),
		"workspace/link-rel":          link("main.go"),
		"workspace/link-dangling":     link("nope/nothing"),
		"workspace/link-outside":      link(outside),
		"workspace/link-dir":          link("deep"),
		"workspace/" + long('n', 255): file(0o644, "a long name"),
		"uploads/data.csv":            file(0o644, "a,b\n1,2\n"),
		"outputs/report.md":           file(0o644, "# report\n"),
	}
	build(t, root, spec)
	first := snapshot(t, root)
	s := openStore(t, t.TempDir(), Options{})

	r1 := save(t, s, root, "one")
	if !r1.Saved || r1.Info.ID != "1" || r1.Info.Added != len(first) || r1.Info.Modified+r1.Info.Deleted != 0 {
		t.Fatalf("first save: %+v, want id 1 with %d added", r1, len(first))
	}
	if r1.Info.Files != 13 || r1.Info.Message != "one" {
		t.Fatalf("first save: %d files, message %q", r1.Info.Files, r1.Info.Message)
	}

	ws := filepath.Join(root, "workspace")
	must(t, os.WriteFile(filepath.Join(ws, "main.go"), []byte("package main // changed\n"), 0o644)) // modified
	must(t, os.Chmod(filepath.Join(ws, "secret"), 0o640))                                           // modified (mode)
	must(t, os.Remove(filepath.Join(ws, "run.sh")))                                                 // deleted
	must(t, os.RemoveAll(filepath.Join(ws, "deep")))                                                // 4 deleted
	must(t, os.WriteFile(filepath.Join(ws, "added.txt"), []byte("new"), 0o644))                     // added
	must(t, os.MkdirAll(filepath.Join(ws, "newdir/inner"), 0o755))                                  // 2 added
	must(t, os.Remove(filepath.Join(ws, "zero")))
	must(t, os.Mkdir(filepath.Join(ws, "zero"), 0o755)) // modified (file -> dir)
	must(t, os.Remove(filepath.Join(ws, "empty")))
	must(t, os.WriteFile(filepath.Join(ws, "empty"), []byte("now a file"), 0o644)) // modified (dir -> file)
	must(t, os.Remove(filepath.Join(ws, "link-rel")))
	must(t, os.Symlink("ro.txt", filepath.Join(ws, "link-rel"))) // modified (target)
	must(t, os.Chmod(filepath.Join(ws, "private"), 0o755))       // modified (dir mode)
	second := snapshot(t, root)

	r2 := save(t, s, root, "two")
	if got := [3]int{r2.Info.Added, r2.Info.Modified, r2.Info.Deleted}; got != [3]int{3, 6, 5} {
		t.Errorf("second save: added, modified, deleted = %v, want [3 6 5]", got)
	}

	res := restore(t, s, root, "1")
	sameSnap(t, "restore 1", first, snapshot(t, root))
	if len(res.Changes) != 14 {
		t.Errorf("restore 1 reported %d changes, want 14: %+v", len(res.Changes), res.Changes)
	}
	restore(t, s, root, "2")
	sameSnap(t, "restore 2", second, snapshot(t, root))
	restore(t, s, root, "1")
	sameSnap(t, "restore 1 again", first, snapshot(t, root))
	if r := save(t, s, root, "three"); !r.Saved || r.Info.Changed() != 14 {
		t.Errorf("save after restoring 1: %+v, want 14 changes from 2", r.Info)
	}
	// Nothing outside was touched through the symlink to it.
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Errorf("outside dir has %d entries", len(ents))
	}
	checkObjects(t, s.dir)
}

func long(c byte, n int) string { return strings.Repeat(string(c), n) }

// With nothing changed, Save makes no checkpoint and reads nothing; Force
// makes one anyway.
func TestSaveNothingChanged(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	workspace(t, root, 200)
	s := openStore(t, t.TempDir(), Options{NoSync: true})
	s.racy = 0 // trust stats at once (TestRacyFileReadAgain covers the window)
	save(t, s, root, "one")
	r := save(t, s, root, "two")
	if r.Saved || r.Info.ID != "1" {
		t.Fatalf("unchanged save: %+v, want not saved, latest 1", r)
	}
	if s.reads != 0 {
		t.Errorf("unchanged save read %d files, want 0", s.reads)
	}
	r, err := s.Save(t.Context(), root, SaveOptions{Message: "forced", Force: true})
	must(t, err)
	if !r.Saved || r.Info.ID != "2" || r.Info.Changed() != 0 {
		t.Fatalf("forced save: %+v", r)
	}
	list, err := s.List(t.Context())
	must(t, err)
	if len(list) != 2 || list[1].Message != "forced" || list[0].Message != "one" {
		t.Fatalf("List: %+v", list)
	}
}

// The stat cache trusts an unchanged stat, and nothing else: a change of
// content with the same size and a forged mtime is found (the ctime
// moved), as is a file replaced by another inode.
func TestStatCache(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	files := workspace(t, root, 100)
	s := openStore(t, t.TempDir(), Options{NoSync: true})
	s.racy = 0
	time.Sleep(30 * time.Millisecond) // later changes get another ctime, whatever the clock's tick
	save(t, s, root, "base")
	if s.reads != 100 {
		t.Fatalf("first save read %d files, want 100", s.reads)
	}
	f := files[17]
	fi, err := os.Stat(f)
	must(t, err)
	old, err := os.ReadFile(f)
	must(t, err)

	// Same size, same mtime (forged back), same inode: only ctime differs.
	changed := bytes.ToUpper(old)
	if bytes.Equal(changed, old) {
		t.Fatal("test content has no lower case")
	}
	must(t, os.WriteFile(f, changed, 0o644))
	must(t, os.Chtimes(f, fi.ModTime(), fi.ModTime()))
	r := save(t, s, root, "same size, forged mtime")
	if !r.Saved || r.Info.Modified != 1 || s.reads != 1 {
		t.Fatalf("forged mtime: saved %v, %d modified, %d read; want 1 modified, 1 read", r.Saved, r.Info.Modified, s.reads)
	}
	if rc, _, err := s.OpenFile(t.Context(), r.Info.ID, rel(root, f)); err != nil {
		t.Fatal(err)
	} else if got, _ := io.ReadAll(rc); !bytes.Equal(got, changed) {
		t.Fatalf("stored %q, want %q", got, changed)
	} else {
		rc.Close()
	}

	// Another inode with the same size and mtime.
	time.Sleep(30 * time.Millisecond)
	tmp := f + ".new"
	must(t, os.WriteFile(tmp, old, 0o644))
	must(t, os.Chtimes(tmp, fi.ModTime(), fi.ModTime()))
	must(t, os.Rename(tmp, f))
	r = save(t, s, root, "renamed over")
	if !r.Saved || r.Info.Modified != 1 || s.reads != 1 {
		t.Fatalf("new inode: saved %v, %d modified, %d read", r.Saved, r.Info.Modified, s.reads)
	}

	// A touch changes no content: no checkpoint, but the cache learns the
	// new stat, so the next save reads nothing.
	time.Sleep(30 * time.Millisecond)
	now := time.Now()
	must(t, os.Chtimes(files[3], now, now))
	if r := save(t, s, root, "touch"); r.Saved || s.reads != 1 {
		t.Fatalf("touch: saved %v, read %d; want not saved, 1 read", r.Saved, s.reads)
	}
	if save(t, s, root, "again"); s.reads != 0 {
		t.Fatalf("after touch: read %d, want 0", s.reads)
	}

	// A fresh Store (another process) uses the latest checkpoint as cache.
	s2 := openStore(t, s.dir, Options{NoSync: true})
	s2.racy = 0
	if r := save(t, s2, root, "reopened"); r.Saved || s2.reads != 1 {
		t.Fatalf("reopened: saved %v, read %d; want not saved, only the touched file read", r.Saved, s2.reads)
	}
}

func rel(root, full string) string {
	r, _ := filepath.Rel(root, full)
	return filepath.ToSlash(r)
}

// A file saved right after it was written may be written again within
// the same timestamp tick: it is marked racy and read again by the next
// save, whatever its stat says.
func TestRacyFileReadAgain(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	f := filepath.Join(root, "f")
	must(t, os.WriteFile(f, []byte("aaaa"), 0o644))
	s := openStore(t, t.TempDir(), Options{NoSync: true})
	save(t, s, root, "one")
	if !s.cache.racy["f"] {
		t.Fatal("a file written just before the save is not racy")
	}
	fi, _ := os.Stat(f)
	must(t, os.WriteFile(f, []byte("bbbb"), 0o644))
	must(t, os.Chtimes(f, fi.ModTime(), fi.ModTime()))
	r := save(t, s, root, "two")
	if !r.Saved || r.Info.Modified != 1 || s.reads != 1 {
		t.Fatalf("racy file: %+v, read %d", r.Info, s.reads)
	}
}

// A store opened anew (another process) knows which entries of the latest
// checkpoint were racy from the checkpoint's walk start: it reads those
// again, and trusts the others.
func TestRacyFromCheckpoint(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	must(t, os.WriteFile(filepath.Join(root, "old"), []byte("old"), 0o644))
	time.Sleep(100 * time.Millisecond)
	must(t, os.WriteFile(filepath.Join(root, "new"), []byte("new"), 0o644))
	dir := t.TempDir()
	s := openStore(t, dir, Options{NoSync: true})
	s.racy = int64(50 * time.Millisecond)
	save(t, s, root, "one")
	if !s.cache.racy["new"] || s.cache.racy["old"] {
		t.Fatalf("racy paths %v, want only new", s.cache.racy)
	}
	s2 := openStore(t, dir, Options{NoSync: true})
	s2.racy = int64(50 * time.Millisecond)
	if r := save(t, s2, root, "two"); r.Saved || s2.reads != 1 {
		t.Fatalf("reopened store read %d files (saved %v), want 1 (new)", s2.reads, r.Saved)
	}
}

// A file's bytes are stored once however many checkpoints and paths hold
// them, also a large one.
func TestDedup(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	big := make([]byte, 3<<20)
	rand.Read(big)
	must(t, os.WriteFile(filepath.Join(root, "big"), big, 0o644))
	must(t, os.WriteFile(filepath.Join(root, "small"), []byte("small"), 0o644))
	s := openStore(t, t.TempDir(), Options{})
	save(t, s, root, "one")
	u1, err := s.Usage(t.Context())
	must(t, err)
	must(t, os.WriteFile(filepath.Join(root, "copy"), big, 0o644))
	must(t, os.WriteFile(filepath.Join(root, "small"), []byte("other"), 0o644))
	save(t, s, root, "two")
	must(t, os.Remove(filepath.Join(root, "big")))
	save(t, s, root, "three")
	u3, err := s.Usage(t.Context())
	must(t, err)
	if u1 < int64(len(big)) || u3-u1 > 4096 {
		t.Errorf("usage %d after one, %d after three: the big file stored more than once", u1, u3)
	}
	large := 0
	filepath.WalkDir(filepath.Join(s.dir, "objects"), func(_ string, d os.DirEntry, err error) error {
		if info, _ := d.Info(); err == nil && !d.IsDir() && info.Size() == int64(len(big)) {
			large++
		}
		return nil
	})
	if large != 1 {
		t.Errorf("%d objects of the big file's size, want 1", large)
	}
	checkObjects(t, s.dir)
}

// Changes lists what differs between checkpoints, and between a checkpoint
// and the live tree; OpenFile reads a file as it was.
func TestChangesAndOpenFile(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	build(t, root, map[string]node{
		"a.txt":     file(0o644, "one\n"),
		"d/b.txt":   file(0o644, "bee\n"),
		"d/e/c.txt": file(0o755, "sea\n"),
		"l":         link("a.txt"),
	})
	s := openStore(t, t.TempDir(), Options{NoSync: true})
	save(t, s, root, "one")
	must(t, os.WriteFile(filepath.Join(root, "a.txt"), []byte("two\n"), 0o644))
	must(t, os.RemoveAll(filepath.Join(root, "d")))
	must(t, os.WriteFile(filepath.Join(root, "n.txt"), []byte("new\n"), 0o600))
	save(t, s, root, "two")
	must(t, os.Chmod(filepath.Join(root, "n.txt"), 0o644))

	type row struct {
		path string
		kind Kind
	}
	list := func(from, to string) []row {
		ch, err := s.Changes(t.Context(), root, from, to)
		must(t, err)
		var out []row
		for _, c := range ch {
			out = append(out, row{c.Path, c.Kind})
		}
		return out
	}
	want := []row{{"a.txt", Modified}, {"d", Deleted}, {"d/b.txt", Deleted}, {"d/e", Deleted}, {"d/e/c.txt", Deleted}, {"n.txt", Added}}
	if got := list("1", "2"); !slices.Equal(got, want) {
		t.Errorf("Changes(1, 2) = %v, want %v", got, want)
	}
	if got := list("2", ""); !slices.Equal(got, []row{{"n.txt", Modified}}) {
		t.Errorf("Changes(2, live) = %v", got)
	}
	ch, err := s.Changes(t.Context(), root, "1", "2")
	must(t, err)
	if c := ch[5]; c.New == nil || c.New.Mode != 0o600 || c.New.Size != 4 || c.Old != nil {
		t.Errorf("added n.txt: %+v", c.New)
	}
	if c := ch[4]; c.Old == nil || c.Old.Mode != 0o755 || c.New != nil {
		t.Errorf("deleted d/e/c.txt: %+v", c.Old)
	}

	rc, e, err := s.OpenFile(t.Context(), "1", "d/e/c.txt")
	must(t, err)
	b, err := io.ReadAll(rc)
	rc.Close()
	must(t, err)
	if string(b) != "sea\n" || e.Mode != 0o755 || e.Size != 4 {
		t.Errorf("OpenFile(1, d/e/c.txt) = %q, %+v", b, e)
	}
	if _, _, err := s.OpenFile(t.Context(), "2", "d/e/c.txt"); !errors.Is(err, ErrNotFound) {
		t.Errorf("OpenFile of a deleted path: %v", err)
	}
	if _, _, err := s.OpenFile(t.Context(), "1", "d"); !errors.Is(err, ErrNotFile) {
		t.Errorf("OpenFile of a directory: %v", err)
	}
	if e, err := s.Stat(t.Context(), "1", "l"); err != nil || e.Target != "a.txt" {
		t.Errorf("Stat(1, l) = %+v, %v", e, err)
	}
	for _, bad := range []string{"9", "0", "01", "-1", "x", ""} {
		if _, err := s.Changes(t.Context(), root, bad, "1"); !errors.Is(err, ErrNotFound) {
			t.Errorf("Changes from %q: %v, want ErrNotFound", bad, err)
		}
	}
}

// A damaged object fails the restore before anything is changed.
func TestCorruptObjectFailsCleanly(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	build(t, root, map[string]node{"a": file(0o644, "original a"), "b": file(0o644, "original b")})
	s := openStore(t, t.TempDir(), Options{NoSync: true})
	save(t, s, root, "one")
	must(t, os.WriteFile(filepath.Join(root, "a"), []byte("changed a"), 0o644))
	must(t, os.WriteFile(filepath.Join(root, "b"), []byte("changed b"), 0o644))
	must(t, os.WriteFile(filepath.Join(root, "c"), []byte("new c"), 0o644))
	before := snapshot(t, root)

	e, err := s.Stat(t.Context(), "1", "b")
	must(t, err)
	var h hash
	copy(h[:], mustHex(t, e.Hash))
	overwrite(t, s, h, []byte("tampered b"))

	_, err = s.Restore(t.Context(), root, "1", RestoreOptions{})
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Restore with a tampered object: %v, want ErrCorrupt", err)
	}
	if strings.Contains(err.Error(), s.dir) || strings.Contains(err.Error(), root) {
		t.Errorf("error names a host path: %v", err)
	}
	sameSnap(t, "after a failed restore", before, snapshot(t, root))

	// A missing tree too.
	overwrite(t, s, h, []byte("original b"))
	r, _ := s.record("1")
	removeObject(t, s, r.root)
	s2 := openStore(t, s.dir, Options{NoSync: true}) // knows nothing in memory
	if _, err := s2.Restore(t.Context(), root, "1", RestoreOptions{}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Restore with a missing tree: %v, want ErrCorrupt", err)
	}
	sameSnap(t, "after a failed restore", before, snapshot(t, root))
}

func mustHex(t testing.TB, s string) []byte {
	t.Helper()
	var b []byte
	for i := 0; i+1 < len(s); i += 2 {
		var c byte
		for _, x := range s[i : i+2] {
			c <<= 4
			switch {
			case x >= '0' && x <= '9':
				c |= byte(x - '0')
			case x >= 'a' && x <= 'f':
				c |= byte(x - 'a' + 10)
			default:
				t.Fatalf("bad hex %q", s)
			}
		}
		b = append(b, c)
	}
	return b
}

// Excluded paths are neither saved nor touched by a restore.
func TestExclude(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	build(t, root, map[string]node{
		"outputs/report.md":           file(0o644, "r"),
		"outputs/.tool-results/x.txt": file(0o644, "kept out"),
	})
	s := openStore(t, t.TempDir(), Options{NoSync: true, Exclude: []string{"outputs/.tool-results"}})
	r := save(t, s, root, "one")
	if r.Info.Added != 2 { // outputs, outputs/report.md
		t.Errorf("saved %d entries, want 2", r.Info.Added)
	}
	if _, err := s.Stat(t.Context(), "1", "outputs/.tool-results"); !errors.Is(err, ErrNotFound) {
		t.Errorf("excluded path saved: %v", err)
	}
	must(t, os.WriteFile(filepath.Join(root, "outputs/.tool-results/y.txt"), []byte("later"), 0o644))
	if r := save(t, s, root, "two"); r.Saved {
		t.Error("a change in an excluded path made a checkpoint")
	}
	must(t, os.RemoveAll(filepath.Join(root, "outputs/report.md")))
	restore(t, s, root, "1")
	for _, p := range []string{"outputs/report.md", "outputs/.tool-results/x.txt", "outputs/.tool-results/y.txt"} {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			t.Errorf("after restore: %v", err)
		}
	}
	// A checkpoint without outputs at all keeps the excluded directory (and
	// so outputs) when restored.
	must(t, os.RemoveAll(filepath.Join(root, "outputs/report.md")))
	id := save(t, s, root, "three").Info.ID
	must(t, os.WriteFile(filepath.Join(root, "outputs/extra"), nil, 0o644))
	restore(t, s, root, id)
	if _, err := os.Stat(filepath.Join(root, "outputs/extra")); !os.IsNotExist(err) {
		t.Errorf("outputs/extra survived the restore: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "outputs/.tool-results/y.txt")); err != nil {
		t.Errorf("excluded file removed: %v", err)
	}
	for _, bad := range []string{"/abs", "..", "../x", ""} {
		if _, err := Open(t.TempDir(), Options{Exclude: []string{bad}}); err == nil {
			t.Errorf("Exclude %q accepted", bad)
		}
	}
}

// Restore takes the caller's lock for every file it writes or removes.
func TestRestoreLocksPaths(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	build(t, root, map[string]node{"keep": file(0o644, "k"), "mod": file(0o644, "m"), "gone": file(0o644, "g")})
	s := openStore(t, t.TempDir(), Options{NoSync: true})
	s.racy = 0 // else "keep", written just now, is rewritten to be safe
	save(t, s, root, "one")
	must(t, os.WriteFile(filepath.Join(root, "mod"), []byte("M"), 0o644))
	must(t, os.Remove(filepath.Join(root, "gone")))
	must(t, os.WriteFile(filepath.Join(root, "new"), []byte("n"), 0o644))
	var mu sync.Mutex
	var locked []string
	held := 0
	locker := LockerFunc(func(ctx context.Context, p string) (func(), error) {
		mu.Lock()
		defer mu.Unlock()
		locked = append(locked, p)
		held++
		return func() { mu.Lock(); held--; mu.Unlock() }, nil
	})
	res, err := s.Restore(t.Context(), root, "1", RestoreOptions{Locker: locker, SaveFirst: true})
	must(t, err)
	slices.Sort(locked)
	if !slices.Equal(locked, []string{"gone", "mod", "new"}) || held != 0 {
		t.Errorf("locked %q (%d still held), want gone, mod, new", locked, held)
	}
	if res.Undo.ID != "2" || !res.Undo.Auto || res.Undo.Changed() != 3 {
		t.Errorf("undo checkpoint: %+v", res.Undo)
	}
	// The undo checkpoint undoes.
	restore(t, s, root, res.Undo.ID)
	if b, _ := os.ReadFile(filepath.Join(root, "new")); string(b) != "n" {
		t.Errorf("undo: new = %q", b)
	}
	// A lock that fails stops the restore with a one-line error naming the
	// relative path.
	must(t, os.WriteFile(filepath.Join(root, "mod"), []byte("again"), 0o644))
	failing := LockerFunc(func(context.Context, string) (func(), error) { return nil, errors.New("busy") })
	_, err = s.Restore(t.Context(), root, "1", RestoreOptions{Locker: failing})
	if err == nil || strings.Contains(err.Error(), "\n") || strings.Contains(err.Error(), root) || !strings.Contains(err.Error(), "busy") {
		t.Errorf("failing lock: %v", err)
	}
}

// Export materializes a checkpoint in a new directory; Fork also seeds a
// new store with it.
func TestExportAndFork(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	build(t, root, map[string]node{
		"workspace/a":     file(0o755, "a"),
		"workspace/l":     link("../outside"),
		"workspace/empty": dir(0o700),
		"outputs/r":       file(0o600, "r"),
	})
	want := snapshot(t, root)
	s := openStore(t, t.TempDir(), Options{NoSync: true})
	save(t, s, root, "one")
	must(t, os.WriteFile(filepath.Join(root, "workspace/a"), []byte("changed"), 0o644))
	save(t, s, root, "two")

	base := t.TempDir()
	dst := filepath.Join(base, "exported")
	must(t, s.Export(t.Context(), "1", dst))
	sameSnap(t, "export", want, snapshot(t, dst))
	if err := s.Export(t.Context(), "1", dst); !errors.Is(err, ErrNotEmpty) {
		t.Errorf("Export into a full directory: %v", err)
	}

	forkRoot := filepath.Join(base, "fork")
	s2 := openStore(t, t.TempDir(), Options{NoSync: true})
	info, err := s.Fork(t.Context(), "1", s2, forkRoot, "forked from one")
	must(t, err)
	if info.ID != "1" || info.Message != "forked from one" {
		t.Errorf("fork's checkpoint: %+v", info)
	}
	sameSnap(t, "fork", want, snapshot(t, forkRoot))
	must(t, os.Remove(filepath.Join(forkRoot, "workspace/a")))
	restore(t, s2, forkRoot, "1")
	sameSnap(t, "fork restored", want, snapshot(t, forkRoot))
	checkObjects(t, s2.dir)
}

// Prune drops the oldest checkpoints down to the bound, keeps the newest
// whatever its size, and frees what only the dropped ones held.
func TestPrune(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	s := openStore(t, t.TempDir(), Options{NoSync: true})
	const size = 200 << 10
	for i := range 5 {
		b := make([]byte, size)
		rand.Read(b)
		must(t, os.WriteFile(filepath.Join(root, "f"), b, 0o644))
		must(t, os.WriteFile(filepath.Join(root, "same"), []byte("same in all"), 0o644))
		save(t, s, root, "v"+string(rune('1'+i)))
	}
	before, err := s.Usage(t.Context())
	must(t, err)
	if before < 5*size {
		t.Fatalf("usage %d, want at least %d", before, 5*size)
	}
	// Room for two versions: 4 and 5 stay.
	res, err := s.Prune(t.Context(), 2*size+8<<10)
	must(t, err)
	if !slices.Equal(res.Removed, []string{"1", "2", "3"}) || res.Bytes > 2*size+8<<10 || res.Freed < 3*size {
		t.Fatalf("Prune: %+v", res)
	}
	list, err := s.List(t.Context())
	must(t, err)
	if len(list) != 2 || list[0].ID != "4" || list[1].ID != "5" {
		t.Fatalf("after prune: %+v", list)
	}
	if n := checkObjects(t, s.dir); n > 2+2+1 { // 2 versions of f, 2 root trees, "same"
		t.Errorf("%d objects left, want 5", n)
	}
	after, err := s.Usage(t.Context())
	must(t, err)
	if after != res.Bytes || after >= before {
		t.Errorf("usage %d after prune (%d before), result says %d", after, before, res.Bytes)
	}
	// A bound below the newest alone keeps the newest.
	res, err = s.Prune(t.Context(), 1)
	must(t, err)
	if list, _ := s.List(t.Context()); len(list) != 1 || list[0].ID != "5" || !slices.Equal(res.Removed, []string{"4"}) {
		t.Fatalf("after prune to 1 byte: %+v, %+v", list, res)
	}
	must(t, os.Remove(filepath.Join(root, "f")))
	restore(t, s, root, "5")
	if fi, err := os.Stat(filepath.Join(root, "f")); err != nil || fi.Size() != size {
		t.Fatalf("restore after prune: %v", err)
	}
	// Ids are not reused.
	must(t, os.WriteFile(filepath.Join(root, "g"), []byte("g"), 0o644))
	if r := save(t, s, root, "next"); r.Info.ID != "6" {
		t.Errorf("next id %s, want 6", r.Info.ID)
	}
	// Within the bound, Prune removes nothing.
	if res, err := s.Prune(t.Context(), 1<<30); err != nil || len(res.Removed) != 0 {
		t.Errorf("Prune within bound: %+v, %v", res, err)
	}
}

// Another Store on the same directory (another process) prunes objects
// this one knew as stored: its next save must not name them without
// writing them again.
func TestPruneByAnotherProcess(t *testing.T) {
	t.Parallel()
	rootA, rootB := t.TempDir(), t.TempDir()
	workspace(t, rootA, 30)
	build(t, rootB, map[string]node{"other": file(0o644, "other")})
	dir := t.TempDir()
	a := openStore(t, dir, Options{NoSync: true})
	a.racy = 0
	b := openStore(t, dir, Options{NoSync: true})
	save(t, a, rootA, "a1")
	save(t, b, rootB, "b2")
	if _, err := b.Prune(t.Context(), 1); err != nil { // keeps only 2: rootA's objects go
		t.Fatal(err)
	}
	must(t, os.WriteFile(filepath.Join(rootA, "one more"), []byte("x"), 0o644))
	r := save(t, a, rootA, "a3")
	if r.Info.ID != "3" {
		t.Fatalf("a3: %+v", r.Info)
	}
	out := filepath.Join(t.TempDir(), "out")
	if err := a.Export(t.Context(), "3", out); err != nil {
		t.Fatalf("export of a checkpoint saved after another process pruned: %v", err)
	}
	sameSnap(t, "export", snapshot(t, rootA), snapshot(t, out))
}

// Two stores on one directory saving at once: every save is whole, ids
// are unique.
func TestConcurrentStores(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	workspace(t, root, 50)
	dir := t.TempDir()
	var wg sync.WaitGroup
	ids := make(chan string, 20)
	for w := range 2 {
		s := openStore(t, dir, Options{NoSync: true})
		wg.Go(func() {
			for i := range 5 {
				name := filepath.Join(root, "workspace", "w"+string(rune('0'+w)))
				os.WriteFile(name, []byte{byte(i)}, 0o644)
				r, err := s.Save(t.Context(), root, SaveOptions{Message: "x", Force: true})
				if err != nil {
					t.Error(err)
					return
				}
				ids <- r.Info.ID
			}
		})
	}
	wg.Wait()
	close(ids)
	seen := map[string]bool{}
	for id := range ids {
		if seen[id] {
			t.Errorf("id %s given twice", id)
		}
		seen[id] = true
	}
	if len(seen) != 10 {
		t.Errorf("%d checkpoints, want 10", len(seen))
	}
	checkObjects(t, dir)
}

// The context ends a save.
func TestSaveCancelled(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	workspace(t, root, 50)
	s := openStore(t, t.TempDir(), Options{NoSync: true})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := s.Save(ctx, root, SaveOptions{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled save: %v", err)
	}
	if list, _ := s.List(t.Context()); len(list) != 0 {
		t.Fatalf("a cancelled save listed: %+v", list)
	}
	if _, err := Open(filepath.Join(root, "workspace/src/pkg00/file00000.go"), Options{}); err == nil {
		t.Error("Open on a file succeeded")
	}
	if _, err := s.Save(t.Context(), filepath.Join(root, "missing"), SaveOptions{}); err == nil || strings.Contains(err.Error(), root) {
		t.Errorf("save of a missing root: %v", err)
	}
}
