//go:build linux || darwin || freebsd

package checkpoint

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	mrand "math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Symlinks planted in the tree — where directories and files were, new
// ones, a hard link to an outside file — are replaced or removed by a
// restore, never followed: nothing outside the root changes.
func TestRestoreHostileSymlinks(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	root := filepath.Join(base, "user-data")
	outside := filepath.Join(base, "outside")
	build(t, outside, map[string]node{
		"secret":      file(0o600, "sentinel"),
		"hard":        file(0o600, "H"),
		"dir/inner":   file(0o644, "inner"),
		"dir/keep/me": file(0o644, "me"),
	})
	build(t, root, map[string]node{
		"workspace/x/f1":     file(0o644, "f1"),
		"workspace/x/sub/f2": file(0o755, "f2"),
		"workspace/f":        file(0o644, "f"),
		"workspace/h":        file(0o644, "H"),
		"workspace/e":        dir(0o755),
		"uploads/u":          file(0o644, "u"),
		"outputs/o":          file(0o644, "o"),
	})
	want := snapshot(t, root)
	s := openStore(t, t.TempDir(), Options{NoSync: true})
	s.racy = 0
	save(t, s, root, "clean")
	sentinel := snapshot(t, outside)
	outsideInfo, err := os.Stat(outside)
	must(t, err)

	ws := filepath.Join(root, "workspace")
	must(t, os.RemoveAll(filepath.Join(ws, "x")))
	must(t, os.Symlink(outside, filepath.Join(ws, "x"))) // a directory replaced by a symlink out
	must(t, os.Remove(filepath.Join(ws, "f")))
	must(t, os.Symlink(filepath.Join(outside, "secret"), filepath.Join(ws, "f"))) // a file replaced
	must(t, os.Symlink(outside, filepath.Join(ws, "evil")))                       // a new one, to be removed
	must(t, os.Symlink("../../outside/dir", filepath.Join(ws, "evil-rel")))
	must(t, os.Remove(filepath.Join(ws, "e")))
	must(t, os.Symlink(filepath.Join(outside, "dir"), filepath.Join(ws, "e"))) // an empty dir replaced
	must(t, os.RemoveAll(filepath.Join(root, "uploads")))
	must(t, os.Symlink(outside, filepath.Join(root, "uploads"))) // a top-level dir replaced
	must(t, os.Remove(filepath.Join(root, "outputs/o")))
	must(t, os.Symlink(filepath.Join(outside, "secret"), filepath.Join(root, "outputs/o")))
	must(t, os.Remove(filepath.Join(ws, "h")))
	must(t, os.Link(filepath.Join(outside, "hard"), filepath.Join(ws, "h"))) // same content, another mode

	res, err := s.Restore(t.Context(), root, "1", RestoreOptions{SaveFirst: true})
	must(t, err)
	sameSnap(t, "outside", sentinel, snapshot(t, outside))
	if fi, err := os.Stat(outside); err != nil || fi.ModTime() != outsideInfo.ModTime() || fi.Mode() != outsideInfo.Mode() {
		t.Errorf("the outside directory itself changed: %v", err)
	}
	sameSnap(t, "restored", want, snapshot(t, root))
	// The undo checkpoint holds the symlinks as links, not what they point to.
	e, err := s.Stat(t.Context(), res.Undo.ID, "workspace/x")
	must(t, err)
	if e.Target != outside {
		t.Errorf("undo checkpoint's workspace/x: %+v", e)
	}
	if _, err := s.Stat(t.Context(), res.Undo.ID, "workspace/x/secret"); !errors.Is(err, ErrNotFound) {
		t.Errorf("the save went through a symlink: %v", err)
	}
	// Restoring the hostile state makes the links again, still touching
	// nothing outside.
	restore(t, s, root, res.Undo.ID)
	if target, err := os.Readlink(filepath.Join(root, "uploads")); err != nil || target != outside {
		t.Errorf("uploads after undo: %q, %v", target, err)
	}
	sameSnap(t, "outside after undo", sentinel, snapshot(t, outside))
}

// A tree object crafted with a name that climbs out ("..", "a/b") is
// refused before anything is written, even with a valid hash.
func TestHostileTreeObject(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	root := filepath.Join(base, "root")
	must(t, os.Mkdir(root, 0o755))
	s := openStore(t, t.TempDir(), Options{NoSync: true})
	blob := []byte("pwned")
	bh := sha256.Sum256(blob)
	for i, name := range []string{"..", "../escape", "a/b", ".", "", "nul\x00"} {
		w := s.newWriter()
		must(t, w.putBytes(bh, blob))
		tr := encodeTree([]entry{{name: name, kind: kindFile, mode: 0o644, size: int64(len(blob)), hash: bh}})
		must(t, w.putBytes(tr.hash, tr.data))
		must(t, w.wait())
		id := 100 + i
		r := &record{V: 1, ID: strconv.Itoa(id), Time: time.Now(), Root: hex.EncodeToString(tr.hash[:]), root: tr.hash}
		must(t, s.writeRecord(r, nil))
		_, err := s.Restore(t.Context(), root, r.ID, RestoreOptions{})
		if !errors.Is(err, ErrCorrupt) {
			t.Errorf("name %q: Restore = %v, want ErrCorrupt", name, err)
		}
		if err := s.Export(t.Context(), r.ID, filepath.Join(base, "x"+strconv.Itoa(id))); !errors.Is(err, ErrCorrupt) {
			t.Errorf("name %q: Export = %v, want ErrCorrupt", name, err)
		}
	}
	ents, _ := os.ReadDir(base)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{"root"}) {
		t.Errorf("written beside the root: %q", names)
	}
	if ents, _ := os.ReadDir(root); len(ents) != 0 {
		t.Errorf("written in the root: %d entries", len(ents))
	}
}

// FIFOs and sockets are never opened (a save does not hang on them), are
// reported, and a restore leaves them alone — or replaces one that stands
// where the checkpoint has a file.
func TestSpecialFiles(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	build(t, root, map[string]node{"data": file(0o644, "data")})
	mkfifo(t, filepath.Join(root, "pipe"))
	l, err := net.Listen("unix", filepath.Join(root, "sock"))
	if err != nil {
		t.Fatalf("unix socket: %v", err)
	}
	defer l.Close()
	s := openStore(t, t.TempDir(), Options{NoSync: true})

	var r SaveResult
	withDeadline(t, "save with a fifo", func() { r = save(t, s, root, "one") })
	want := []Skip{{"pipe", "fifo"}, {"sock", "socket"}}
	if !slices.Equal(r.Skipped, want) {
		t.Errorf("Skipped = %+v, want %+v", r.Skipped, want)
	}
	if e, err := s.Stat(t.Context(), "1", "pipe"); err != nil || e.Skipped != "fifo" {
		t.Errorf("Stat(pipe) = %+v, %v", e, err)
	}
	withDeadline(t, "changes with a fifo", func() {
		ch, err := s.Changes(t.Context(), root, "1", "")
		if err != nil || len(ch) != 0 {
			t.Errorf("Changes(1, live) = %+v, %v", ch, err)
		}
	})
	// A FIFO where the checkpoint has a file; a new FIFO; a directory
	// where the checkpoint skipped a FIFO.
	must(t, os.Remove(filepath.Join(root, "data")))
	mkfifo(t, filepath.Join(root, "data"))
	mkfifo(t, filepath.Join(root, "pipe2"))
	must(t, os.Remove(filepath.Join(root, "pipe")))
	must(t, os.Mkdir(filepath.Join(root, "pipe"), 0o755))
	must(t, os.WriteFile(filepath.Join(root, "pipe", "inside"), nil, 0o644))
	withDeadline(t, "restore with fifos", func() {
		res := restore(t, s, root, "1")
		var paths []string
		for _, c := range res.Changes {
			paths = append(paths, c.Path+" "+string(c.Kind))
		}
		if want := []string{"data modified", "pipe2 deleted"}; !slices.Equal(paths, want) {
			t.Errorf("restore's changes %q, want %q", paths, want)
		}
	})
	if _, err := os.Stat(filepath.Join(root, "pipe", "inside")); err != nil {
		t.Errorf("what stands where the checkpoint skipped a fifo was not left alone: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(root, "data")); err != nil || string(b) != "data" {
		t.Errorf("data after restore: %q, %v", b, err)
	}
	if _, err := os.Lstat(filepath.Join(root, "pipe2")); !os.IsNotExist(err) {
		t.Errorf("a fifo added since survived: %v", err)
	}
}

func withDeadline(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatalf("%s: still running after 60 s (hung on a special file?)", what)
	}
}

// Names with newlines and control characters, names of 255 bytes, and a
// tree deeper than a save descends: saved and restored, the deep part
// skipped and left alone, errors one line.
func TestHostileNames(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	spec := map[string]node{
		"a\nb":                file(0o644, "newline"),
		"\r\x1b[31mred":       file(0o644, "escape"),
		"sp ace/ ":            file(0o644, "space"),
		"-rf":                 file(0o644, "dash"),
		long('x', 255):        file(0o644, "long"),
		"d/" + long('y', 255): dir(0o755),
	}
	build(t, root, spec)
	deep := root
	for range maxDepth + 8 {
		deep = filepath.Join(deep, "d")
	}
	must(t, os.MkdirAll(deep, 0o755))
	must(t, os.WriteFile(filepath.Join(deep, "bottom"), []byte("bottom"), 0o644))
	want := snapshot(t, root)
	s := openStore(t, t.TempDir(), Options{NoSync: true})
	s.racy = 0 // only what changed is rewritten, so the failing lock below is a\nb's
	r := save(t, s, root, "one")
	if len(r.Skipped) != 1 || r.Skipped[0].Reason != "too deep" || strings.Count(r.Skipped[0].Path, "/") != maxDepth {
		t.Fatalf("Skipped = %+v", r.Skipped)
	}
	for p := range spec {
		must(t, os.RemoveAll(filepath.Join(root, p)))
	}
	restore(t, s, root, "1")
	sameSnap(t, "restored", want, snapshot(t, root))

	failing := LockerFunc(func(context.Context, string) (func(), error) { return nil, errors.New("no") })
	must(t, os.Remove(filepath.Join(root, "a\nb")))
	_, err := s.Restore(t.Context(), root, "1", RestoreOptions{Locker: failing})
	if err == nil || strings.ContainsAny(err.Error(), "\n\r\x1b") || !strings.Contains(err.Error(), `"a\nb"`) {
		t.Errorf("error about a name with a newline: %q", err)
	}
}

// Files rewritten while a save reads them never make a corrupt object:
// every object hashes to its name, and every checkpoint restores.
func TestConcurrentWritersWhileSaving(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	for i := range 12 {
		must(t, os.WriteFile(filepath.Join(root, "f"+strconv.Itoa(i)), []byte("start"), 0o644))
	}
	s := openStore(t, t.TempDir(), Options{NoSync: true})
	ctx, stop := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	for w := range 3 {
		wg.Go(func() {
			rng := mrand.New(mrand.NewPCG(uint64(w), 7))
			buf := make([]byte, 600<<10)
			for ctx.Err() == nil {
				name := filepath.Join(root, "f"+strconv.Itoa(rng.IntN(12)))
				n := rng.IntN(len(buf))
				rand.Read(buf[:n])
				if rng.IntN(2) == 0 {
					os.WriteFile(name, buf[:n], 0o644) // truncate and write: a reader sees any prefix
				} else if f, err := os.OpenFile(name, os.O_WRONLY, 0); err == nil {
					f.WriteAt(buf[:n], int64(rng.IntN(1<<20))) // in place, growing
					f.Close()
				}
			}
		})
	}
	var ids []string
	for range 10 {
		r, err := s.Save(t.Context(), root, SaveOptions{Force: true})
		if err != nil {
			stop()
			wg.Wait()
			t.Fatal(err)
		}
		ids = append(ids, r.Info.ID)
	}
	stop()
	wg.Wait()
	checkObjects(t, s.dir)
	for _, id := range ids {
		out := filepath.Join(t.TempDir(), "out")
		if err := s.Export(t.Context(), id, out); err != nil {
			t.Fatalf("export of %s: %v", id, err)
		}
	}
}

// A tree object never makes the decoder panic or accept a name that
// leaves its directory.
func FuzzDecodeTree(f *testing.F) {
	var h hash
	f.Add(encodeTree(nil).data)
	f.Add(encodeTree([]entry{{name: "a", kind: kindFile, mode: 0o644, size: 3, hash: h}, {name: "b", kind: kindSymlink, target: "/etc"}}).data)
	f.Add(encodeTree([]entry{{name: "d", kind: kindDir, mode: 0o1777}, {name: "p", kind: kindSkipped, target: "fifo"}}).data)
	f.Add([]byte("CKT1\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"))
	f.Fuzz(func(t *testing.T, b []byte) {
		tr, err := decodeTree(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error not ErrCorrupt: %v", err)
			}
			return
		}
		for i, e := range tr.entries {
			if !validName(e.name) || (i > 0 && tr.entries[i-1].name >= e.name) {
				t.Fatalf("accepted name %q", e.name)
			}
		}
		if again, err := decodeTree(encodeTree(tr.entries).data); err != nil || !sameEntries(again.entries, tr.entries) {
			t.Fatalf("re-encoding does not round-trip: %v", err)
		}
	})
}

// The tree changes between a check and the open that follows it: a
// directory or file becomes a symlink out, or a FIFO. The open does not
// follow it (nor block): nothing outside is read or written.
func TestRaces(t *testing.T) {
	t.Parallel()
	setup := func(t *testing.T) (root, outside string, s *Store) {
		base := t.TempDir()
		root, outside = filepath.Join(base, "root"), filepath.Join(base, "outside")
		build(t, outside, map[string]node{"secret": file(0o600, "sentinel outside")})
		build(t, root, map[string]node{"d/f": file(0o644, "f"), "g": file(0o644, "g")})
		s = openStore(t, t.TempDir(), Options{NoSync: true})
		s.racy = 0
		return root, outside, s
	}
	swap := func(t *testing.T, p, target string) {
		os.Rename(p, p+".moved")
		if target == "" {
			mkfifo(t, p)
		} else {
			must(t, os.Symlink(target, p))
		}
	}
	t.Run("save: file becomes a symlink", func(t *testing.T) {
		t.Parallel()
		root, outside, s := setup(t)
		s.hook = func(point, rel string) {
			if point == "save-open-file" && rel == "g" {
				swap(t, filepath.Join(root, "g"), filepath.Join(outside, "secret"))
			}
		}
		r := save(t, s, root, "one")
		if e, err := s.Stat(t.Context(), r.Info.ID, "g"); err != nil || e.Skipped != "changed while saving" {
			t.Fatalf("g = %+v, %v", e, err)
		}
	})
	t.Run("save: file becomes a fifo", func(t *testing.T) {
		t.Parallel()
		root, _, s := setup(t)
		s.hook = func(point, rel string) {
			if point == "save-open-file" && rel == "g" {
				swap(t, filepath.Join(root, "g"), "")
			}
		}
		withDeadline(t, "save", func() {
			r := save(t, s, root, "one")
			if e, err := s.Stat(t.Context(), r.Info.ID, "g"); err != nil || e.Skipped != "changed while saving" {
				t.Errorf("g = %+v, %v", e, err)
			}
		})
	})
	t.Run("save: directory becomes a symlink", func(t *testing.T) {
		t.Parallel()
		root, outside, s := setup(t)
		s.hook = func(point, rel string) {
			if point == "save-open-dir" && rel == "d" {
				swap(t, filepath.Join(root, "d"), outside)
			}
		}
		r := save(t, s, root, "one")
		if e, err := s.Stat(t.Context(), r.Info.ID, "d"); err != nil || e.Skipped != "changed while saving" {
			t.Fatalf("d = %+v, %v", e, err)
		}
	})
	t.Run("restore: directory becomes a symlink", func(t *testing.T) {
		t.Parallel()
		root, outside, s := setup(t)
		save(t, s, root, "one")
		must(t, os.RemoveAll(filepath.Join(root, "d")))
		sentinel := snapshot(t, outside)
		s.hook = func(point, rel string) {
			if point == "restore-open-dir" && rel == "d" {
				swap(t, filepath.Join(root, "d"), outside)
			}
		}
		_, err := s.Restore(t.Context(), root, "1", RestoreOptions{})
		if err == nil || strings.Contains(err.Error(), root) {
			t.Errorf("restore into a swapped directory: %v", err)
		}
		sameSnap(t, "outside", sentinel, snapshot(t, outside))
	})
	t.Run("restore: file becomes a symlink before its chmod", func(t *testing.T) {
		t.Parallel()
		root, outside, s := setup(t)
		save(t, s, root, "one")
		must(t, os.Chmod(filepath.Join(root, "g"), 0o600))
		s.racy = 0
		save(t, s, root, "two")
		must(t, os.Chmod(filepath.Join(outside, "secret"), 0o600))
		sentinel := snapshot(t, outside)
		s.hook = func(point, rel string) {
			if point == "restore-fix-file" && rel == "g" {
				swap(t, filepath.Join(root, "g"), filepath.Join(outside, "secret"))
			}
		}
		res := restore(t, s, root, "1")
		sameSnap(t, "outside", sentinel, snapshot(t, outside))
		// Swapped after the walk, by a writer the locks do not exclude:
		// left as it is (never followed), and said.
		if fi, err := os.Lstat(filepath.Join(root, "g")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
			t.Errorf("g after restore: %v, %v", fi.Mode(), err)
		}
		if len(res.Skipped) != 1 || res.Skipped[0].Path != "g" {
			t.Errorf("skipped %+v, want g", res.Skipped)
		}
	})
}

// Setuid is never kept, nor a file's setgid; a directory's setgid and
// sticky bits are. A tree object that asks for a setuid file is refused.
func TestModeBits(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	build(t, root, map[string]node{
		"sgid-dir":   dir(os.ModeSetgid | 0o775),
		"sticky-dir": dir(os.ModeSticky | 0o777),
		"suid-file":  file(os.ModeSetuid|0o755, "x"),
		"sgid-file":  file(os.ModeSetgid|0o755, "y"),
	})
	s := openStore(t, t.TempDir(), Options{NoSync: true})
	save(t, s, root, "one")
	out := filepath.Join(t.TempDir(), "out")
	must(t, s.Export(t.Context(), "1", out))
	for p, want := range map[string]os.FileMode{
		"sgid-dir": os.ModeDir | os.ModeSetgid | 0o775, "sticky-dir": os.ModeDir | os.ModeSticky | 0o777,
		"suid-file": 0o755, "sgid-file": 0o755,
	} {
		fi, err := os.Lstat(filepath.Join(out, p))
		if err != nil || fi.Mode() != want {
			t.Errorf("%s: mode %v, want %v (%v)", p, fi.Mode(), want, err)
		}
	}
	blob := []byte("x")
	bh := sha256.Sum256(blob)
	w := s.newWriter()
	must(t, w.putBytes(bh, blob))
	tr := encodeTree([]entry{{name: "f", kind: kindFile, mode: 0o4755, size: 1, hash: bh}})
	must(t, w.putBytes(tr.hash, tr.data))
	must(t, w.wait())
	must(t, s.writeRecord(&record{V: 1, ID: "50", Time: time.Now(), Root: hex.EncodeToString(tr.hash[:]), root: tr.hash}, nil))
	if err := s.Export(t.Context(), "50", filepath.Join(t.TempDir(), "x")); !errors.Is(err, ErrCorrupt) {
		t.Errorf("a setuid file in a tree: %v, want ErrCorrupt", err)
	}
}
