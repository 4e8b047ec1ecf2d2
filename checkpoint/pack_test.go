//go:build linux || darwin || freebsd

package checkpoint

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A save or a prune killed (SIGKILL) at each point of its commit — while
// the pack is written, before and after its fsync and rename, before and
// after the checkpoint file's rename, while a prune repacks and drops
// packs — leaves a store that lists only whole checkpoints, each of which
// exports as it was saved; the leftovers go (temporary files at Open,
// orphaned packs at the next Prune), and saving goes on.
func TestPackKillPoints(t *testing.T) {
	t.Parallel()
	type tc struct {
		op, point string
		nth       int
		saved     bool // the killed save's checkpoint exists
	}
	cases := []tc{
		{"save", "pack-object", 5, false},
		{"save", "pack-written", 1, false},
		{"save", "pack-synced", 1, false},
		{"save", "pack-renamed", 1, false},
		{"save", "record-written", 1, false},
		{"save", "record-renamed", 1, true},
		{"prune", "pack-synced", 1, false},
		{"prune", "prune-repacked", 1, false},
		{"prune", "prune-drop", 2, false},
	}
	for _, c := range cases {
		t.Run(c.op+"/"+c.point, func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			files := workspace(t, root, 120)
			dir := t.TempDir()
			s := openStore(t, dir, Options{})
			var want []map[string]snapEntry
			for i := range 3 {
				change(t, files, 5, i)
				must(t, os.WriteFile(filepath.Join(root, "outputs", "big.bin"), bytes.Repeat([]byte{byte(i)}, smallFile+10), 0o644))
				save(t, s, root, "v"+strconv.Itoa(i))
				want = append(want, snapshot(t, root))
			}
			s.Close()
			if c.op == "save" {
				change(t, files, 5, 3)
			}
			killed := snapshot(t, root)

			cmd := exec.Command(os.Args[0], "-test.run=^TestPackKillHelper$")
			cmd.Env = append(os.Environ(), "CKPT_PACKKILL="+c.op+","+c.point+","+strconv.Itoa(c.nth), "CKPT_KILL_DIR="+dir, "CKPT_KILL_ROOT="+root)
			log, _ := cmd.CombinedOutput()
			if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
				t.Fatalf("the helper was not killed at %s: %v\n%s", c.point, cmd.ProcessState, log)
			}

			s = openStore(t, dir, Options{})
			if ents, _ := os.ReadDir(filepath.Join(dir, "tmp")); len(ents) != 0 {
				t.Errorf("%d temporary files left after Open", len(ents))
			}
			checkObjects(t, dir)
			list, err := s.List(t.Context())
			must(t, err)
			var ids []string
			for _, i := range list {
				ids = append(ids, i.ID)
			}
			switch {
			case c.op == "save" && c.saved:
				want = append(want, killed)
				if !slices.Equal(ids, []string{"1", "2", "3", "4"}) {
					t.Fatalf("checkpoints %q, want 1 to 4", ids)
				}
			case c.op == "save":
				if !slices.Equal(ids, []string{"1", "2", "3"}) {
					t.Fatalf("checkpoints %q, want 1 to 3", ids)
				}
			default: // the prune had not yet removed a checkpoint file, or had
				if len(ids) == 0 || ids[len(ids)-1] != "3" {
					t.Fatalf("checkpoints %q after a killed prune", ids)
				}
			}
			for _, id := range ids {
				n, _ := strconv.Atoi(id)
				out := filepath.Join(t.TempDir(), "x")
				if err := s.Export(t.Context(), id, out); err != nil {
					t.Fatalf("checkpoint %s does not export: %v", id, err)
				}
				sameSnap(t, "checkpoint "+id, want[n-1], snapshot(t, out))
			}
			// Saving goes on, and a prune leaves only what the kept
			// checkpoint names, each object once.
			change(t, files, 5, 9)
			r := save(t, s, root, "after")
			if !r.Saved {
				t.Fatal("no checkpoint after the kill")
			}
			if _, err := s.Prune(t.Context(), 1); err != nil {
				t.Fatal(err)
			}
			reach, err := s.reachable(t.Context(), r.Info.ID)
			must(t, err)
			if n := checkObjects(t, dir); n != len(reach) {
				t.Errorf("%d objects after prune, want the %d the newest checkpoint names", n, len(reach))
			}
			out := filepath.Join(t.TempDir(), "x")
			must(t, s.Export(t.Context(), r.Info.ID, out))
			sameSnap(t, "after the kill", snapshot(t, root), snapshot(t, out))
		})
	}
}

// TestPackKillHelper is TestPackKillPoints' child: it saves (or prunes to
// one byte) and kills itself at the nth time the store reaches the point.
func TestPackKillHelper(t *testing.T) {
	spec := os.Getenv("CKPT_PACKKILL")
	if spec == "" {
		return // run only by TestPackKillPoints
	}
	parts := strings.Split(spec, ",")
	op, point := parts[0], parts[1]
	nth, _ := strconv.Atoi(parts[2])
	s, err := Open(os.Getenv("CKPT_KILL_DIR"), Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	seen := 0
	s.hook = func(p, _ string) {
		if p == point {
			seen++ // the points this test uses are reached from one goroutine at a time
			if seen == nth {
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
				time.Sleep(time.Minute)
			}
		}
	}
	if op == "save" {
		_, err = s.Save(t.Context(), os.Getenv("CKPT_KILL_ROOT"), SaveOptions{Message: "killed"})
	} else {
		_, err = s.Prune(t.Context(), 1)
	}
	fmt.Fprintln(os.Stderr, "not killed:", err)
	os.Exit(3)
}

// A damaged pack is refused: an object whose bytes changed fails its
// hash, a damaged index or a cut file makes the whole pack's objects
// missing; either way Restore and Export fail with ErrCorrupt and change
// nothing, the next save writes the lost objects again, and Prune removes
// the refused pack.
func TestDamagedPack(t *testing.T) {
	t.Parallel()
	damages := map[string]func(t *testing.T, path string, size int64, obj int64){
		"object byte": func(t *testing.T, path string, _ int64, obj int64) { flip(t, path, obj) },
		"index byte":  func(t *testing.T, path string, size int64, _ int64) { flip(t, path, size-packTrailer-3) },
		"trailer":     func(t *testing.T, path string, size int64, _ int64) { flip(t, path, size-10) },
		"cut":         func(t *testing.T, path string, size int64, _ int64) { must(t, os.Truncate(path, size-1)) },
		"renamed": func(t *testing.T, path string, _ int64, _ int64) {
			must(t, os.Rename(path, filepath.Join(filepath.Dir(path), fmt.Sprintf("%064x", 7)+packSuffix)))
		},
	}
	for name, damage := range damages {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			build(t, root, map[string]node{"a": file(0o644, "original a"), "d/b": file(0o644, "original b")})
			dir := t.TempDir()
			s := openStore(t, dir, Options{NoSync: true})
			save(t, s, root, "one")
			e, err := s.Stat(t.Context(), "1", "d/b")
			must(t, err)
			var h hash
			copy(h[:], mustHex(t, e.Hash))
			path, off, packed := objectAt(t, s, h)
			if !packed {
				t.Fatal("a small file's content is not packed")
			}
			fi, err := os.Stat(path)
			must(t, err)
			damage(t, path, fi.Size(), off)

			must(t, os.WriteFile(filepath.Join(root, "d/b"), []byte("changed b"), 0o644))
			before := snapshot(t, root)
			s2 := openStore(t, dir, Options{NoSync: true}) // reads the packs anew
			if _, err := s2.Restore(t.Context(), root, "1", RestoreOptions{}); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Restore from a damaged pack: %v, want ErrCorrupt", err)
			}
			sameSnap(t, "after a refused restore", before, snapshot(t, root))
			out := filepath.Join(t.TempDir(), "x")
			if err := s2.Export(t.Context(), "1", out); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Export from a damaged pack: %v, want ErrCorrupt", err)
			}
			if _, err := os.Stat(out); !os.IsNotExist(err) {
				t.Errorf("a refused export left its directory: %v", err)
			}

			// The next save stores again what a refused pack lost (the
			// damaged object itself it cannot know of: its file is
			// unchanged and the pack's index vouches for it), and the
			// checkpoint restores once b is back.
			must(t, os.WriteFile(filepath.Join(root, "d/b"), []byte("original b"), 0o644))
			must(t, os.WriteFile(filepath.Join(root, "c"), []byte("new c"), 0o644))
			r := save(t, s2, root, "two")
			want := snapshot(t, root)
			if name != "object byte" {
				out = filepath.Join(t.TempDir(), "y")
				must(t, s2.Export(t.Context(), r.Info.ID, out))
				sameSnap(t, "saved after the damage", want, snapshot(t, out))
			}
			if _, err := s2.Prune(t.Context(), 1); err != nil {
				t.Fatal(err)
			}
			if name != "object byte" {
				checkObjects(t, dir)
				if n := len(must1(os.ReadDir(filepath.Join(dir, "packs")))); n != 1 {
					t.Errorf("%d packs after prune, want 1 (the refused one removed)", n)
				}
			}
		})
	}
}

func must1[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func flip(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	must(t, err)
	defer f.Close()
	b := make([]byte, 1)
	_, err = f.ReadAt(b, off)
	must(t, err)
	b[0] ^= 0x40
	_, err = f.WriteAt(b, off)
	must(t, err)
}

// Prune with packs: packs that only dropped checkpoints name go, packs
// with some kept objects are rewritten to one, the kept checkpoints
// export as saved, nothing unreferenced stays, and another Store on the
// directory (another process) that knew the old packs reads the new one.
func TestPruneWithPacks(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	files := workspace(t, root, 200)
	dir := t.TempDir()
	s := openStore(t, dir, Options{NoSync: true})
	other := openStore(t, dir, Options{NoSync: true})
	var snaps []map[string]snapEntry
	for i := range 6 {
		change(t, files, 20, i)
		save(t, s, root, "v"+strconv.Itoa(i))
		snaps = append(snaps, snapshot(t, root))
	}
	if _, err := other.List(t.Context()); err != nil { // other loads the six packs
		t.Fatal(err)
	}
	if n := len(must1(os.ReadDir(filepath.Join(dir, "packs")))); n != 6 {
		t.Fatalf("%d packs after 6 saves, want 6", n)
	}
	// Keep the newest two: room for what they name, and their files.
	u, err := s.Usage(t.Context())
	must(t, err)
	union := map[hash]int64{}
	for _, id := range []string{"5", "6"} {
		m, err := s.reachable(t.Context(), id)
		must(t, err)
		maps.Copy(union, m)
	}
	var need int64
	for _, n := range union {
		need += n
	}
	res, err := s.Prune(t.Context(), need+2048)
	must(t, err)
	if !slices.Equal(res.Removed, []string{"1", "2", "3", "4"}) || res.Freed <= 0 || res.Bytes >= u {
		t.Fatalf("Prune: %+v (usage %d before)", res, u)
	}
	reach := map[hash]bool{}
	for _, id := range []string{"5", "6"} {
		m, err := s.reachable(t.Context(), id)
		must(t, err)
		for h := range m {
			reach[h] = true
		}
	}
	if n := checkObjects(t, dir); n != len(reach) {
		t.Errorf("%d objects after prune, want %d", n, len(reach))
	}
	for _, st := range []*Store{s, other} {
		for _, id := range []string{"5", "6"} {
			n, _ := strconv.Atoi(id)
			out := filepath.Join(t.TempDir(), "x")
			must(t, st.Export(t.Context(), id, out))
			sameSnap(t, "kept "+id, snaps[n-1], snapshot(t, out))
		}
	}
	// The other store's next save names only objects that exist.
	change(t, files, 3, 40)
	r := save(t, other, root, "by the other")
	out := filepath.Join(t.TempDir(), "y")
	must(t, s.Export(t.Context(), r.Info.ID, out))
	sameSnap(t, "saved by the other store", snapshot(t, root), snapshot(t, out))
}

// The pack writer copies what it is given (callers reuse their buffers)
// and writes in the background; a write that fails there fails waitFiles,
// and leaves neither a pack nor a temporary file.
func TestPackWriter(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := openStore(t, dir, Options{})
	buf := []byte("first content")
	h1 := sha256.Sum256(buf)
	w := s.newWriter()
	must(t, w.putBytes(h1, buf))
	copy(buf, "XXXXXXXXXXXXX") // reused at once
	must(t, w.wait())
	b, err := s.readObject(h1)
	if err != nil || string(b) != "first content" {
		t.Fatalf("object after its buffer was reused: %q, %v", b, err)
	}
	rc, err := s.openObject(h1, int64(len(b)))
	must(t, err)
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || string(got) != "first content" {
		t.Fatalf("openObject: %q, %v", got, err)
	}

	w = s.newWriter()
	data := []byte("second")
	must(t, w.putBytes(sha256.Sum256(data), data))
	w.pack.f.Close() // the background writer's file fails under it
	if err := w.waitFiles(); err == nil {
		t.Fatal("waitFiles after a failed write: nil error")
	}
	if n := len(must1(os.ReadDir(filepath.Join(dir, "packs")))); n != 1 {
		t.Errorf("%d packs, want the first only", n)
	}
	if n := len(must1(os.ReadDir(filepath.Join(dir, "tmp")))); n != 0 {
		t.Errorf("%d temporary files left", n)
	}
}

// A walk of the live tree (Changes against now, Restore) becomes the stat
// cache: the next save does not read again the files it found unchanged
// (also those the latest save found racy), but does read a content it
// hashed and did not store.
func TestLiveWalkRefreshesStatCache(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	files := workspace(t, root, 60)
	s := openStore(t, t.TempDir(), Options{NoSync: true})
	s.racy = int64(time.Hour)
	save(t, s, root, "one") // every file racy, as if written just before
	if len(s.cache.racy) < 60 {
		t.Fatalf("%d racy paths, want every file", len(s.cache.racy))
	}
	s.racy = int64(100 * time.Millisecond)
	time.Sleep(200 * time.Millisecond)
	if _, err := s.Changes(t.Context(), root, "1", ""); err != nil {
		t.Fatal(err)
	}
	if s.reads < 60 {
		t.Fatalf("the live walk read %d files, want the 60 racy ones", s.reads)
	}
	if r := save(t, s, root, "two"); r.Saved || s.reads != 0 {
		t.Fatalf("save after a live walk: saved %v, read %d; want nothing read", r.Saved, s.reads)
	}

	// A change the live walk hashed (not stored) is read and stored by
	// the save after.
	time.Sleep(200 * time.Millisecond)
	must(t, os.WriteFile(files[7], []byte("changed, seen by Changes only"), 0o644))
	time.Sleep(200 * time.Millisecond)
	ch, err := s.Changes(t.Context(), root, "1", "")
	if err != nil || len(ch) != 1 || s.reads != 1 {
		t.Fatalf("Changes: %+v, %v, read %d", ch, err, s.reads)
	}
	r := save(t, s, root, "three")
	if !r.Saved || r.Info.Modified != 1 || s.reads != 1 {
		t.Fatalf("save after Changes: %+v, read %d; want the changed file read", r.Info, s.reads)
	}
	out := filepath.Join(t.TempDir(), "x")
	must(t, s.Export(t.Context(), r.Info.ID, out))
	sameSnap(t, "export", snapshot(t, root), snapshot(t, out))

	// After a restore, the next save reads only what the restore wrote.
	time.Sleep(200 * time.Millisecond)
	must(t, os.WriteFile(files[9], []byte("to be undone"), 0o644))
	time.Sleep(200 * time.Millisecond)
	restore(t, s, root, r.Info.ID)
	if r := save(t, s, root, "four"); r.Saved || s.reads != 1 {
		t.Fatalf("save after a restore: saved %v, read %d; want 1 (the restored file)", r.Saved, s.reads)
	}
}

// Export makes the missing parents of its destination, and removes them
// again when it fails.
func TestExportMakesParents(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	build(t, root, map[string]node{"a": file(0o644, "a"), "d/b": file(0o600, "b")})
	s := openStore(t, t.TempDir(), Options{NoSync: true})
	save(t, s, root, "one")
	base := t.TempDir()
	dst := filepath.Join(base, "threads", "t1", "user-data")
	must(t, s.Export(t.Context(), "1", dst))
	sameSnap(t, "export", snapshot(t, root), snapshot(t, dst))

	e, err := s.Stat(t.Context(), "1", "d/b")
	must(t, err)
	var h hash
	copy(h[:], mustHex(t, e.Hash))
	overwrite(t, s, h, []byte("X"))
	// A damaged object is found before anything is made; a failure while
	// writing (a parent made read-only) removes what Export made.
	if err := s.Export(t.Context(), "1", filepath.Join(base, "new", "x")); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Export of a damaged checkpoint: %v", err)
	}
	if _, err := os.Stat(filepath.Join(base, "new")); !os.IsNotExist(err) {
		t.Errorf("a failed export left its parents: %v", err)
	}
	overwrite(t, s, h, []byte("b"))
	var calls int
	s.hook = func(point, rel string) {
		if point == "restore-open-dir" && rel == "d" {
			calls++
			d := filepath.Join(base, "made", "deep", "x", "d")
			must(t, os.Remove(d))
			must(t, os.Symlink(base, d))
		}
	}
	if err := s.Export(t.Context(), "1", filepath.Join(base, "made", "deep", "x")); err == nil || calls == 0 {
		t.Fatalf("Export into a directory swapped for a symlink: %v (hook called %d times)", err, calls)
	} else if bytes.Contains([]byte(err.Error()), []byte(base)) {
		t.Errorf("error names a host path: %v", err)
	}
	if _, err := os.Stat(filepath.Join(base, "made")); !os.IsNotExist(err) {
		t.Errorf("a failed export left its parents: %v", err)
	}
	// A destination written with a trailing slash: the failed export
	// removes what it made, not the (empty) parent that was there.
	parent := filepath.Join(base, "empty-parent")
	must(t, os.Mkdir(parent, 0o755))
	s.hook = func(point, rel string) {
		if point == "restore-open-dir" && rel == "d" {
			d := filepath.Join(parent, "x", "d")
			must(t, os.Remove(d))
			must(t, os.Symlink(base, d))
		}
	}
	if err := s.Export(t.Context(), "1", parent+"/x/"); err == nil {
		t.Fatal("Export into a directory swapped for a symlink succeeded")
	}
	if ents, err := os.ReadDir(parent); err != nil || len(ents) != 0 {
		t.Errorf("the parent after a failed export: %d entries, %v", len(ents), err)
	}
}

// A store saved many times and never pruned for room has its small packs
// merged by the cheap Prune: one pack, each object once, every checkpoint
// whole — also for another Store on the directory that knew the old packs.
func TestPruneConsolidatesPacks(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	files := workspace(t, root, 50)
	dir := t.TempDir()
	s := openStore(t, dir, Options{NoSync: true})
	other := openStore(t, dir, Options{NoSync: true})
	var snaps []map[string]snapEntry
	for i := range maxSmallPacks + 3 {
		change(t, files, 2, i)
		save(t, s, root, "v"+strconv.Itoa(i))
		snaps = append(snaps, snapshot(t, root))
	}
	if _, err := other.List(t.Context()); err != nil {
		t.Fatal(err)
	}
	before := checkObjects(t, dir)
	if res, err := s.Prune(t.Context(), 1<<40); err != nil || len(res.Removed) != 0 {
		t.Fatalf("Prune within bound: %+v, %v", res, err)
	}
	if n := len(must1(os.ReadDir(filepath.Join(dir, "packs")))); n != 1 {
		t.Errorf("%d packs after the cheap prune, want 1", n)
	}
	if n := checkObjects(t, dir); n != before {
		t.Errorf("%d objects after merging, %d before", n, before)
	}
	for _, st := range []*Store{other, s} {
		for i, want := range snaps {
			out := filepath.Join(t.TempDir(), "x")
			must(t, st.Export(t.Context(), strconv.Itoa(i+1), out))
			sameSnap(t, "checkpoint "+strconv.Itoa(i+1), want, snapshot(t, out))
		}
	}
}

// What is not a regular file in packs/ (a FIFO, a directory) is never
// opened — a FIFO would block — and a prune removes it.
func TestPackDirHostileEntries(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	build(t, root, map[string]node{"a": file(0o644, "a")})
	dir := t.TempDir()
	s := openStore(t, dir, Options{NoSync: true})
	save(t, s, root, "one")
	fifo := filepath.Join(dir, "packs", fmt.Sprintf("%064x", 1)+packSuffix)
	mkfifo(t, fifo)
	withDeadline(t, "open and export with a fifo in packs/", func() {
		s2 := openStore(t, dir, Options{NoSync: true})
		must(t, s2.Export(t.Context(), "1", filepath.Join(t.TempDir(), "x")))
		if _, err := s2.Prune(t.Context(), 1); err != nil {
			t.Error(err)
		}
	})
	if _, err := os.Lstat(fifo); !os.IsNotExist(err) {
		t.Errorf("the fifo in packs/ survived a prune: %v", err)
	}
}

// A restore leaves a racy file whose content is already the checkpoint's
// in place (read and compared, not rewritten: its inode stays), and one
// whose content changed after the scan read it as it is: that write is in
// no checkpoint (the file is listed as left, not as changed).
func TestRestoreRacyUnchangedFiles(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	spec := map[string]node{"other/x": file(0o644, "x")}
	for i := range 20 {
		spec["d/f"+strconv.Itoa(i)] = file(0o644, "content of file "+strconv.Itoa(i))
	}
	build(t, root, spec)
	s := openStore(t, t.TempDir(), Options{NoSync: true})
	s.racy = int64(time.Hour) // every file racy
	save(t, s, root, "one")
	want := snapshot(t, root)
	inode := func(rel string) uint64 {
		fi, err := os.Stat(filepath.Join(root, rel))
		must(t, err)
		return fi.Sys().(*syscall.Stat_t).Ino
	}
	inodes := map[string]uint64{}
	for p := range spec {
		inodes[p] = inode(p)
	}
	must(t, os.WriteFile(filepath.Join(root, "d/f3"), []byte("changed"), 0o644))
	// d/f5 changes between the scan and its check, keeping its size.
	s.hook = func(point, rel string) {
		if point == "restore-fix-file" && rel == "d/f5" {
			must(t, os.WriteFile(filepath.Join(root, rel), []byte("CONTENT OF FILE 5"), 0o644))
		}
	}
	res := restore(t, s, root, "1")
	if len(res.Changes) != 1 || res.Changes[0].Path != "d/f3" {
		t.Errorf("changes %+v, want d/f3 only", res.Changes)
	}
	if len(res.Skipped) != 1 || res.Skipped[0] != (Skip{Path: "d/f5", Reason: keptReason}) {
		t.Errorf("skipped %+v, want d/f5 left as it is", res.Skipped)
	}
	got := snapshot(t, root)
	if f5 := got["d/f5"]; f5.sum == want["d/f5"].sum {
		t.Errorf("d/f5, written after the restore's walk, was put back: %+v", f5)
	}
	delete(want, "d/f5")
	delete(got, "d/f5")
	sameSnap(t, "restored", want, got)
	for p := range spec {
		if rewritten, want := inode(p) != inodes[p], p == "d/f3"; rewritten != want {
			t.Errorf("%s: rewritten %v, want %v", p, rewritten, want)
		}
	}
}

// A save of a few small files allocates little: the server keeps a
// store per thread, and a thousand threads' first saves each leaving a
// megabyte of garbage (the pack's write buffer was 1 MiB) grew its RSS
// by 90 MB (bench/run.sh -only density).
func TestSmallSaveAllocatesLittle(t *testing.T) {
	root := t.TempDir()
	build(t, root, map[string]node{"a.txt": file(0o644, "a"), "d/b.txt": file(0o644, "b")})
	s := openStore(t, t.TempDir(), Options{NoSync: true})
	save(t, s, root, "first")
	const n = 20
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	for i := range n {
		must(t, os.WriteFile(filepath.Join(root, "a.txt"), []byte(strconv.Itoa(i)), 0o644))
		if _, err := s.Save(t.Context(), root, SaveOptions{Auto: true}); err != nil {
			t.Fatal(err)
		}
	}
	runtime.ReadMemStats(&m1)
	if per := (m1.TotalAlloc - m0.TotalAlloc) / n; per > 512<<10 {
		t.Errorf("a save of one changed small file allocates %d KiB", per>>10)
	} else {
		t.Logf("a save of one changed small file allocates %d KiB", per>>10)
	}
}
