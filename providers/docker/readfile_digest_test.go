package docker

import (
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/internal/testkit"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/tools"
)

// read_file of lines 1–10 of a 60 MB file of the container's own: with the
// digest, the container sends the facts and the first bytes, not the file;
// the result is the same. The numbers are logged (go test -v -run
// ReadFileDigest ./providers/docker/).
func TestReadFileDigestContainerPath(t *testing.T) {
	f := newFixture(t)
	sb := f.acquire(t, "digest")
	const name = "/tmp/big.txt"
	if out, res := execOut(t, sb, "yes 'a line of text, fifty bytes long, more or less' | head -c 60000000 > "+name); res.ExitCode != 0 {
		t.Fatalf("making the file: %s", out)
	}
	readFile := func(fsys sandbox.FS) (string, time.Duration) {
		req := mcp.CallToolRequest{}
		req.Params.Name = "read_file"
		req.Params.Arguments = map[string]any{"path": name, "start_line": 1, "end_line": 10}
		var tool tools.Tool
		for _, tl := range tools.All() {
			if tl.Def.Name == "read_file" {
				tool = tl
			}
		}
		start := time.Now()
		res := tool.Handle(t.Context(), &tools.Env{Sandbox: testkit.WithFS(sb, fsys), Limits: tools.DefaultLimits()}, req)
		took := time.Since(start)
		b, _ := json.Marshal(res.CallToolResult)
		return string(b), took
	}
	var before, after atomic.Int64
	dg, ok := sb.FS().(sandbox.Digester)
	if !ok {
		t.Fatal("the container's FS does not digest")
	}
	want, tookBefore := readFile(testkit.CountingFS{FS: sb.FS(), N: &before})
	got, tookAfter := readFile(testkit.DigestingFS{CountingFS: testkit.CountingFS{FS: sb.FS(), N: &after}, Digester: dg})
	if got != want {
		t.Fatalf("with a digest:\n%.400s\nwithout:\n%.400s", got, want)
	}
	t.Logf("read_file lines 1-10 of a 60 MB container file: without digest %v, %d bytes read; with digest %v, %d bytes read",
		tookBefore.Round(time.Millisecond), before.Load(), tookAfter.Round(time.Millisecond), after.Load())
	if before.Load() != 60_000_000 || after.Load() > 1<<20 {
		t.Errorf("bytes read: %d without a digest (want all), %d with (want at most 1 MiB)", before.Load(), after.Load())
	}
}
