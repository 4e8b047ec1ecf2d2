package audit_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/audit"
)

func verify(t *testing.T, path string) int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n, err := audit.Verify(f)
	if err != nil {
		t.Fatalf("audit verify %s: %v", filepath.Base(path), err)
	}
	return n
}

// call is what the server does around a tool call: Begin, run, Record.
func call(w *audit.Writer, tool string, run func()) error {
	ev, err := w.Begin(audit.Event{Tool: tool, Args: map[string]any{"command": "x"}})
	if err != nil {
		return err
	}
	if run != nil {
		run()
	}
	ev.Outcome = audit.OK
	return w.Record(ev)
}
