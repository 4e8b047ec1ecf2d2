package tools

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/providers/local"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/search"
)

// walkEnv is a thread whose workspace holds a tree of more directories than
// a walk reads ahead (search.walkAhead), with .git directories and files in each.
func walkEnv(t *testing.T) *Env {
	t.Helper()
	state := t.TempDir()
	p, err := local.New(local.Config{StateDir: state})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	sb, err := p.Acquire(t.Context(), "t1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Release("t1") })
	ws := filepath.Join(local.ThreadDir(state, "t1"), "workspace")
	write := func(rel, content string) {
		p := filepath.Join(ws, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 30 {
		for j := range 12 {
			dir := fmt.Sprintf("d%02d/e%02d", i, j)
			write(dir+"/a.txt", fmt.Sprintf("needle %d %d\nhay\nneedle again\n", i, j))
			write(dir+"/b.go", "package b\n")
			if j%5 == 0 {
				write(dir+"/.git/HEAD", "needle in git\n")
				write(dir+"/deep/deeper/c.txt", "needle deep\n")
			}
		}
		write(fmt.Sprintf("d%02d/top.txt", i), "needle top\n")
	}
	write("z.txt", "needle z\n")
	return &Env{Sandbox: sb, Limits: DefaultLimits()}
}

// TestGrepOrder checks that grep, which searches files on several
// goroutines, lists them in walk order, stops where asked and counts the
// same in every mode.
func TestGrepOrder(t *testing.T) {
	t.Parallel()
	env := walkEnv(t)
	fsys := env.Sandbox.FS()
	var files []string
	search.Glob(t.Context(), fsys, search.GlobRequest{Root: sandbox.WorkspaceDir, Pattern: "**"}, func(h search.Hit) error {
		files = append(files, h.Path)
		return nil
	})
	var want, wantFiles, wantCount []string
	for _, vp := range files {
		f, err := fsys.Open(t.Context(), vp)
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		buf := make([]byte, 1<<16)
		n, _ := f.Read(buf)
		b.Write(buf[:n])
		f.Close()
		k := 0
		for i, l := range strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n") {
			if strings.Contains(l, "needle") {
				want = append(want, fmt.Sprintf("%s:%d: %s", vp, i+1, l))
				k++
			}
		}
		if k > 0 {
			wantFiles = append(wantFiles, vp)
			wantCount = append(wantCount, fmt.Sprintf("%s:%d", vp, k))
		}
	}
	call := func(args map[string]any) string {
		req := mcp.CallToolRequest{}
		req.Params.Arguments = args
		res := grepTool().Handle(t.Context(), env, req)
		if res.IsError {
			t.Fatalf("grep %v: %v", args, res.Content)
		}
		return res.Content[0].(mcp.TextContent).Text
	}
	for _, tc := range []struct {
		mode string
		want []string
	}{{"content", want}, {"files", wantFiles}, {"count", wantCount}} {
		got := call(map[string]any{"pattern": "needle", "output_mode": tc.mode, "max_results": 100000})
		if got != strings.Join(tc.want, "\n") {
			t.Errorf("%s: got %d lines, want %d:\n%.500s", tc.mode, strings.Count(got, "\n")+1, len(tc.want), got)
		}
		// A page from the middle, as offset and max_results cut it.
		got = call(map[string]any{"pattern": "needle", "output_mode": tc.mode, "offset": 37, "max_results": 20})
		if lines := strings.Split(got, "\n"); !slices.Equal(lines[:20], tc.want[37:57]) {
			t.Errorf("%s page: got\n%s\nwant\n%s", tc.mode, strings.Join(lines[:min(20, len(lines))], "\n"), strings.Join(tc.want[37:57], "\n"))
		}
	}
}
