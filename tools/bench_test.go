package tools_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/providers/local"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/tools"
)

// The benchmarks below search the Go toolchain's own source tree, mounted
// read-only at /mnt/goroot, in process (no transport). bench/ runs the same
// searches through the real server and against ripgrep and fd; these are
// for profiling: go test -run '^$' -bench . -cpuprofile cpu.out ./tools/

const benchMount = "/mnt/goroot"

// benchEnv is a sandbox with GOROOT/src mounted at /mnt/goroot.
func benchEnv(b *testing.B) *tools.Env {
	b.Helper()
	out, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		b.Skipf("go env GOROOT: %v", err)
	}
	src := filepath.Join(strings.TrimSpace(string(out)), "src")
	if _, err := os.Stat(src); err != nil {
		b.Skipf("no Go source tree: %v", err)
	}
	p, err := local.New(local.Config{
		StateDir: b.TempDir(),
		Mounts:   []sandbox.Mount{{Virtual: benchMount, Host: src, ReadOnly: true}},
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { p.Close() })
	sb, err := p.Acquire(b.Context(), "bench")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { p.Release("bench") })
	return &tools.Env{Sandbox: sb, Limits: tools.DefaultLimits()}
}

func benchCall(b *testing.B, env *tools.Env, name string, args map[string]any) {
	b.Helper()
	var tool tools.Tool
	for _, t := range tools.All() {
		if t.Def.Name == name {
			tool = t
		}
	}
	req := mcp.CallToolRequest{}
	req.Params.Name = name
	req.Params.Arguments = args
	b.ReportAllocs()
	for b.Loop() {
		res := tool.Handle(b.Context(), env, req)
		if res.IsError {
			b.Fatalf("%s: %v", name, res.Content)
		}
	}
}

// grepBenchPatterns are the patterns of the grep figures in bench/.
var grepBenchPatterns = []struct {
	name string
	args map[string]any
}{
	{"literal", map[string]any{"pattern": "errors.New", "literal": true, "case_sensitive": true}},
	{"prefix-regex", map[string]any{"pattern": `func [A-Z][A-Za-z0-9_]*\(`, "case_sensitive": true}},
	{"icase-word", map[string]any{"pattern": `\bmutex\b`}},
}

func BenchmarkGrepGoroot(b *testing.B) {
	env := benchEnv(b)
	for _, p := range grepBenchPatterns {
		b.Run(p.name, func(b *testing.B) {
			args := map[string]any{"path": benchMount, "output_mode": "count", "max_results": 100000}
			for k, v := range p.args {
				args[k] = v
			}
			benchCall(b, env, "grep", args)
		})
	}
}

func BenchmarkGlobGoroot(b *testing.B) {
	env := benchEnv(b)
	benchCall(b, env, "glob", map[string]any{"pattern": "**/*.go", "path": benchMount, "max_results": 100000})
}

// BenchmarkGrepGorootContent lists every match with context, as the agent
// sees it (rendering, masking and the spill included).
func BenchmarkGrepGorootContent(b *testing.B) {
	env := benchEnv(b)
	benchCall(b, env, "grep", map[string]any{"pattern": "errors.New", "literal": true, "case_sensitive": true,
		"path": benchMount, "context": 2, "max_results": 100000})
}
