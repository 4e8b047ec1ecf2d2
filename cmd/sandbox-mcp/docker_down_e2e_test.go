package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/internal/testkit"
)

// The real binary with --provider docker started while the engine is down
// (DOCKER_HOST is a socket nobody listens on): it serves anyway, each call
// answers a clear error naming the engine, and calls work once the engine
// is back (a proxy to the real engine starts listening on that socket).
func TestE2EDockerEngineDownAtStart(t *testing.T) {
	t.Parallel()
	upstream := "/var/run/docker.sock"
	if h := os.Getenv("DOCKER_HOST"); strings.HasPrefix(h, "unix://") {
		upstream = strings.TrimPrefix(h, "unix://")
	}
	dir, cfgFile, _ := dockerE2EConfig(t)
	sock := filepath.Join(dir, "engine.sock")
	cmd := exec.Command(binary(t), "--config", cfgFile, "--state-dir", filepath.Join(dir, "state"), "--audit-log", "off", "--thread", "down")
	cmd.Env = append(os.Environ(), "DOCKER_HOST=unix://"+sock)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cs, stderr := stdioSession(t, ctx, cmd)
	defer cs.Close()
	bash := func() (string, bool) {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "bash", Arguments: map[string]any{"command": "echo up"}})
		if err != nil {
			t.Fatalf("bash: %v\n%s", err, stderr)
		}
		return res.Content[0].(*mcp.TextContent).Text, res.IsError
	}
	for range 2 {
		out, isErr := bash()
		if !isErr || !strings.Contains(out, "docker engine not reachable") || strings.Contains(out, dir) {
			t.Fatalf("bash with the engine down: error %v %q", isErr, out)
		}
	}
	// The engine comes back.
	stop := testkit.UnixProxy(t, sock, upstream)
	defer stop()
	if out, isErr := bash(); isErr || out != "up\n[exit code 0]" {
		t.Fatalf("bash once the engine is back: error %v %q\n%s", isErr, out, stderr)
	}
	cs.Close() // while the engine is reachable: remove_on_exit removes the container
	cmd.Wait()
}
