package filelock_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/filelock"
)

// Two opens of one file exclude each other, also within one process; the
// lock goes on Unlock and on Close.
func TestTwoOpensExclude(t *testing.T) {
	t.Parallel()
	name := filepath.Join(t.TempDir(), "x.lock")
	open := func() *os.File {
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	a, b := open(), open()
	if err := filelock.Lock(a); err != nil {
		t.Fatalf("Lock: %v", err)
	}
	if err := filelock.TryLock(b); !errors.Is(err, filelock.ErrLocked) {
		t.Fatalf("TryLock while held = %v, want ErrLocked", err)
	}
	if err := filelock.Unlock(a); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	if err := filelock.TryLock(b); err != nil {
		t.Fatalf("TryLock after Unlock = %v, want nil", err)
	}
	b.Close()
	if err := filelock.TryLock(a); err != nil {
		t.Fatalf("TryLock after the holder closed = %v, want nil", err)
	}
}
