//go:build linux || darwin || freebsd

package checkpoint

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// node is one path of a test tree: a directory (dir), a symlink (link) or
// a regular file (data).
type node struct {
	mode fs.FileMode
	data string
	link string
	dir  bool
}

func file(mode fs.FileMode, data string) node { return node{mode: mode, data: data} }
func dir(mode fs.FileMode) node               { return node{mode: mode, dir: true} }
func link(target string) node                 { return node{link: target} }

// build makes spec under root, parents first.
func build(t testing.TB, root string, spec map[string]node) {
	t.Helper()
	paths := make([]string, 0, len(spec))
	for p := range spec {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	for _, p := range paths {
		n := spec[p]
		full := filepath.Join(root, p)
		must(t, os.MkdirAll(filepath.Dir(full), 0o755))
		switch {
		case n.dir:
			must(t, os.MkdirAll(full, 0o755))
			must(t, os.Chmod(full, n.mode))
		case n.link != "":
			os.Remove(full)
			must(t, os.Symlink(n.link, full))
		default:
			must(t, os.WriteFile(full, []byte(n.data), 0o600))
			must(t, os.Chmod(full, n.mode))
		}
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// snapEntry is what a path holds, compared exactly: type, mode, content
// (hashed), link text, modification time.
type snapEntry struct {
	typ   string
	mode  fs.FileMode
	sum   string
	link  string
	mtime int64
}

// snapshot lists everything below root (not root itself) without
// following symlinks.
func snapshot(t testing.TB, root string) map[string]snapEntry {
	t.Helper()
	out := map[string]snapEntry{}
	var walk func(dir, rel string)
	walk = func(dir, rel string) {
		ents, err := os.ReadDir(dir)
		must(t, err)
		for _, e := range ents {
			full := filepath.Join(dir, e.Name())
			crel := join(rel, e.Name())
			fi, err := os.Lstat(full)
			must(t, err)
			se := snapEntry{mode: fi.Mode() &^ fs.ModeType, mtime: fi.ModTime().UnixNano()}
			switch {
			case fi.Mode()&fs.ModeSymlink != 0:
				se.typ = "link"
				se.link, err = os.Readlink(full)
				must(t, err)
			case fi.IsDir():
				se.typ = "dir"
				walk(full, crel)
			case fi.Mode().IsRegular():
				se.typ = "file"
				b, err := os.ReadFile(full)
				must(t, err)
				sum := sha256.Sum256(b)
				se.sum = hex.EncodeToString(sum[:8])
			default:
				se.typ = "special"
			}
			if se.typ == "link" {
				se.mode = 0 // a symlink's mode is not restorable on Linux
			}
			out[crel] = se
		}
	}
	walk(root, ".")
	return out
}

// sameSnap fails the test with the differences between two snapshots.
func sameSnap(t testing.TB, what string, want, got map[string]snapEntry) {
	t.Helper()
	var diffs []string
	for p, w := range want {
		g, ok := got[p]
		switch {
		case !ok:
			diffs = append(diffs, fmt.Sprintf("missing %q", p))
		case g != w:
			diffs = append(diffs, fmt.Sprintf("%q: want %+v, got %+v", p, w, g))
		}
	}
	for p := range got {
		if _, ok := want[p]; !ok {
			diffs = append(diffs, fmt.Sprintf("extra %q", p))
		}
	}
	if len(diffs) > 0 {
		slices.Sort(diffs)
		if len(diffs) > 20 {
			diffs = append(diffs[:20], fmt.Sprintf("... %d more", len(diffs)-20))
		}
		t.Fatalf("%s: the trees differ:\n%s", what, strings.Join(diffs, "\n"))
	}
}

// checkObjects checks that every object of the store, loose or packed,
// hashes to its name, and that every pack's index is whole; it returns how
// many objects there are.
func checkObjects(t testing.TB, dir string) int {
	t.Helper()
	n := 0
	objects := filepath.Join(dir, "objects")
	fan, err := os.ReadDir(objects)
	must(t, err)
	for _, d := range fan {
		ents, err := os.ReadDir(filepath.Join(objects, d.Name()))
		must(t, err)
		for _, e := range ents {
			b, err := os.ReadFile(filepath.Join(objects, d.Name(), e.Name()))
			must(t, err)
			sum := sha256.Sum256(b)
			if hex.EncodeToString(sum[:]) != d.Name()+e.Name() {
				t.Errorf("object %s%s holds data hashing to %x", d.Name(), e.Name(), sum)
			}
			n++
		}
	}
	packs := filepath.Join(dir, "packs")
	ents, err := os.ReadDir(packs)
	must(t, err)
	for _, e := range ents {
		p, err := loadPack(packs, e.Name())
		if err != nil {
			t.Errorf("pack %s: %v", e.Name(), err)
			continue
		}
		b, err := os.ReadFile(filepath.Join(packs, e.Name()))
		must(t, err)
		for _, o := range p.index {
			if sha256.Sum256(b[o.off:o.off+o.n]) != o.h {
				t.Errorf("pack %s: object %x does not match its hash", e.Name(), o.h[:6])
			}
			n++
		}
	}
	return n
}

// objectAt is where object h's bytes lie, loose or packed, as the store
// sees it now.
func objectAt(t testing.TB, s *Store, h hash) (path string, off int64, packed bool) {
	t.Helper()
	must(t, s.refreshPacks())
	if l, ok := s.locate(h); ok {
		return filepath.Join(s.packDir(), l.p.name), l.off, true
	}
	return s.objPath(h), 0, false
}

// overwrite replaces object h's bytes in place with data, of the same
// length: a damaged store.
func overwrite(t testing.TB, s *Store, h hash, data []byte) {
	t.Helper()
	p, off, _ := objectAt(t, s, h)
	must(t, os.Chmod(p, 0o600))
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	must(t, err)
	_, err = f.WriteAt(data, off)
	must(t, err)
	must(t, f.Close())
}

// removeObject makes object h missing: its file, or the pack holding it.
func removeObject(t testing.TB, s *Store, h hash) {
	t.Helper()
	p, _, _ := objectAt(t, s, h)
	must(t, os.Remove(p))
}

func openStore(t testing.TB, dir string, opts Options) *Store {
	t.Helper()
	s, err := Open(dir, opts)
	must(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

func save(t testing.TB, s *Store, root, msg string) SaveResult {
	t.Helper()
	r, err := s.Save(t.Context(), root, SaveOptions{Message: msg})
	if err != nil {
		t.Fatalf("Save(%s): %v", msg, err)
	}
	return r
}

func restore(t testing.TB, s *Store, root, id string) RestoreResult {
	t.Helper()
	r, err := s.Restore(t.Context(), root, id, RestoreOptions{})
	if err != nil {
		t.Fatalf("Restore(%s): %v", id, err)
	}
	return r
}

// workspace makes a realistic tree: nested directories of small
// source-like files, n files in all, deterministic.
func workspace(t testing.TB, root string, n int) []string {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	var files []string
	words := []string{"func", "return", "if", "err", "nil", "package", "import", "for", "range", "type", "struct", "{", "}", "\n", "\t", "x", ":=", "0"}
	for i := 0; i < n; i++ {
		d := fmt.Sprintf("src/pkg%02d/mod%02d/sub%d", i%10, (i/10)%10, (i/100)%10)
		if i%7 == 0 {
			d = fmt.Sprintf("src/pkg%02d", i%10)
		}
		full := filepath.Join(root, "workspace", d)
		must(t, os.MkdirAll(full, 0o755))
		var b strings.Builder
		for size := 100 + rng.IntN(900); b.Len() < size; {
			b.WriteString(words[rng.IntN(len(words))])
			b.WriteByte(' ')
		}
		name := filepath.Join(full, fmt.Sprintf("file%05d.go", i))
		must(t, os.WriteFile(name, []byte(b.String()), 0o644))
		files = append(files, name)
	}
	for _, d := range []string{"uploads", "outputs"} {
		must(t, os.MkdirAll(filepath.Join(root, d), 0o755))
	}
	return files
}

func mkfifo(t testing.TB, p string) {
	t.Helper()
	must(t, syscall.Mkfifo(p, 0o644))
}
