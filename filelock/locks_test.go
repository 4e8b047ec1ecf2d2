package filelock

import (
	"context"
	"os"
	"testing"
	"time"
)

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestLocks(t *testing.T) {
	t.Parallel()
	l := NewLocks()
	unlock, err := l.Lock(t.Context(), "k")
	must(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	if _, err := l.Lock(ctx, "k"); err == nil {
		t.Fatal("second Lock of a held key succeeded")
	}
	other, err := l.Lock(t.Context(), "other")
	must(t, err)
	other()
	unlock()
	unlock() // twice is harmless
	again, err := l.Lock(t.Context(), "k")
	must(t, err)
	again()
	if l.Len() != 0 {
		t.Fatalf("entries left: %d", l.Len())
	}
}

// Two tables over one directory stand for two processes: their locks on
// one key exclude each other.
func TestFileLocksAcrossTables(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a, err := NewFileLocks(dir)
	must(t, err)
	b, err := NewFileLocks(dir)
	must(t, err)
	unlock, err := a.Lock(t.Context(), "file")
	must(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if _, err := b.Lock(ctx, "file"); err == nil {
		t.Fatal("the other table took a held lock")
	}
	unlock()
	again, err := b.Lock(t.Context(), "file")
	must(t, err)
	again()
	if ents, _ := os.ReadDir(dir); len(ents) > 64 {
		t.Fatalf("%d lock files", len(ents))
	}
}
