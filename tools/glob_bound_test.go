package tools_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/tools"
)

func callReq(name string, args map[string]any) mcp.CallToolRequest {
	req := mcp.CallToolRequest{}
	req.Params.Name = name
	req.Params.Arguments = args
	return req
}

// braceBomb is 34 "{,}" groups: 2^34 patterns, which doublestar tries one
// by one for every entry of the tree (hours of CPU per call).
var braceBomb = strings.Repeat("{,}", 34) + "*.go"

// TestGlobBraceBombRefused: a pattern whose braces expand past the bound is
// refused at once, naming the argument and the limit (glob's pattern and
// grep's glob alike).
func TestGlobBraceBombRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	// No name matches: doublestar would try every expansion of the bomb.
	f.write("a.txt", "package a\n")
	for _, c := range []struct {
		tool, arg string
		args      map[string]any
	}{
		{"glob", "pattern", map[string]any{"pattern": braceBomb}},
		{"glob", "pattern", map[string]any{"pattern": "/mnt/user-data/workspace/" + braceBomb}},
		{"grep", "glob", map[string]any{"pattern": "package", "glob": braceBomb}},
		{"grep", "glob", map[string]any{"pattern": "package", "path": "a.txt", "glob": braceBomb}},
		{"glob", "pattern", map[string]any{"pattern": strings.Repeat("a", 5000)}},
	} {
		done := make(chan *tools.Result, 1)
		go func() { done <- toolByName(t, c.tool).Handle(t.Context(), f.env, callReq(c.tool, c.args)) }()
		select {
		case res := <-done:
			got := resultText(t, res)
			if !res.IsError || !strings.HasPrefix(got, "Error: "+c.arg+": ") || !strings.Contains(got, "limit") || strings.Contains(got, "\n") {
				t.Errorf("%s(%.60v...) = %q, want one error line naming %s and the limit", c.tool, c.args, got, c.arg)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("%s(%.60v...) still running after 20s, want an error at once", c.tool, c.args)
		}
	}
	// Within the bound, braces still work.
	if got := f.ok("glob", map[string]any{"pattern": strings.Repeat("{,}", 7) + "*.{txt,md}"}); !strings.HasSuffix(got, "/a.txt") {
		t.Errorf("glob with 7 {,} groups = %q, want a.txt", got)
	}
}

// TestGlobSlowPatternStopsOnCancel: a pattern within the bounds that is
// still slow (256 alternatives, each a quadratic match, over a directory
// of long names) stops when the call is cancelled instead of running to
// the end (tens of seconds here).
func TestGlobSlowPatternStopsOnCancel(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	name := strings.Repeat("a", 250)
	for i := range 2000 {
		if err := os.WriteFile(f.host(name[:246]+string(rune('a'+i%26))+string(rune('a'+i/26%26))+string(rune('a'+i/676))), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	slow := strings.Repeat("{,}", 8) + "*" + strings.Repeat("a", 120) + "b"
	for _, c := range []struct {
		tool string
		args map[string]any
	}{
		{"glob", map[string]any{"pattern": slow}},
		{"grep", map[string]any{"pattern": "x", "glob": slow}},
	} {
		ctx, cancel := context.WithCancel(t.Context())
		req := callReq(c.tool, c.args)
		done := make(chan string, 1)
		go func() {
			res := toolByName(t, c.tool).Handle(ctx, f.env, req)
			done <- resultText(t, res)
		}()
		time.Sleep(300 * time.Millisecond)
		cancel()
		select {
		case got := <-done:
			if !strings.Contains(got, "cancelled") {
				t.Errorf("%s cancelled = %q, want a cancelled error", c.tool, got)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s still running 10s after its call was cancelled", c.tool)
		}
	}
}
