package docker

import (
	"context"
	"encoding/json"
	"io/fs"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/tools"
)

// readOnlyFS hides the FS's Digest, as every FS was before it: read_file
// then streams the whole file out of the container for its facts. It
// counts the bytes read_file takes.
type readOnlyFS struct {
	sandbox.FS
	n *atomic.Int64
}

func (r readOnlyFS) Open(ctx context.Context, name string) (fs.File, error) {
	f, err := r.FS.Open(ctx, name)
	if err != nil {
		return nil, err
	}
	return countedFile{f, r.n}, nil
}

type countedFile struct {
	fs.File
	n *atomic.Int64
}

func (f countedFile) Read(b []byte) (int, error) {
	n, err := f.File.Read(b)
	f.n.Add(int64(n))
	return n, err
}

type digestFS struct {
	readOnlyFS
	sandbox.Digester
}

type withFS struct {
	sandbox.Sandbox
	fs sandbox.FS
}

func (w withFS) FS() sandbox.FS { return w.fs }

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
		res := tool.Handle(t.Context(), &tools.Env{Sandbox: withFS{sb, fsys}, Limits: tools.DefaultLimits()}, req)
		took := time.Since(start)
		b, _ := json.Marshal(res.CallToolResult)
		return string(b), took
	}
	var before, after atomic.Int64
	dg, ok := sb.FS().(sandbox.Digester)
	if !ok {
		t.Fatal("the container's FS does not digest")
	}
	want, tookBefore := readFile(readOnlyFS{sb.FS(), &before})
	got, tookAfter := readFile(digestFS{readOnlyFS{sb.FS(), &after}, dg})
	if got != want {
		t.Fatalf("with a digest:\n%.400s\nwithout:\n%.400s", got, want)
	}
	t.Logf("read_file lines 1-10 of a 60 MB container file: without digest %v, %d bytes read; with digest %v, %d bytes read",
		tookBefore.Round(time.Millisecond), before.Load(), tookAfter.Round(time.Millisecond), after.Load())
	if before.Load() != 60_000_000 || after.Load() > 1<<20 {
		t.Errorf("bytes read: %d without a digest (want all), %d with (want at most 1 MiB)", before.Load(), after.Load())
	}
}
