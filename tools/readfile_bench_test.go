package tools_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/providers/local"
	"github.com/sandbox-mcp/sandbox-mcp/tools"
)

// BenchmarkReadFileLocal is a 1 KiB read_file through the handler on the
// local provider (no transport): the provider-side cost docs/benchmarks.md
// sets beside the docker and kubernetes providers.
func BenchmarkReadFileLocal(b *testing.B) {
	state := b.TempDir()
	p, err := local.New(local.Config{StateDir: state})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	sb, err := p.Acquire(b.Context(), "bench")
	if err != nil {
		b.Fatal(err)
	}
	os.WriteFile(filepath.Join(local.ThreadDir(state, "bench"), "workspace", "f.txt"), []byte(strings.Repeat("x", 1023)+"\n"), 0o644)
	env := &tools.Env{Sandbox: sb, Limits: tools.DefaultLimits()}
	var readFile tools.Tool
	for _, t := range tools.All() {
		if t.Def.Name == "read_file" {
			readFile = t
		}
	}
	req := mcp.CallToolRequest{}
	req.Params.Name = "read_file"
	req.Params.Arguments = map[string]any{"path": "f.txt"}
	for b.Loop() {
		if res := readFile.Handle(b.Context(), env, req); res.IsError {
			b.Fatal("read failed")
		}
	}
}
