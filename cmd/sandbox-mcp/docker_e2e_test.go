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

	"github.com/sandbox-mcp/sandbox-mcp/internal/testkit"
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
	// The image is named: the default is a stock one the engine pulls,
	// and tests pull nothing.
	os.WriteFile(cfgFile, []byte("provider: docker\ndocker:\n  container_prefix: "+prefix+"\n  memory: 256m\n  remove_on_exit: true\n  image: sandbox-mcp-base:latest\n"), 0o644)
	t.Cleanup(func() {
		out, _ := exec.Command("docker", "ps", "-aq", "--filter", "label=sandbox-mcp.prefix="+prefix).Output()
		for _, id := range strings.Fields(string(out)) {
			exec.Command("docker", "rm", "-f", id).Run()
		}
	})
	return dir, cfgFile, prefix
}

// stdioSession starts cmd (the server over stdio, its stderr kept for
// failure messages) and connects a go-sdk client to it.
func stdioSession(t *testing.T, ctx context.Context, cmd *exec.Cmd) (*mcp.ClientSession, *testkit.Buffer) {
	t.Helper()
	stderr := &testkit.Buffer{}
	cmd.Stderr = stderr
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect: %v\n%s", err, stderr)
	}
	return cs, stderr
}

// caller is a tool call on cs that answers the result's text and whether
// it is an error, failing the test on a protocol error (stderr: the
// server's, for the message).
func caller(t *testing.T, ctx context.Context, cs *mcp.ClientSession, stderr *testkit.Buffer) func(string, map[string]any) (string, bool) {
	return func(name string, args map[string]any) (string, bool) {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			t.Fatalf("%s: %v\n%s", name, err, stderr)
		}
		return res.Content[0].(*mcp.TextContent).Text, res.IsError
	}
}

// dockerCall runs the binary on the docker provider over stdio, serving
// thread, for at most d, and returns its tool call (caller's); the session
// ends with the test.
func dockerCall(t *testing.T, thread string, d time.Duration) func(string, map[string]any) (string, bool) {
	t.Helper()
	dir, cfgFile, _ := dockerE2EConfig(t)
	cmd := exec.Command(binary(t), "--config", cfgFile, "--state-dir", filepath.Join(dir, "state"), "--audit-log", "off", "--thread", thread)
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	cs, stderr := stdioSession(t, ctx, cmd)
	t.Cleanup(func() { cs.Close() })
	return caller(t, ctx, cs, stderr)
}

// The real binary with --provider docker, driven over stdio: the tools
// work in a container, and nothing names a host path.
func TestE2EDockerProvider(t *testing.T) {
	t.Parallel()
	dir, cfgFile, prefix := dockerE2EConfig(t)
	state := filepath.Join(dir, "state")
	cmd := exec.Command(binary(t), "--config", cfgFile, "--state-dir", state, "--audit-log", "off", "--thread", "dock")
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cs, _ := stdioSession(t, ctx, cmd)
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

// The docker provider as macOS and Windows run it (Docker Desktop: no
// socket crosses its VM): docker.channel exec, and the containers'
// supervisor a static Linux build named by docker.supervisor_binary (there
// the server's own binary is not a Linux one), as the release ships it.
func TestE2EDockerExecChannelStaticSupervisor(t *testing.T) {
	t.Parallel()
	dir, cfgFile, prefix := dockerE2EConfig(t)
	static := filepath.Join(dir, "sandbox-mcp-linux")
	build := exec.Command("go", "build", "-trimpath", "-o", static, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("static build: %v\n%s", err, out)
	}
	os.WriteFile(cfgFile, []byte("provider: docker\ndocker:\n  container_prefix: "+prefix+"\n  memory: 256m\n  remove_on_exit: true\n"+
		"  channel: exec\n  supervisor_binary: "+static+"\n  image: sandbox-mcp-test:busybox-sh\n"), 0o644)
	state := filepath.Join(dir, "state")
	cmd := exec.Command(binary(t), "--config", cfgFile, "--state-dir", state, "--audit-log", "off", "--thread", "desk")
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cs, stderr := stdioSession(t, ctx, cmd)
	defer cs.Close()
	call := func(name string, args map[string]any) string {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil || res.IsError {
			t.Fatalf("%s(%v): %v %+v\n%s", name, args, err, res, stderr)
		}
		return res.Content[0].(*mcp.TextContent).Text
	}
	call("write_file", map[string]any{"path": "a.txt", "content": "from the tool\n"})
	if out := call("bash", map[string]any{"command": "cat a.txt; cd /tmp && export X=1"}); out != "from the tool\n[exit code 0]" {
		t.Fatalf("bash: %q", out)
	}
	if out := call("bash", map[string]any{"command": `pwd; echo "$X"`}); out != "/tmp\n1\n[exit code 0]" {
		t.Fatalf("the shell state over the exec channel: %q", out)
	}
	if out := call("bash", map[string]any{"command": "sleep 30", "run_in_background": true}); !strings.Contains(out, "[job j1 started]") {
		t.Fatalf("a job: %q", out)
	}
	if out := call("bash_kill", map[string]any{"job": "j1"}); !strings.Contains(out, "[job j1 was killed by SIGTERM]") {
		t.Fatalf("bash_kill: %q", out)
	}
	// No socket directory on the host: the channel is the relay exec.
	if entries, err := os.ReadDir(filepath.Join(state, "supervisors")); err == nil && len(entries) > 0 {
		t.Errorf("socket directories on the host: %v", entries)
	}
	out, err := exec.Command("docker", "ps", "-q", "--filter", "label=sandbox-mcp.prefix="+prefix).Output()
	if err != nil || len(strings.Fields(string(out))) != 1 {
		t.Fatalf("containers: %q %v", out, err)
	}
	// The supervisor in the container is the static build.
	top, _ := exec.Command("docker", "exec", strings.TrimSpace(string(out)), "cat", "/proc/1/cmdline", "/proc/self/mountinfo").Output()
	if !strings.Contains(string(top), "/.sandbox-mcp/sandbox-mcp") || strings.Contains(string(top), "/.sandbox-mcp/lib") {
		t.Errorf("the container's supervisor is not the static binary alone:\n%s", top)
	}
}

// docker.warm through the real binary: the first call of the session's
// new thread runs in a warm box made before it (its label says so), with
// the thread's files at the virtual paths, no host path in what the agent
// sees — the mount table included — and nothing left behind at exit.
func TestE2EDockerWarmPool(t *testing.T) {
	t.Parallel()
	dir, cfgFile, prefix := dockerE2EConfig(t)
	b, _ := os.ReadFile(cfgFile)
	os.WriteFile(cfgFile, append(b, "  warm: 1\n"...), 0o644)
	state := filepath.Join(dir, "state")
	cmd := exec.Command(binary(t), "--config", cfgFile, "--state-dir", state, "--audit-log", "off", "--thread", "warm-e2e")
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cs, stderr := stdioSession(t, ctx, cmd)
	call := caller(t, ctx, cs, stderr)
	for deadline := time.Now().Add(90 * time.Second); !strings.Contains(stderr.String(), "warm container ready"); {
		if time.Now().After(deadline) {
			t.Fatalf("no warm container after 90 s\n%s", stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if out, isErr := call("write_file", map[string]any{"path": "w.txt", "content": "warm\n"}); isErr {
		t.Fatalf("write_file: %q", out)
	}
	out, _ := call("bash", map[string]any{"command": "cat w.txt; hostname; grep user-data /proc/self/mountinfo"})
	lines := strings.Split(out, "\n")
	if len(lines) < 3 || lines[0] != "warm" {
		t.Fatalf("bash in the claimed box: %q", out)
	}
	if strings.Contains(out, state) || strings.Contains(out, dir) || strings.Contains(out, "/warm/") {
		t.Fatalf("bash output names a host path: %q", out)
	}
	label, err := exec.Command("docker", "inspect", "-f", `{{index .Config.Labels "sandbox-mcp.warm"}}`, lines[1]).Output()
	if err != nil || strings.TrimSpace(string(label)) == "" {
		t.Fatalf("the thread's first call did not run in a warm box (%s: label %q, %v)\n%s", lines[1], label, err, stderr)
	}
	cs.Close()
	cmd.Wait()
	if left, _ := exec.Command("docker", "ps", "-aq", "--filter", "label=sandbox-mcp.prefix="+prefix).Output(); strings.TrimSpace(string(left)) != "" {
		d, _ := exec.Command("docker", "inspect", "-f", "{{.Name}} {{.State.Status}} {{json .Config.Labels}}", strings.Fields(string(left))[0]).Output()
		t.Fatalf("containers left after exit: %s %s\n%s", left, d, stderr)
	}
}
