package testkit

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// SmallFS mounts a tmpfs of size (mount's size=, "1m") for the test: a
// file system that can be filled. It needs root (CI runs as root);
// elsewhere the test is skipped, saying why.
func SmallFS(t *testing.T, size string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "fs")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size="+size+",mode=0755"); err != nil {
		t.Skipf("cannot mount a small tmpfs to fill (needs root; CI runs as root): %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}

// Fill writes a file in dir until the file system is full, to its last
// byte, and returns a function that frees the space again.
func Fill(t *testing.T, dir string) (free func()) {
	t.Helper()
	p := filepath.Join(dir, "filler")
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling %s: %v", dir, err)
			}
			break
		}
	}
	// The last page too: write byte by byte until nothing more fits.
	for {
		if _, err := f.Write(buf[:1]); err != nil {
			break
		}
	}
	return func() {
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
	}
}
