package server_test

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestStructuredContentMasked: the facts of a result are masked as its
// text is. A job's command comes back from the sandbox: here it names the
// state dir (host bash), and neither the list's text nor its facts may.
func TestStructuredContentMasked(t *testing.T) {
	t.Parallel()
	r := startRawStdio(t)
	r.call(1, "bash", `{"command":"sleep 30 # `+r.state+`/x","run_in_background":true}`)
	res := r.call(2, "bash_output", `{}`)["result"].(map[string]any)
	raw, _ := json.Marshal(res)
	if strings.Contains(string(raw), r.state) {
		t.Errorf("bash_output names the state dir: %s", raw)
	}
	facts, _ := res["structuredContent"].(map[string]any)
	jobs, _ := facts["jobs"].([]any)
	if len(jobs) != 1 || !strings.Contains(jobs[0].(map[string]any)["command"].(string), "sleep 30 # /sandbox-mcp-state/x") {
		t.Errorf("structuredContent %v, want the job with its command masked", facts)
	}
	r.call(3, "bash_kill", `{"job":"j1","signal":"KILL"}`)
}
