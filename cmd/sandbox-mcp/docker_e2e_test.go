package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// dockerE2EConfig skips (or fails, with SANDBOX_MCP_REQUIRE_DOCKER=1) when
// the engine or the base image is missing, and writes a docker config with
// a prefix of its own (returned) into a temp dir; every container of that prefix is
// removed when the test ends.
func dockerE2EConfig(t *testing.T) (dir, cfgFile, prefix string) {
	t.Helper()
	if err := exec.Command("docker", "image", "inspect", "sandbox-mcp-base:latest").Run(); err != nil {
		if os.Getenv("SANDBOX_MCP_REQUIRE_DOCKER") == "1" {
			t.Fatalf("docker or sandbox-mcp-base:latest unavailable: %v", err)
		}
		t.Skip("SKIPPED: docker or sandbox-mcp-base:latest unavailable (deploy/docker/build-images.sh)")
	}
	var b [4]byte
	rand.Read(b[:])
	prefix = "smcp-e2e-" + hex.EncodeToString(b[:])
	dir = t.TempDir()
	cfgFile = filepath.Join(dir, "config.yaml")
	os.WriteFile(cfgFile, []byte("provider: docker\ndocker:\n  container_prefix: "+prefix+"\n  memory: 256m\n  remove_on_exit: true\n"), 0o644)
	t.Cleanup(func() {
		out, _ := exec.Command("docker", "ps", "-aq", "--filter", "label=sandbox-mcp.prefix="+prefix).Output()
		for _, id := range strings.Fields(string(out)) {
			exec.Command("docker", "rm", "-f", id).Run()
		}
	})
	return dir, cfgFile, prefix
}

// The real binary with --provider docker, driven over stdio: the tools
// work in a container, and nothing names a host path.
func TestE2EDockerProvider(t *testing.T) {
	t.Parallel()
	dir, cfgFile, prefix := dockerE2EConfig(t)
	state := filepath.Join(dir, "state")
	cmd := exec.Command(binary(t), "--config", cfgFile, "--state-dir", state, "--audit-log", "off", "--thread", "dock")
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect: %v\n%s", err, stderr)
	}
	callText := func(name string, args map[string]any) (string, bool) {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return res.Content[0].(*mcp.TextContent).Text, res.IsError
	}
	if out, _ := callText("write_file", map[string]any{"path": "hello.txt", "content": "hi from the tool\n"}); out != "Wrote 17 bytes to /mnt/user-data/workspace/hello.txt" {
		t.Fatalf("write_file: %q", out)
	}
	out, _ := callText("bash", map[string]any{"command": "pwd; cat hello.txt; id -un; grep -c user-data /proc/self/mountinfo >/dev/null && cat /proc/self/mountinfo | grep user-data | head -3"})
	if !strings.HasPrefix(out, "/mnt/user-data/workspace\nhi from the tool\nsandbox\n") || !strings.HasSuffix(out, "[exit code 0]") {
		t.Fatalf("bash: %q", out)
	}
	if strings.Contains(out, state) || strings.Contains(out, dir) {
		t.Fatalf("bash output names a host path: %q", out)
	}
	if out, _ := callText("read_file", map[string]any{"path": "/etc/debian_version"}); out == "" {
		t.Fatal("read_file of a container path returned nothing")
	}
	if out, _ := callText("bash", map[string]any{"command": "sleep 30", "timeout": 1}); out != "[timed out after 1s]" {
		t.Fatalf("timeout: %q", out)
	}
	cs.Close()
	if err := cmd.Wait(); err != nil && !strings.Contains(err.Error(), "Wait was already called") {
		t.Logf("server exit: %v", err)
	}
	// remove_on_exit: nothing left behind.
	left, _ := exec.Command("docker", "ps", "-aq", "--filter", "label=sandbox-mcp.prefix="+prefix).Output()
	if strings.TrimSpace(string(left)) != "" {
		t.Fatalf("containers left after exit: %s", left)
	}
}
