package hostfs

import (
	"github.com/sandbox-mcp/sandbox-mcp/filelock"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"

	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// On Linux the fast path (openat2 RESOLVE_BENEATH) is the one the other
// tests exercise: make sure it is on, and that it refuses escapes itself.
func TestOpenBeneathIsUsedAndConfines(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "f.txt"), []byte("in"), 0o644)
	os.Mkdir(filepath.Join(dir, "sub"), 0o755)
	os.Symlink("/etc", filepath.Join(dir, "abs"))
	os.Symlink("../..", filepath.Join(dir, "sub", "up"))
	os.Symlink("f.txt", filepath.Join(dir, "ok"))
	h, err := Open([]sandbox.Mount{{Virtual: "/w", Host: dir}}, filelock.NewLocks())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if h.mounts[0].beneath == nil {
		t.Skip("SKIPPED: openat2 unavailable on this kernel: os.Root serves every open")
	}
	for name, want := range map[string]error{
		"abs/passwd":   sandbox.ErrOutsideRoot,
		"sub/up/etc":   sandbox.ErrOutsideRoot,
		"sub/../../x":  sandbox.ErrOutsideRoot,
		"ok":           nil,
		"sub/../f.txt": nil,
	} {
		f, err := openBeneath(h.mounts[0].beneath, name, 0)
		if !errors.Is(err, want) && !(want == nil && err == nil) {
			t.Errorf("%s: err %v, want %v", name, err, want)
		}
		if f != nil {
			f.Close()
		}
	}
	d, err := openBeneath(h.mounts[0].beneath, "sub", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if n := d.(*os.File).Name(); !strings.HasPrefix(n, "/proc/self/fd/") {
		t.Errorf("directory named %q: ReadDir's type fallback would lstat relative to the working directory", n)
	}
}

// A directory held open (OpenDir) opens its entries as Open opens their
// paths: the same files, the same symlinks followed within the mount, the
// same refused out of it; and no name of more than one component.
func TestOpenDirOpensAsOpen(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	root := filepath.Join(dir, "mount")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "sub", "deeper"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "secret"), []byte("outside"), 0o644))
	must(os.WriteFile(filepath.Join(root, "top.txt"), []byte("top"), 0o644))
	must(os.WriteFile(filepath.Join(root, "sub", "f.txt"), []byte("f"), 0o644))
	for name, target := range map[string]string{
		"up":     "../top.txt",        // out of the directory, within the mount
		"self":   "f.txt",             // within the directory
		"down":   "deeper/../f.txt",   // within
		"abs":    "/etc/passwd",       // absolute
		"escape": "../../secret",      // out of the mount
		"loop":   "loop",              // itself
		"dangle": "nothing-is-here",   // to nothing
		"updir":  "../sub/../top.txt", // out and back in
	} {
		must(os.Symlink(target, filepath.Join(root, "sub", name)))
	}
	h, err := Open([]sandbox.Mount{{Virtual: "/w", Host: root}}, filelock.NewLocks())
	must(err)
	defer h.Close()
	if h.mounts[0].beneath == nil {
		t.Skip("SKIPPED: openat2 unavailable on this kernel: OpenDir answers ErrUnsupported")
	}
	d, err := h.OpenDir(t.Context(), "/w/sub")
	must(err)
	defer d.Close()
	entries, err := d.ReadDir()
	must(err)
	want, err := os.ReadDir(filepath.Join(root, "sub"))
	must(err)
	if len(entries) != len(want) {
		t.Fatalf("Dir.ReadDir: %d entries, os.ReadDir %d", len(entries), len(want))
	}
	read := func(f interface{ Read([]byte) (int, error) }) string {
		b := make([]byte, 64)
		n, _ := f.Read(b)
		return string(b[:n])
	}
	for i, e := range entries {
		if e.Name() != want[i].Name() || e.Type() != want[i].Type() {
			t.Errorf("entry %d: %s %v, os.ReadDir's %s %v", i, e.Name(), e.Type(), want[i].Name(), want[i].Type())
		}
		f1, err1 := d.Open(e.Name())
		f2, err2 := h.Open(t.Context(), "/w/sub/"+e.Name())
		switch {
		case (err1 == nil) != (err2 == nil):
			t.Errorf("%s: Dir.Open err %v, Open err %v", e.Name(), err1, err2)
		case err1 != nil && err1.Error() != err2.Error():
			t.Errorf("%s: Dir.Open err %q, Open err %q", e.Name(), err1, err2)
		case err1 == nil && e.Name() != "deeper":
			if c1, c2 := read(f1), read(f2); c1 != c2 {
				t.Errorf("%s: Dir.Open read %q, Open %q", e.Name(), c1, c2)
			}
		}
		if err1 != nil && strings.Contains(err1.Error(), dir) {
			t.Errorf("%s: error names the host path: %v", e.Name(), err1)
		}
		for _, f := range []interface{ Close() error }{f1, f2} {
			if f != nil {
				f.Close()
			}
		}
	}
	for _, name := range []string{"", ".", "..", "deeper/../f.txt", "../top.txt"} {
		if f, err := d.Open(name); err == nil {
			f.Close()
			t.Errorf("Dir.Open(%q) opened, want refused: one component only", name)
		}
	}
	if _, err := h.OpenDir(t.Context(), "/"); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("OpenDir of a directory made up above the mounts: %v, want ErrUnsupported", err)
	}
	if _, err := h.OpenDir(t.Context(), "/elsewhere"); !errors.Is(err, sandbox.ErrOutsideRoot) {
		t.Errorf("OpenDir outside the mounts: %v, want ErrOutsideRoot", err)
	}
}

// Dir.ReadDir lists what os.ReadDir lists, with the same types, over more
// than one getdents batch, and types an entry the file system gives no
// type for by an lstat.
func TestDirReadDirAsOS(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	for i := range 700 { // names of ~40 bytes: several 8 KiB batches
		name := filepath.Join(root, fmt.Sprintf("entry-with-a-rather-long-name-%04d", i))
		var err error
		switch i % 5 {
		case 0:
			err = os.Mkdir(name, 0o755)
		case 1:
			err = os.Symlink("elsewhere", name)
		case 2:
			err = syscall.Mkfifo(name, 0o644)
		default:
			err = os.WriteFile(name, nil, 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	h, err := Open([]sandbox.Mount{{Virtual: "/w", Host: root}}, filelock.NewLocks())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if h.mounts[0].beneath == nil {
		t.Skip("SKIPPED: openat2 unavailable on this kernel: OpenDir answers ErrUnsupported")
	}
	d, err := h.OpenDir(t.Context(), "/w")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	got, err := d.ReadDir()
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("%d entries, os.ReadDir %d", len(got), len(want))
	}
	for i := range got {
		if got[i].Name() != want[i].Name() || got[i].Type() != want[i].Type() || got[i].IsDir() != want[i].IsDir() {
			t.Errorf("entry %d: %v, os.ReadDir's %v", i, got[i], want[i])
		}
	}
	fd := d.(*dirHandle).fd
	for _, e := range want[:5] {
		typ, ok := entryType(fd, e.Name(), unix.DT_UNKNOWN)
		if !ok || typ != e.Type() {
			t.Errorf("%s, type unknown to the file system: %v %v, want %v", e.Name(), typ, ok, e.Type())
		}
	}
	if _, ok := entryType(fd, "gone", unix.DT_UNKNOWN); ok {
		t.Errorf("an entry gone since the listing has a type")
	}
}
