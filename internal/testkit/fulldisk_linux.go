package testkit

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

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

// WaitFree waits until the file system of dir has at least n bytes free:
// a removed file's space comes back only when its last descriptor closes.
func WaitFree(t *testing.T, dir string, n int64) {
	t.Helper()
	var free int64
	if !Poll(10*time.Second, 5*time.Millisecond, func() bool {
		var st unix.Statfs_t
		if err := unix.Statfs(dir, &st); err != nil {
			t.Fatal(err)
		}
		free = int64(st.Bavail) * int64(st.Bsize)
		return free >= n
	}) {
		t.Fatalf("%s: %d bytes free after 10 s, want %d: something holds a removed file open", dir, free, n)
	}
}
