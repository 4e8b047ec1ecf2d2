package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/audit"
	"github.com/sandbox-mcp/sandbox-mcp/providers/local"
)

// Two server processes on one state dir and one thread, as two clients
// spawning one each: concurrent appends to one file lose nothing, and the
// shared audit log's hash chain stays intact.
func TestE2ETwoProcessesShareAThread(t *testing.T) {
	t.Parallel()
	state := filepath.Join(t.TempDir(), "state")
	auditPath := filepath.Join(t.TempDir(), "audit.jsonl")
	a := start(t, opts{stateDir: state, thread: "shared", auditPath: auditPath, isolation: "none"})
	b := start(t, opts{stateDir: state, thread: "shared", auditPath: auditPath, isolation: "none"})
	const each = 60
	var wg sync.WaitGroup
	for i, p := range []*proc{a, b} {
		for j := range each {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if out, isErr := p.call("write_file", map[string]any{"path": "log.txt", "content": fmt.Sprintf("p%d-%d\n", i, j), "append": true}); isErr {
					t.Errorf("append: %s", out)
				}
			}()
		}
	}
	wg.Wait()
	b2, err := os.ReadFile(filepath.Join(local.ThreadDir(state, "shared"), "workspace", "log.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b2), "\n"); n != 2*each {
		t.Fatalf("%d lines, want %d: updates were lost across processes", n, 2*each)
	}
	f, err := os.Open(auditPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if n, err := audit.Verify(f); err != nil || n != 2*each {
		t.Fatalf("shared audit log: %d lines, %v", n, err)
	}
}
