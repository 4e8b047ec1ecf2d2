//go:build linux

package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/internal/testkit"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor/supervisortest"
)

// layout puts the server at dir/sandbox-mcp and, when daemon is not "",
// that daemon beside it.
func layout(t *testing.T, server, daemon string) string {
	t.Helper()
	dir := t.TempDir()
	for src, dst := range map[string]string{server: "sandbox-mcp", daemon: supervisor.DaemonName} {
		if src == "" {
			continue
		}
		b, err := os.ReadFile(src)
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, dst), b, 0o755)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, "sandbox-mcp")
}

// bashCall starts bin (bash isolated by bubblewrap) and runs `command`
// through bash: its text, and what the server said on stderr.
func bashCall(t *testing.T, bin, command string) (string, string) {
	t.Helper()
	requireBwrap(t)
	cmd := exec.Command(bin, "--state-dir", filepath.Join(t.TempDir(), "state"), "--isolation", "bwrap")
	var stderr testkit.Buffer
	cmd.Stderr = &stderr
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect: %v\n%s", err, stderr.String())
	}
	defer cs.Close()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "bash", Arguments: map[string]any{"command": command}})
	if err != nil || res.IsError || len(res.Content) == 0 {
		t.Fatalf("bash: %v %+v\n%s", err, res, stderr.String())
	}
	text, _ := res.Content[0].(*mcp.TextContent)
	return text.Text, stderr.String()
}

// The shipped layout: the daemon beside the server is every sandbox's
// supervisor, not the server itself, and nothing is said about it.
func TestE2EDaemonBeside(t *testing.T) {
	t.Parallel()
	out, stderr := bashCall(t, binary(t), "tr '\\0' ' ' </proc/$PPID/cmdline; echo")
	if !strings.Contains(out, "/.sandbox-mcp/sandbox-mcp supervise") || strings.Contains(stderr, "no "+supervisor.DaemonName) {
		t.Fatalf("bash's parent: %q\nstderr:\n%s", out, stderr)
	}
	// It is the daemon: it says so.
	if out, _ := bashCall(t, binary(t), "/.sandbox-mcp/sandbox-mcp --version"); !strings.HasPrefix(out, supervisor.DaemonName+" ") {
		t.Errorf("the sandbox's supervisor binary: %q", out)
	}
}

// A server built alone (no daemon beside it) still serves bash, with the
// whole server as its sandboxes' supervisor, and says so once at start-up,
// with how to put the daemon beside it.
func TestE2EServerAloneIsItsOwnSupervisor(t *testing.T) {
	t.Parallel()
	bin := layout(t, binary(t), "")
	out, stderr := bashCall(t, bin, "/.sandbox-mcp/sandbox-mcp --version; echo hi")
	if !strings.Contains(out, "hi") || !strings.HasPrefix(out, "sandbox-mcp ") {
		t.Fatalf("bash: %q\nstderr:\n%s", out, stderr)
	}
	if n := strings.Count(stderr, "no "+supervisor.DaemonName+" beside the server"); n != 1 || !strings.Contains(stderr, "go build -o "+filepath.Join(filepath.Dir(bin), supervisor.DaemonName)) {
		t.Errorf("%d warnings, want one saying how to build the daemon beside it:\n%s", n, stderr)
	}
}

// A daemon of another release beside the server stops its start, in one
// line naming the daemon, where it was found and both versions.
func TestE2EDaemonOfAnotherRelease(t *testing.T) {
	t.Parallel()
	requireBwrap(t)
	const flag = "-X github.com/sandbox-mcp/sandbox-mcp/supervisor/wire.version="
	server := filepath.Join(t.TempDir(), "sandbox-mcp")
	if out, err := exec.Command("go", "build", "-o", server, "-ldflags", flag+"1.0.0", ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	daemon := supervisortest.Build(t, []string{"CGO_ENABLED=0"}, "-ldflags", flag+"2.0.0")
	bin := layout(t, server, daemon)
	cmd := exec.Command(bin, "--state-dir", filepath.Join(t.TempDir(), "state"), "--isolation", "bwrap")
	cmd.Stdin = strings.NewReader("")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	want := filepath.Join(filepath.Dir(bin), supervisor.DaemonName) + " (the " + supervisor.DaemonName + " beside the server) is version 2.0.0"
	if err == nil || !strings.Contains(stderr.String(), want) || !strings.Contains(stderr.String(), "this server version 1.0.0") {
		t.Fatalf("%v, want a refusal saying %q:\n%s", err, want, stderr.String())
	}
	// With the daemon of its own release, it serves.
	if out, _ := bashCall(t, layout(t, server, supervisortest.Build(t, []string{"CGO_ENABLED=0"}, "-ldflags", flag+"1.0.0")), "echo ok"); !strings.Contains(out, "ok") {
		t.Errorf("with its own daemon: %q", out)
	}
}
