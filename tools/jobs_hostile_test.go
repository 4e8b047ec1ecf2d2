package tools_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
)

// callCtx runs a tool with a deadline, without the fixture's host-path check.
func (f *fixture) callCtx(d time.Duration, name string, args map[string]any) (string, bool, time.Duration) {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(f.t.Context(), d)
	defer cancel()
	req := mcp.CallToolRequest{}
	req.Params.Name = name
	req.Params.Arguments = args
	start := time.Now()
	res := toolByName(f.t, name).Handle(ctx, f.env, req)
	el := time.Since(start)
	if res == nil || res.CallToolResult == nil || len(res.Content) != 1 {
		return "<nil>", true, el
	}
	tc, _ := res.Content[0].(mcp.TextContent)
	return tc.Text, res.IsError, el
}

// Red team (#16): a FIFO planted as the job log directory before a (new)
// supervisor's first job: lastLoggedJob's open blocks under the job
// table's lock.
func TestJobDirFIFO(t *testing.T) {
	f := newFixture(t)
	f.call("bash", map[string]any{"command": "rm -rf /mnt/user-data/outputs/.tool-results/jobs; mkdir -p /mnt/user-data/outputs/.tool-results; mkfifo /mnt/user-data/outputs/.tool-results/jobs; kill -9 $PPID"})
	got, isErr, el := f.callCtx(20*time.Second, "bash", map[string]any{"command": "echo hi", "run_in_background": true})
	t.Logf("run_in_background after the FIFO: %q err=%v in %v", got, isErr, el)
	if el > 10*time.Second {
		t.Errorf("run_in_background hung %v (FIFO as the jobs dir)", el)
	}
	got, isErr, el = f.callCtx(20*time.Second, "bash", map[string]any{"command": "echo fg", "reset": true})
	t.Logf("a foreground command next: %q err=%v in %v", got, isErr, el)
	if el > 10*time.Second || !strings.Contains(got, "fg") {
		t.Errorf("foreground command after the FIFO: %q in %v", got, el)
	}
}

// Red team (#16): with the FIFO planted, a foreground command that leaves an orphan
// (setsid) hangs in killOrphans -> jobGroup, behind the hung table lock.
func TestJobDirFIFOForegroundOrphan(t *testing.T) {
	f := newFixture(t)
	f.call("bash", map[string]any{"command": "rm -rf /mnt/user-data/outputs/.tool-results/jobs; mkdir -p /mnt/user-data/outputs/.tool-results; mkfifo /mnt/user-data/outputs/.tool-results/jobs; kill -9 $PPID"})
	f.callCtx(2*time.Second, "bash", map[string]any{"command": "echo hi", "run_in_background": true})
	got, _, el := f.callCtx(20*time.Second, "bash", map[string]any{"command": "setsid sleep 100 & echo fg", "reset": true, "timeout": 5})
	t.Logf("foreground with an orphan: %q in %v", got, el)
	if el > 10*time.Second {
		t.Errorf("a foreground command (timeout 5 s, reset) hung %v behind the FIFO-blocked job table", el)
	}
}
