package tools_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/internal/testkit"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor/supervisortest"
	"github.com/sandbox-mcp/sandbox-mcp/tools"
)

// boxEnvs are two tools Envs over one supervisor: one whose FS digests,
// one whose FS only reads, each with its count of bytes read.
func boxEnvs(t *testing.T) (withDigest, without *tools.Env, readWith, readWithout *atomic.Int64) {
	t.Helper()
	f := newFixture(t)
	l := supervisor.NewLink(func(ctx context.Context) (*supervisor.Conn, error) {
		cmd := supervisortest.Command(t, "supervise")
		cmd.Dir = t.TempDir()
		return supervisor.StartProcess(ctx, cmd, true)
	})
	t.Cleanup(l.Close)
	box := supervisor.NewFS(l, nil)
	readWith, readWithout = new(atomic.Int64), new(atomic.Int64)
	env := func(fsys sandbox.FS) *tools.Env {
		return &tools.Env{Sandbox: testkit.WithFS(f.sb, fsys), Limits: tools.DefaultLimits()}
	}
	return env(testkit.DigestingFS{CountingFS: testkit.CountingFS{FS: box, N: readWith}, Digester: box}), env(testkit.CountingFS{FS: box, N: readWithout}), readWith, readWithout
}

func callEnv(t *testing.T, env *tools.Env, args map[string]any) string {
	t.Helper()
	req := mcp.CallToolRequest{}
	req.Params.Name = "read_file"
	req.Params.Arguments = args
	res := toolByName(t, "read_file").Handle(t.Context(), env, req)
	b, err := json.Marshal(res.CallToolResult)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// read_file over a file system that digests gives every result, error and
// fact that it gives reading the whole file.
func TestReadFileDigestSameResults(t *testing.T) {
	t.Parallel()
	withDigest, without, _, _ := boxEnvs(t)
	dir := t.TempDir()
	lines := strings.Repeat("some text\n", 20)
	files := map[string]string{
		"abc.txt":     "alpha\nbeta\ngamma\ndelta\n",
		"partial.txt": "x\ny",
		"empty.txt":   "",
		"crlf.txt":    "a\r\nb\r\nc",
		"late.txt":    lines + "caf\xe9\n" + lines, // Latin-1 past the range
		"cut.txt":     lines + "\xe2\x82",
		"binary.txt":  "\x00\x01\x02",
		"long.txt":    strings.Repeat("word ", 30_000) + "\nend\n",
		"fake.png":    "not an image\n",
		"image.png":   string(tinyPNG(t)),
	}
	for name, content := range files {
		os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644)
	}
	os.Mkdir(filepath.Join(dir, "sub"), 0o755)
	os.Symlink(filepath.Join(dir, "abc.txt"), filepath.Join(dir, "link"))
	names := []string{"sub", "missing", "link"}
	for name := range files {
		names = append(names, name)
	}
	argSets := []map[string]any{
		{},
		{"start_line": 2, "end_line": 3},
		{"end_line": 1, "with_hash": true},
		{"start_line": 3},
		{"start_line": 99},
		{"start_line": 5, "end_line": 5},
	}
	for _, name := range names {
		for _, extra := range argSets {
			args := map[string]any{"path": filepath.Join(dir, name)}
			for k, v := range extra {
				args[k] = v
			}
			got, want := callEnv(t, withDigest, args), callEnv(t, without, args)
			if got != want {
				t.Errorf("read_file %v:\n digest: %s\n whole:  %s", args, got, want)
			}
		}
	}
}

// With a digest, read_file reads only as far as the range needs: lines
// 1–10 of a 16 MiB file take a few KiB, not the file.
func TestReadFileDigestReadsTheRange(t *testing.T) {
	t.Parallel()
	withDigest, without, readWith, readWithout := boxEnvs(t)
	p := filepath.Join(t.TempDir(), "big.txt")
	os.WriteFile(p, []byte(strings.Repeat("0123456789abcdef\n", 1<<20)), 0o644) // 17 MiB
	args := map[string]any{"path": p, "end_line": 10}
	got, want := callEnv(t, withDigest, args), callEnv(t, without, args)
	if got != want {
		t.Fatalf("digest: %s\nwhole:  %s", got, want)
	}
	if !strings.Contains(got, `"lines":1048576`) {
		t.Errorf("facts without the whole file's lines: %s", got)
	}
	if readWithout.Load() != 17<<20 || readWith.Load() > 64<<10 {
		t.Errorf("bytes read: %d with a digest, %d without; want at most 64 KiB, and all %d", readWith.Load(), readWithout.Load(), 17<<20)
	}
}
