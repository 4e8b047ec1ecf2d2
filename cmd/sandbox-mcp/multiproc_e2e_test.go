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

// Two server processes on one state dir reached through two spellings (the
// dir and a symlink to it), one thread: the per-file lock is keyed by what
// the path resolves to, not by how the state dir was typed, so concurrent
// appends (write_file append) and edits (str_replace) from both lose
// nothing (issue 13.8: 199 of 300 appends kept).
func TestE2EStateDirSymlinkSharesLocks(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(state, link); err != nil {
		t.Fatal(err)
	}
	auditPath := filepath.Join(t.TempDir(), "audit.jsonl")
	a := start(t, opts{stateDir: state, thread: "shared", auditPath: auditPath, isolation: "none"})
	b := start(t, opts{stateDir: link, thread: "shared", auditPath: auditPath, isolation: "none"})
	a.want("write_file", map[string]any{"path": "edits.txt", "content": "END\n"}, "Wrote 4 bytes to /mnt/user-data/workspace/edits.txt", false)
	const each = 50
	var wg sync.WaitGroup
	for i, p := range []*proc{a, b} {
		for j := range each {
			wg.Go(func() {
				if out, isErr := p.call("write_file", map[string]any{"path": "log.txt", "content": fmt.Sprintf("p%d-%d\n", i, j), "append": true}); isErr {
					t.Errorf("append: %s", out)
				}
			})
			wg.Go(func() {
				if out, isErr := p.call("str_replace", map[string]any{"path": "edits.txt", "old_str": "END", "new_str": fmt.Sprintf("p%d-%d\nEND", i, j)}); isErr {
					t.Errorf("str_replace: %s", out)
				}
			})
		}
	}
	wg.Wait()
	ws := filepath.Join(local.ThreadDir(state, "shared"), "workspace")
	for _, name := range []string{"log.txt", "edits.txt"} {
		got, err := os.ReadFile(filepath.Join(ws, name))
		if err != nil {
			t.Fatal(err)
		}
		for i := range 2 {
			for j := range each {
				if !strings.Contains(string(got), fmt.Sprintf("p%d-%d\n", i, j)) {
					t.Errorf("%s lost update p%d-%d (%d lines kept of %d)", name, i, j, strings.Count(string(got), "\n"), 2*each)
				}
			}
		}
	}
}
