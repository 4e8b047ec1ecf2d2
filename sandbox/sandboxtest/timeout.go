package sandboxtest

import (
	"io"
	"sync"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// TimeoutKillsOnlyItsCommand checks that a call's timeout kills its own
// command only: another one running in the same sandbox at once goes on
// and ends normally, whatever shell the box's kill runs with (dash,
// busybox sh). It takes some 8 seconds.
func TimeoutKillsOnlyItsCommand(t *testing.T, sb sandbox.Sandbox) {
	t.Helper()
	run(t, sb, "true", time.Minute)
	var wg sync.WaitGroup
	var out string
	var res sandbox.ExecResult
	wg.Go(func() {
		out, res = run(t, sb, "i=0; while [ $i -lt 8 ]; do sleep 1; i=$((i+1)); done; echo finished $i", time.Minute)
	})
	time.Sleep(500 * time.Millisecond)
	tres, err := sb.Exec(t.Context(), sandbox.ExecRequest{Command: "sleep 60", Timeout: time.Second, Output: io.Discard})
	if err != nil || !tres.TimedOut {
		t.Fatalf("the timed-out call: %+v %v", tres, err)
	}
	wg.Wait()
	if res.ExitCode != 0 || out != "finished 8\n" {
		t.Fatalf("the other call: exit %d %q", res.ExitCode, out)
	}
}
