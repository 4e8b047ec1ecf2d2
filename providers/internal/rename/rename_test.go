package rename

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// A directory goes into a place only when nothing is there: an empty
// directory at the place is not replaced (rename(2) would; os.Rename
// looks first, with a window between), nor a full one, and the directory
// stays where it was.
func TestNoReplace(t *testing.T) {
	root := t.TempDir()
	from := filepath.Join(root, "from")
	if err := os.MkdirAll(filepath.Join(from, "user-data"), 0o755); err != nil {
		t.Fatal(err)
	}
	full := filepath.Join(root, "full")
	if err := os.MkdirAll(filepath.Join(full, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(root, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, to := range []string{empty, full} {
		if err := NoReplace(from, to); !errors.Is(err, fs.ErrExist) {
			t.Errorf("onto %s: %v, want fs.ErrExist", filepath.Base(to), err)
		}
		if _, err := os.Stat(filepath.Join(from, "user-data")); err != nil {
			t.Fatalf("after a refused rename onto %s: %v", filepath.Base(to), err)
		}
	}
	to := filepath.Join(root, "to")
	if err := NoReplace(from, to); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(to, "user-data")); err != nil {
		t.Fatal(err)
	}
}
