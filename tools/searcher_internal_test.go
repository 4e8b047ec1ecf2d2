package tools

import (
	"strings"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/search"
)

// FuzzCheckFileMatch builds FileMatches from arbitrary bytes: the check
// never panics, and what it lets through renders without panic, every line
// naming the file within the root (a name with a newline, which a file may
// have, aside).
func FuzzCheckFileMatch(f *testing.F) {
	f.Add("/w/a", []byte{1, 2, 5}, []byte{1, 2, 3, 4, 5, 6}, "text", uint8(1), uint8(0))
	f.Add("/w/../a", []byte{3, 1}, []byte{1}, "", uint8(0), uint8(1))
	f.Add("/w/b", []byte{200}, []byte{198, 199, 200, 201, 202}, "x\xff", uint8(2), uint8(2))
	f.Fuzz(func(t *testing.T, p string, matches, lines []byte, text string, ctx, mode uint8) {
		req := search.GrepRequest{Root: "/w", Pattern: "x", Mode: []string{search.ModeContent, search.ModeFiles, search.ModeCount}[mode%3],
			Context: int(ctx % 4), MaxFileBytes: 1000}
		fm := search.FileMatch{Path: p}
		for _, m := range matches {
			fm.Matches = append(fm.Matches, int(m)-1)
		}
		for _, n := range lines {
			fm.Lines = append(fm.Lines, search.Line{N: int(n) - 1, Text: []byte(text)})
		}
		why := checkFileMatch(req, req.MaxFileBytes, "", fm)
		if why != "" {
			return
		}
		if fm.Path != req.Root && !pathBelow(fm.Path, req.Root) {
			t.Fatalf("path %q passed, outside %s", fm.Path, req.Root)
		}
		n := len(fm.Matches)
		if req.Mode != search.ModeContent {
			n = 1
		}
		if strings.Contains(fm.Path, "\n") {
			return
		}
		for first := range n {
			s, _ := renderGrep(req.Mode, fm, req.Context, first, n, first > 0, nil)
			for l := range strings.SplitSeq(strings.TrimSuffix(s, "\n"), "\n") {
				if l != "--" && !strings.HasPrefix(l, fm.Path) {
					t.Fatalf("line %q does not name %s", l, fm.Path)
				}
			}
		}
	})
}
