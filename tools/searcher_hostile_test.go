package tools_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/search"
)

// liarFS is a sandbox FS whose search answers what it is told, as a
// compromised sandbox could, and goes on answering whatever found returns.
type liarFS struct {
	sandbox.FS
	files []search.FileMatch
	hits  []search.Hit
	total int
	given *int // results found accepted
}

func (l liarFS) Grep(_ context.Context, _ search.GrepRequest, found func(search.FileMatch) error) error {
	for _, fm := range l.files {
		if found(fm) == nil {
			*l.given++
		}
	}
	return nil
}

func (l liarFS) Glob(_ context.Context, _ search.GlobRequest, found func(search.Hit) error) (int, error) {
	for _, h := range l.hits {
		if found(h) == nil {
			*l.given++
		}
	}
	return l.total, nil
}

type liarSandbox struct {
	sandbox.Sandbox
	fs liarFS
}

func (l liarSandbox) FS() sandbox.FS { return l.fs }

func lines(ls ...search.Line) []search.Line { return ls }

func line(n int, s string) search.Line { return search.Line{N: n, Text: []byte(s)} }

// TestHostileSearchResults feeds grep and glob results that no search of
// the tree could give: each call ends in a one-line error (or drops what
// is past a stop), shows no path outside the searched directory, and
// never panics.
func TestHostileSearchResults(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.write("a.txt", "x\n")
	good := search.FileMatch{Path: ws + "/a.txt", Matches: []int{1}, Lines: lines(line(1, "x"))}
	huge := strings.Repeat("h", 10<<20+1)
	for _, tc := range []struct {
		name  string
		args  map[string]any
		files []search.FileMatch
		hits  []search.Hit
		total int
	}{
		{"path outside", nil, []search.FileMatch{{Path: "/etc/passwd", Matches: []int{1}, Lines: lines(line(1, "root"))}}, nil, 0},
		{"path with ..", nil, []search.FileMatch{{Path: ws + "/../../../etc/passwd", Matches: []int{1}, Lines: lines(line(1, "root"))}}, nil, 0},
		{"relative path", nil, []search.FileMatch{{Path: "etc/passwd", Matches: []int{1}, Lines: lines(line(1, "root"))}}, nil, 0},
		{"prefix of the root", nil, []search.FileMatch{{Path: ws + "x/passwd", Matches: []int{1}, Lines: lines(line(1, "root"))}}, nil, 0},
		{"NUL in path", nil, []search.FileMatch{{Path: ws + "/a\x00/etc/passwd", Matches: []int{1}, Lines: lines(line(1, "root"))}}, nil, 0},
		{"outside after a good one", nil, []search.FileMatch{good, {Path: "/etc/passwd", Matches: []int{1}, Lines: lines(line(1, "root"))}}, nil, 0},
		{"same file twice", nil, []search.FileMatch{good, good}, nil, 0},
		{"out of walk order", nil, []search.FileMatch{{Path: ws + "/b.txt", Matches: []int{1}, Lines: lines(line(1, "x"))}, good}, nil, 0},
		{"decreasing matches", nil, []search.FileMatch{{Path: ws + "/a.txt", Matches: []int{3, 2}, Lines: lines(line(2, "b"), line(3, "c"))}}, nil, 0},
		{"decreasing lines", nil, []search.FileMatch{{Path: ws + "/a.txt", Matches: []int{2, 3}, Lines: lines(line(3, "c"), line(2, "b"))}}, nil, 0},
		{"line 0", nil, []search.FileMatch{{Path: ws + "/a.txt", Matches: []int{0}, Lines: lines(line(0, "c"))}}, nil, 0},
		{"negative line", nil, []search.FileMatch{{Path: ws + "/a.txt", Matches: []int{-5}, Lines: lines(line(-5, "c"))}}, nil, 0},
		{"line past any file", nil, []search.FileMatch{{Path: ws + "/a.txt", Matches: []int{1 << 40}, Lines: lines(line(1<<40, "c"))}}, nil, 0},
		{"no matches", nil, []search.FileMatch{{Path: ws + "/a.txt"}}, nil, 0},
		{"match without its line", nil, []search.FileMatch{{Path: ws + "/a.txt", Matches: []int{1, 5}, Lines: lines(line(1, "x"))}}, nil, 0},
		{"line nobody asked for", nil, []search.FileMatch{{Path: ws + "/a.txt", Matches: []int{1}, Lines: lines(line(1, "x"), line(9, "far"))}}, nil, 0},
		{"a newline faking a line", nil, []search.FileMatch{{Path: ws + "/a.txt", Matches: []int{1}, Lines: lines(line(1, "x\n/etc/passwd:1: root"))}}, nil, 0},
		{"huge line", nil, []search.FileMatch{{Path: ws + "/a.txt", Matches: []int{1}, Lines: lines(line(1, huge))}}, nil, 0},
		{"lines in count mode", map[string]any{"output_mode": "count"}, []search.FileMatch{{Path: ws + "/a.txt", Matches: []int{1}, Lines: lines(line(1, "x"))}}, nil, 0},
		{"many matches in files mode", map[string]any{"output_mode": "files"}, []search.FileMatch{{Path: ws + "/a.txt", Matches: []int{1, 2}}}, nil, 0},
		{"glob: path outside", map[string]any{"tool": "glob"}, nil, []search.Hit{{Path: "/etc/passwd"}}, 1},
		{"glob: the root itself", map[string]any{"tool": "glob"}, nil, []search.Hit{{Path: ws}}, 1},
		{"glob: a name over NAME_MAX", map[string]any{"tool": "glob"}, nil, []search.Hit{{Path: ws + "/" + strings.Repeat("n", 256)}}, 1},
		{"glob: a path over PATH_MAX", map[string]any{"tool": "glob"}, nil, []search.Hit{{Path: ws + strings.Repeat("/d", 2100)}}, 1},
		{"grep: a name over NAME_MAX", nil, []search.FileMatch{{Path: ws + "/" + strings.Repeat("n", 8<<20), Matches: []int{1}, Lines: lines(line(1, "x"))}}, nil, 0},
		{"glob: dot dot", map[string]any{"tool": "glob"}, nil, []search.Hit{{Path: ws + "/../x"}}, 1},
		{"glob: relative", map[string]any{"tool": "glob"}, nil, []search.Hit{{Path: "a.txt"}}, 1},
		{"glob: twice", map[string]any{"tool": "glob"}, nil, []search.Hit{{Path: ws + "/a.txt"}, {Path: ws + "/a.txt"}}, 2},
		{"glob: more than the limit", map[string]any{"tool": "glob", "max_results": 1}, nil, []search.Hit{{Path: ws + "/a.txt"}, {Path: ws + "/b.txt"}}, 2},
		{"glob: total below the hits", map[string]any{"tool": "glob"}, nil, []search.Hit{{Path: ws + "/a.txt"}, {Path: ws + "/b.txt"}}, 1},
		{"glob: total above the hits", map[string]any{"tool": "glob"}, nil, []search.Hit{{Path: ws + "/a.txt"}}, 1000},
		{"glob: negative total", map[string]any{"tool": "glob"}, nil, nil, -1},
		{"glob: a time by path", map[string]any{"tool": "glob"}, nil, []search.Hit{{Path: ws + "/a.txt", Mtime: 5}}, 1},
		{"glob: older first by mtime", map[string]any{"tool": "glob", "sort": "mtime"}, nil, []search.Hit{{Path: ws + "/a.txt", Mtime: 1}, {Path: ws + "/b.txt", Mtime: 2}}, 2},
		{"glob: equal times out of walk order", map[string]any{"tool": "glob", "sort": "mtime"}, nil, []search.Hit{{Path: ws + "/b.txt", Mtime: 1}, {Path: ws + "/a.txt", Mtime: 1}}, 2},
		{"glob: twice by mtime", map[string]any{"tool": "glob", "sort": "mtime"}, nil, []search.Hit{{Path: ws + "/a.txt", Mtime: 2}, {Path: ws + "/a.txt", Mtime: 1}}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			given := 0
			env := *f.env
			env.Sandbox = liarSandbox{f.sb, liarFS{FS: f.sb.FS(), files: tc.files, hits: tc.hits, total: tc.total, given: &given}}
			name := "grep"
			args := map[string]any{"pattern": "x", "context": 2}
			for k, v := range tc.args {
				if k == "tool" {
					name, args = v.(string), map[string]any{"pattern": "**"}
					continue
				}
				args[k] = v
			}
			if name == "glob" {
				for k, v := range tc.args {
					if k != "tool" {
						args[k] = v
					}
				}
			}
			res := f.callEnv(&env, name, args)
			got := resultText(t, res)
			if !res.IsError || !strings.HasPrefix(got, "Error: "+name+": the sandbox's search returned a malformed result") || strings.Contains(got, "\n") {
				t.Errorf("want a one-line error, got %v: %.300q", res.IsError, got)
			}
			if strings.Contains(got, "passwd") || strings.Contains(got, "/etc") || strings.Contains(got, "root") {
				t.Errorf("the error shows what the sandbox sent: %.300q", got)
			}
		})
	}
}

// TestHostileSearchStops checks that once grep has what it shows and
// spills, a sandbox that goes on sending is not listened to.
func TestHostileSearchStops(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	// Each file's record is some 300 KiB in the spill, so the spill (64
	// MiB) is full after about 220 of them; the sandbox sends 400 and
	// ignores stop.
	text := []byte(strings.Repeat("z", 300))
	var ls []search.Line
	var ms []int
	for n := 1; n <= 1000; n++ {
		ls = append(ls, search.Line{N: n, Text: text})
		ms = append(ms, n)
	}
	var files []search.FileMatch
	for i := range 400 {
		files = append(files, search.FileMatch{Path: fmt.Sprintf("%s/d/f%04d", ws, i), Matches: ms, Lines: ls})
	}
	given := 0
	env := *f.env
	env.Sandbox = liarSandbox{f.sb, liarFS{FS: f.sb.FS(), files: files, given: &given}}
	res := f.callEnv(&env, "grep", map[string]any{"pattern": "z", "max_results": 1})
	got := resultText(t, res)
	if res.IsError || !res.Truncated {
		t.Fatalf("want a truncated result, got %.300q", got)
	}
	if given == 0 || given >= len(files) {
		t.Errorf("grep took %d of %d files; want it to stop once its spill was full", given, len(files))
	}
	if !strings.Contains(got, "showing the first 1 matches") || !strings.HasPrefix(got, ws+"/d/f0000:1: zzz") {
		t.Errorf("unexpected result %.300q", got)
	}
}

// A page beyond what one call keeps is refused, naming the argument: the
// memory of a call stays bounded whatever a sandbox's search sends.
func TestSearchPageBounded(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.write("a.txt", "x\n")
	for _, c := range []struct {
		tool string
		args map[string]any
		want string
	}{
		{"grep", map[string]any{"pattern": "x", "max_results": 1_000_000}, "max_results 1000000: at most 100000"},
		{"glob", map[string]any{"pattern": "**", "max_results": 1_000_000}, "max_results 1000000: at most 100000"},
		{"glob", map[string]any{"pattern": "**", "offset": 1 << 40}, "offset 1099511627776: at most 10000000"},
	} {
		res := f.call(c.tool, c.args)
		if got := resultText(t, res); !res.IsError || !strings.Contains(got, c.want) {
			t.Errorf("%s %v: %v %q, want an error with %q", c.tool, c.args, res.IsError, got, c.want)
		}
	}
	if res := f.call("glob", map[string]any{"pattern": "**", "max_results": 100_000}); res.IsError {
		t.Errorf("max_results at the bound: %q", resultText(t, res))
	}
}
