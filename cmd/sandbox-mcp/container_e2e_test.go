package main

import (
	"strings"
	"testing"
)

// The release's image runs the server with SANDBOX_MCP_ISOLATION=container
// and no other flag than --thread (server.json): bash is on, and runs in
// the container, which is the sandbox (issue #25 item 1). $container
// stands for the container here, on a host as in one.
func TestE2EIsolationContainerRunsBash(t *testing.T) {
	t.Parallel()
	p := start(t, opts{noBash: true, env: []string{"SANDBOX_MCP_ISOLATION=container", "container=e2e"}})
	p.want("bash", map[string]any{"command": "echo hi; pwd"}, "hi\n/mnt/user-data/workspace\n[exit code 0]", false)
	if s := p.stderr.String(); !strings.Contains(s, "the container is the sandbox") {
		t.Errorf("start-up does not say that the container is the sandbox:\n%s", s)
	}
}
