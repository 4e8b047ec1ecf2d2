package hostfs

import (
	"github.com/sandbox-mcp/sandbox-mcp/filelock"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"

	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
