package main

import (
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/internal/testkit"
)

// Host bash (--isolation none --allow-host-bash): a child that leaves the
// command's process group and session (setsid, a double fork) does not
// outlive the call, nor the server when the server is killed (issue 13.12).
func TestE2EHostBashSetsidChildrenReaped(t *testing.T) {
	t.Parallel()
	t.Run("call returns", func(t *testing.T) {
		t.Parallel()
		p := start(t, opts{isolation: "none"})
		marker := fmt.Sprintf("E2E_SETSID=%d-%d", os.Getpid(), time.Now().UnixNano())
		t.Cleanup(func() { killMarked(marker) })
		// The marker is the children's alone: exported, it would be the
		// shell state's, and the spare shell started from that state as
		// the call ends (a process of the sandbox, not a leftover) would
		// carry it too.
		cmd := marker + " setsid sleep 300 </dev/null >/dev/null 2>&1 & (" + marker + " setsid sh -c 'sleep 300' </dev/null >/dev/null 2>&1 &); sleep 0.2; echo started"
		p.want("bash", map[string]any{"command": cmd}, "started\n[exit code 0]", false)
		waitGone(t, p, marker, "the call returned")
		p.want("bash", map[string]any{"command": "echo still here"}, "still here\n[exit code 0]", false)
	})
	t.Run("server killed", func(t *testing.T) {
		t.Parallel()
		p := start(t, opts{isolation: "none", rawPipes: true})
		marker := fmt.Sprintf("E2E_SETSID=%d-%d", os.Getpid(), time.Now().UnixNano())
		t.Cleanup(func() { killMarked(marker) })
		cmd := "export " + marker + "; setsid sleep 300 </dev/null >/dev/null 2>&1 & sleep 300"
		go p.cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "bash", Arguments: map[string]any{"command": cmd}})
		deadline := time.Now().Add(30 * time.Second)
		for len(testkit.Marked(marker)) < 2 {
			if time.Now().After(deadline) {
				t.Fatalf("the command's processes never showed up\nstderr:\n%s", p.stderr)
			}
			time.Sleep(20 * time.Millisecond)
		}
		p.cmd.Process.Kill()
		waitGone(t, p, marker, "the server was killed")
	})
}

// killMarked kills a test's own leftovers.
func killMarked(marker string) {
	for _, pid := range testkit.Marked(marker) {
		syscall.Kill(pid, syscall.SIGKILL)
	}
}
