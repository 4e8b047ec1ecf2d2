package audit_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/audit"
	"github.com/sandbox-mcp/sandbox-mcp/internal/testkit"
)

// With the disk full, Begin refuses: the call does not run. Once space is
// free, calls go on and the chain is intact.
func TestBeginRefusesWhenDiskFull(t *testing.T) {
	t.Parallel()
	dir := testkit.SmallFS(t, "1m")
	path := filepath.Join(dir, "audit.jsonl")
	w, err := audit.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := call(w, "ls", nil); err != nil {
		t.Fatal(err)
	}
	free := testkit.Fill(t, dir)
	ran := false
	err = call(w, "bash", func() { ran = true })
	if err == nil || ran {
		t.Fatalf("disk full: Begin = %v, ran %v; want the call refused", err, ran)
	}
	if !errors.Is(err, audit.ErrUnavailable) || !errors.Is(err, syscall.ENOSPC) || strings.Contains(err.Error(), dir) {
		t.Errorf("disk full: err = %q, want ErrUnavailable with ENOSPC, naming no path", err)
	}
	free()
	if err := call(w, "bash", nil); err != nil {
		t.Fatalf("space freed: %v", err)
	}
	if n := verify(t, path); n != 2 {
		t.Errorf("%d lines, want 2 (the refused call has none)", n)
	}
}

// A call that fills the disk itself still gets its line: Begin took the
// room before it ran.
func TestLineOfCallThatFillsTheDisk(t *testing.T) {
	t.Parallel()
	dir := testkit.SmallFS(t, "2m")
	path := filepath.Join(dir, "audit.jsonl")
	w, err := audit.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var free func()
	if err := call(w, "bash", func() { free = testkit.Fill(t, dir) }); err != nil {
		t.Fatalf("the line of the call that filled the disk: %v", err)
	}
	if n := verify(t, path); n != 1 {
		t.Errorf("%d lines, want 1", n)
	}
	free()
}

// A write cut short by a full disk leaves no partial line: the chain stays
// intact and the next line follows the last whole one.
func TestShortWriteLeavesNoPartialLine(t *testing.T) {
	t.Parallel()
	dir := testkit.SmallFS(t, "1m")
	path := filepath.Join(dir, "audit.jsonl")
	w, err := audit.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for range 3 {
		if err := w.Record(audit.Event{Tool: "ls"}); err != nil {
			t.Fatal(err)
		}
	}
	before, _ := os.ReadFile(path)
	free := testkit.Fill(t, dir)
	// Larger than the rest of the log's last page: the write starts, then
	// the disk is full (Record without Begin, as a caller that reserved
	// nothing).
	big := audit.Event{Tool: "bash", Args: map[string]any{"command": strings.Repeat("x", 8000)}}
	err = w.Record(big)
	if err == nil {
		t.Fatal("Record on a full disk succeeded")
	}
	if !errors.Is(err, audit.ErrUnavailable) || strings.Contains(err.Error(), dir) {
		t.Errorf("err = %q, want ErrUnavailable naming no path", err)
	}
	if after, _ := os.ReadFile(path); string(after) != string(before) {
		t.Errorf("log after a failed write:\n%q\nwant it unchanged:\n%q", after, before)
	}
	free()
	if err := w.Record(big); err != nil {
		t.Fatal(err)
	}
	if n := verify(t, path); n != 4 {
		t.Errorf("%d lines, want 4", n)
	}
}
