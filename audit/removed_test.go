package audit_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/audit"
)

// A log removed while open refuses every call (it is not made again); a
// log replaced at its path (rotated) is opened again and written to.
func TestBeginRefusesWhenLogRemoved(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.jsonl")
	w, err := audit.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := call(w, "ls", nil); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	ran := false
	err = call(w, "bash", func() { ran = true })
	if err == nil || ran || !errors.Is(err, audit.ErrUnavailable) || !strings.Contains(err.Error(), "removed") || strings.Contains(err.Error(), dir) {
		t.Fatalf("log removed: err = %v, ran %v; want the call refused, saying the log was removed, naming no path", err, ran)
	}
	if _, err := os.Stat(path); err == nil {
		t.Errorf("a removed log was made again")
	}

	// Rotation: the old log renamed, a new one made at the path.
	path2 := filepath.Join(dir, "audit2.jsonl")
	w2, err := audit.OpenFile(path2)
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Close()
	if err := call(w2, "ls", nil); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path2, path2+".1"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path2, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := call(w2, "bash", nil); err != nil {
		t.Fatalf("after rotation: %v", err)
	}
	if n := verify(t, path2); n != 1 {
		t.Errorf("new log: %d lines, want 1", n)
	}
	if n := verify(t, path2+".1"); n != 1 {
		t.Errorf("rotated log: %d lines, want 1", n)
	}
}

// A line torn by a writer killed mid-write is cut off by the next writer:
// the chain goes on from the last whole line.
func TestTornLineIsCutOff(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	writeLog(t, path, 1, 3)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"time":"2026-01-01T00:00:00Z","tool":"ba`)
	f.Close()
	writeLog(t, path, 1, 2)
	if n := verify(t, path); n != 5 {
		t.Errorf("%d lines, want 5", n)
	}
	// Only a torn line: cut to nothing.
	path2 := filepath.Join(t.TempDir(), "audit.jsonl")
	os.WriteFile(path2, []byte(`{"tool":"x"`), 0o600)
	writeLog(t, path2, 1, 1)
	if n := verify(t, path2); n != 1 {
		t.Errorf("%d lines, want 1", n)
	}
}
