package tools_test

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/tools"
)

const workers = 40

// TestConcurrentStrReplace: concurrent str_replace calls on one file,
// each on its own line, all land (SPEC §7).
func TestConcurrentStrReplace(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	var b strings.Builder
	for i := range workers {
		fmt.Fprintf(&b, "line-%d\n", i)
	}
	f.write("shared.txt", b.String())

	errs := make([]string, workers)
	var wg sync.WaitGroup
	for i := range workers {
		wg.Go(func() {
			r := callQuiet(f, "str_replace", map[string]any{
				"path":    "shared.txt",
				"old_str": fmt.Sprintf("line-%d\n", i), // the newline makes line-1 differ from line-10
				"new_str": fmt.Sprintf("done-%d\n", i),
			})
			if r != fmt.Sprintf("Replaced 1 occurrence(s) in %s/shared.txt", ws) {
				errs[i] = r
			}
		})
	}
	wg.Wait()
	for i, e := range errs {
		if e != "" {
			t.Errorf("worker %d: %s", i, e)
		}
	}
	got := strings.Split(strings.TrimSuffix(f.read("shared.txt"), "\n"), "\n")
	var want []string
	for i := range workers {
		want = append(want, fmt.Sprintf("done-%d", i))
	}
	if !slices.Equal(got, want) {
		t.Errorf("lost updates; file is:\n%s", strings.Join(got, "\n"))
	}
	if n := f.locks.Len(); n != 0 {
		t.Errorf("lock table holds %d entries after every edit ended", n)
	}
	f.noTempFiles()
}

func TestConcurrentAppend(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	errs := make([]string, workers)
	var wg sync.WaitGroup
	for i := range workers {
		wg.Go(func() {
			chunk := fmt.Sprintf("chunk-%02d\n", i)
			r := callQuiet(f, "write_file", map[string]any{"path": "log/app.log", "content": chunk, "append": true})
			if r != fmt.Sprintf("Wrote %d bytes to %s/log/app.log", len(chunk), ws) {
				errs[i] = r
			}
		})
	}
	wg.Wait()
	for i, e := range errs {
		if e != "" {
			t.Errorf("worker %d: %s", i, e)
		}
	}
	content := f.read("log/app.log")
	lines := strings.Split(strings.TrimSuffix(content, "\n"), "\n")
	if len(lines) != workers {
		t.Errorf("%d chunks in the file, want %d:\n%s", len(lines), workers, content)
	}
	slices.Sort(lines)
	for i := range workers {
		if want := fmt.Sprintf("chunk-%02d", i); i >= len(lines) || lines[i] != want {
			t.Errorf("chunk %q missing or mangled", want)
			break
		}
	}
	if n := f.locks.Len(); n != 0 {
		t.Errorf("lock table holds %d entries after every edit ended", n)
	}
	f.noTempFiles()
}

// Concurrent edits through two paths naming one file (a symlink) share the
// file's lock.
func TestConcurrentAppendThroughSymlink(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.write("real.log", "")
	f.symlink("real.log", "alias.log")
	var wg sync.WaitGroup
	for i := range workers {
		wg.Go(func() {
			p := "real.log"
			if i%2 == 1 {
				p = "alias.log"
			}
			callQuiet(f, "write_file", map[string]any{"path": p, "content": fmt.Sprintf("c%02d\n", i), "append": true})
		})
	}
	wg.Wait()
	if n := strings.Count(f.read("real.log"), "\n"); n != workers {
		t.Errorf("%d chunks in the file, want %d", n, workers)
	}
}

// callQuiet calls a tool from any goroutine and returns its text (no
// t.Fatal off the test's goroutine).
func callQuiet(f *fixture, name string, args map[string]any) string {
	req := newReq(name, args)
	for _, tl := range allTools {
		if tl.Def.Name == name {
			res := tl.Handle(f.t.Context(), f.env, req)
			if res == nil || res.CallToolResult == nil || len(res.Content) != 1 {
				return "bad result"
			}
			return textOrEmpty(res)
		}
	}
	return "no such tool"
}

var allTools = tools.All()

func textOrEmpty(res *tools.Result) string {
	if tc, ok := res.Content[0].(mcp.TextContent); ok {
		return tc.Text
	}
	return ""
}
