package main

// The docs tested as a new user reads them: every example that can be run
// here is run against the real binary, and every fact the docs state about
// the build is checked against the file that makes it true.

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/internal/testkit"
)

func readRepoFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Each stdio server of mcp.json.example, copied as it is into a client's
// config, starts and serves a call (a path in the example that exists only
// on its author's machine made the server exit: "Connection closed").
func TestE2EMCPJSONExampleStarts(t *testing.T) {
	t.Parallel()
	var cfg struct {
		MCPServers map[string]struct {
			Command string            `json:"command"`
			Args    []string          `json:"args"`
			Env     map[string]string `json:"env"`
		} `json:"mcpServers"`
	}
	if err := json.Unmarshal([]byte(readRepoFile(t, "mcp.json.example")), &cfg); err != nil {
		t.Fatalf("mcp.json.example: %v", err)
	}
	n := 0
	for name, s := range cfg.MCPServers {
		if s.Command == "" {
			continue // a remote (http) entry
		}
		n++
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			// Clients do not search PATH (#25 item 5): the example names an
			// absolute path, where the README's install puts the binary.
			if s.Command != "/usr/local/bin/sandbox-mcp" {
				t.Fatalf("command %q, want the absolute /usr/local/bin/sandbox-mcp (clients do not search PATH)", s.Command)
			}
			// Only the state dir and the audit log are added, so that the
			// test touches nothing of this machine's user.
			dir := t.TempDir()
			args := append(append([]string{}, s.Args...), "--state-dir", filepath.Join(dir, "state"), "--audit-log", filepath.Join(dir, "audit.jsonl"))
			cmd := exec.Command(binary(t), args...)
			cmd.Env = os.Environ()
			for k, v := range s.Env {
				cmd.Env = append(cmd.Env, k+"="+v)
			}
			stderr := &testkit.Buffer{}
			cmd.Stderr = stderr
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			cs, err := mcp.NewClient(&mcp.Implementation{Name: "docs", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
			if err != nil {
				t.Fatalf("sandbox-mcp %s: %v\nstderr:\n%s", strings.Join(s.Args, " "), err, stderr)
			}
			defer cs.Close()
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "ls", Arguments: map[string]any{}})
			if err != nil || res.IsError {
				t.Fatalf("ls: %v %+v\nstderr:\n%s", err, res, stderr)
			}
		})
	}
	if n == 0 {
		t.Fatal("mcp.json.example has no stdio server")
	}
}

// The example of how an escaping path is reported (docs/tools.md, once the
// README's) is what the server reports.
func TestE2EReadmeRefusedPathExample(t *testing.T) {
	t.Parallel()
	m := regexp.MustCompile("`(\\.\\./\\.\\./etc/passwd)` is reported as `([^`]+)`").FindStringSubmatch(readRepoFile(t, "docs/tools.md"))
	if m == nil {
		t.Fatal("docs/tools.md no longer gives the ../../etc/passwd example; update this test with it")
	}
	p := start(t, opts{noBash: true, isolation: "none"})
	p.want("read_file", map[string]any{"path": m[1]}, "Error: path outside the sandbox: "+m[2], true)
}

// The docker provider's description of its base image (docs/providers.md,
// once the README's) names every package the build script puts into it.
func TestReadmeNamesBaseImagePackages(t *testing.T) {
	t.Parallel()
	inc := regexp.MustCompile(`--include=(\S+)`).FindStringSubmatch(readRepoFile(t, "deploy/docker/build-images.sh"))
	if inc == nil {
		t.Fatal("build-images.sh: no debootstrap --include")
	}
	row := regexp.MustCompile("(?m)^\\| `image` \\|.*$").FindString(readRepoFile(t, "docs/providers.md"))
	if row == "" {
		t.Fatal("docs/providers.md: no `image` row in the docker settings table")
	}
	for _, pkg := range strings.Split(inc[1], ",") {
		name := strings.TrimSuffix(pkg, "-certificates") // ca-certificates reads "CA certificates"
		if !strings.Contains(strings.ToLower(row), strings.ToLower(name)) {
			t.Errorf("docs/providers.md's image row does not name %s, which the image has:\n%s", pkg, row)
		}
	}
}
