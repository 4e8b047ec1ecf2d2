package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/providers/local"
)

// Two stdio servers on one state dir and one thread (two clients
// spawning one each), in bubblewrap: each server has its own supervisor
// of the thread, and their jobs' ids are still unique in the thread, each
// job's log its own (#24 item 6: both handed out j2, the second log
// clobbering the first).
func TestE2EJobIDsAcrossProcesses(t *testing.T) {
	t.Parallel()
	requireBwrap(t)
	state := filepath.Join(t.TempDir(), "state")
	a := start(t, opts{stateDir: state, thread: "shared", isolation: "bwrap"})
	b := start(t, opts{stateDir: state, thread: "shared", isolation: "bwrap"})
	started := regexp.MustCompile(`\[job (j\d+) started\]`)
	var ids []string
	want := map[string]string{}
	for i, p := range []*proc{a, b, a, b} {
		out := "from-" + string(rune('a'+i))
		got, isErr := p.call("bash", map[string]any{"command": "echo " + out + "; exec sleep 120", "run_in_background": true})
		m := started.FindStringSubmatch(got)
		if isErr || m == nil {
			t.Fatalf("job %d: %q", i, got)
		}
		if slices.Contains(ids, m[1]) {
			t.Errorf("job %d got %s, an id handed out already (%v)", i, m[1], ids)
		}
		ids = append(ids, m[1])
		want[m[1]] = out + "\n"
	}
	dir := filepath.Join(local.ThreadDir(state, "shared"), "outputs", ".tool-results", "jobs")
	for id, w := range want {
		if got, err := os.ReadFile(filepath.Join(dir, id+".log")); err != nil || string(got) != w {
			t.Errorf("log of %s: %q %v, want %q", id, got, err, w)
		}
	}
	for i, p := range []*proc{a, b, a, b} {
		p.call("bash_kill", map[string]any{"job": ids[i], "signal": "KILL"})
	}
}
