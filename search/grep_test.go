package search

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// grepAll runs Grep and returns every FileMatch.
func grepAll(t *testing.T, fsys sandbox.FS, req GrepRequest) []FileMatch {
	t.Helper()
	var got []FileMatch
	if err := Grep(t.Context(), fsys, req, func(fm FileMatch) error {
		got = append(got, fm)
		return nil
	}); err != nil {
		t.Fatalf("Grep(%+v): %v", req, err)
	}
	return got
}

// refContext is what FileMatch.Lines must hold: every line within n of a
// match (0-based indexes), numbered from 1.
func refContext(data []byte, matches []int, n int) []Line {
	var out []Line
	for i, l := range grepLines(data) {
		if slices.ContainsFunc(matches, func(m int) bool { return i >= m-n && i <= m+n }) {
			out = append(out, Line{N: i + 1, Text: l})
		}
	}
	return out
}

// TestContextLines checks the lines sent for rendering against splitting
// the whole file, for every matcher text and pattern: context at the
// file's start and end, overlapping and adjoining windows, CRLF, no final
// newline, empty lines.
func TestContextLines(t *testing.T) {
	t.Parallel()
	texts := append(slices.Clone(matcherTexts),
		"m\nx\nx\nm\nx\nx\nx\nx\nx\nm\n", // windows overlapping, adjoining and apart
		"m\r\nx\r\n\r\nm", "\n\nm\n\n", "m", "x\nm")
	for _, p := range append(slices.Clone(matcherPatterns), "m", "^$") {
		m, err := newGrepMatcher(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, text := range texts {
			data := []byte(text)
			var starts []int
			matches := m.lines(data, false, &starts)
			for n := range 4 {
				got := contextLines(data, matches, starts, n)
				want := refContext(data, matches, n)
				if !reflect.DeepEqual(normLines(got), normLines(want)) {
					t.Errorf("pattern %q, text %.60q, context %d:\n got %q\nwant %q", p, text, n, normLines(got), normLines(want))
				}
			}
		}
	}
}

// normLines makes empty texts compare equal whether nil or not.
func normLines(ls []Line) []string {
	var out []string
	for _, l := range ls {
		out = append(out, fmt.Sprintf("%d:%q", l.N, l.Text))
	}
	return out
}

func TestGrepFile(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("x\n", sniffFirst) // over sniffFirst: read in two steps
	fsys := writeTree(t, map[string]string{
		"f/crlf.txt":      "one\r\nneedle two\r\nthree\r\n",
		"f/nonl.txt":      "a\nb\nneedle at the end",
		"f/start.txt":     "needle first\na\nb\nc\n",
		"f/binary.bin":    "needle\x00\n",
		"f/latebin.txt":   big + "needle\n\x00",
		"f/exact.txt":     "needle 0123456789012345678901\n", // 30 bytes: at the limit
		"f/over.txt":      "needle 01234567890123456789012\n",
		"f/invalid.txt":   "needle \xff\xfe\n",
		"f/empty.txt":     "",
		"f/many.txt":      "needle\nneedle\nx\nneedle\n",
		"f/sub/deep.txt":  "needle deep\n",
		"f/.git/HEAD":     "needle in git\n",
		"f/sub/.git/conf": "needle in git\n",
	})
	req := GrepRequest{Root: "/f", Pattern: "needle", Mode: ModeContent, Context: 1, MaxFileBytes: 30}
	got := map[string]FileMatch{}
	var order []string
	for _, fm := range grepAll(t, fsys, req) {
		got[fm.Path] = fm
		order = append(order, fm.Path)
	}
	want := []string{"/f/crlf.txt", "/f/exact.txt", "/f/invalid.txt", "/f/many.txt", "/f/nonl.txt", "/f/start.txt", "/f/sub/deep.txt"}
	if !slices.Equal(order, want) {
		t.Fatalf("files %q, want %q (binary, over the limit, .git and empty left out)", order, want)
	}
	check := func(vp string, matches []int, lines ...string) {
		t.Helper()
		fm := got[vp]
		var gl []string
		for _, l := range fm.Lines {
			gl = append(gl, fmt.Sprintf("%d %s", l.N, l.Text))
		}
		if !slices.Equal(fm.Matches, matches) || !slices.Equal(gl, lines) {
			t.Errorf("%s: matches %v lines %q; want %v %q", vp, fm.Matches, gl, matches, lines)
		}
	}
	check("/f/crlf.txt", []int{2}, "1 one\r", "2 needle two\r", "3 three\r")
	check("/f/nonl.txt", []int{3}, "2 b", "3 needle at the end")
	check("/f/start.txt", []int{1}, "1 needle first", "2 a")
	check("/f/many.txt", []int{1, 2, 4}, "1 needle", "2 needle", "3 x", "4 needle")
	check("/f/invalid.txt", []int{1}, "1 needle \xff\xfe")

	// No limit: the large file with a NUL past the sniff is text.
	req.MaxFileBytes = 0
	if fms := grepAll(t, fsys, req); !slices.ContainsFunc(fms, func(fm FileMatch) bool {
		return fm.Path == "/f/latebin.txt" && slices.Equal(fm.Matches, []int{sniffFirst + 1})
	}) {
		t.Errorf("no limit: latebin.txt not found at line %d", sniffFirst+1)
	}

	// Other modes: no lines; files stops at the first match.
	req = GrepRequest{Root: "/f/many.txt", Pattern: "needle", Mode: ModeCount}
	if fms := grepAll(t, fsys, req); len(fms) != 1 || !slices.Equal(fms[0].Matches, []int{1, 2, 4}) || fms[0].Lines != nil {
		t.Errorf("count of a single file: %+v", fms)
	}
	req.Mode = ModeFiles
	if fms := grepAll(t, fsys, req); len(fms) != 1 || !slices.Equal(fms[0].Matches, []int{1}) || fms[0].Lines != nil {
		t.Errorf("files of a single file: %+v", fms)
	}
	// A single file is filtered by its base name.
	req.Glob = "*.go"
	if fms := grepAll(t, fsys, req); len(fms) != 0 {
		t.Errorf("glob *.go on many.txt: %+v", fms)
	}
	req.Glob = "many.*"
	if fms := grepAll(t, fsys, req); len(fms) != 1 {
		t.Errorf("glob many.* on many.txt: %+v", fms)
	}
	// In a directory, a filter with a slash matches the relative path.
	req = GrepRequest{Root: "/f", Pattern: "needle", Mode: ModeFiles, Glob: "{sub/*.txt,crlf.*}"}
	if fms := grepAll(t, fsys, req); len(fms) != 2 || fms[0].Path != "/f/crlf.txt" || fms[1].Path != "/f/sub/deep.txt" {
		t.Errorf("glob filter: %+v", fms)
	}
}

// TestGrepOrderAndStop checks that files come in walk order whatever the
// workers do, and that found's ErrStop or error ends the search; with the
// directories held open (heldFS) too, each closed by the time Grep returns.
func TestGrepOrderAndStop(t *testing.T) {
	t.Parallel()
	plain := walkTree(t)
	var want []visited
	seqWalk(t.Context(), plain, "/ws", "", func(string) bool { return false }, &want)
	var wantFiles []string
	for _, v := range want {
		if fi, err := plain.Stat(t.Context(), v.vp); err == nil && !fi.IsDir() && !strings.HasSuffix(v.vp, ".go") {
			wantFiles = append(wantFiles, v.vp)
		}
	}
	held := heldFS{plain, new(atomic.Int64), new(atomic.Int64)}
	for _, fsys := range []sandbox.FS{plain, held} {
		_, isHeld := fsys.(heldFS)
		stillOpen := func(when string) {
			if n := held.open.Load(); n != 0 {
				t.Errorf("held %v, %s: %d directories left open", isHeld, when, n)
			}
		}
		req := GrepRequest{Root: "/ws", Pattern: "needle", Mode: ModeCount}
		var got []string
		for _, fm := range grepAll(t, fsys, req) {
			got = append(got, fm.Path)
		}
		if !slices.Equal(got, wantFiles) {
			t.Fatalf("held %v: got %d files, want %d; first difference at %d", isHeld, len(got), len(wantFiles), firstDiffStr(got, wantFiles))
		}
		stillOpen("all files")
		// Read ahead, the ancestors visited, the files in flight: the
		// server's descriptors are every tenant's.
		if most, bound := held.most.Load(), int64(heldAhead+grepWindow*runtime.GOMAXPROCS(0)+8); isHeld && most > bound {
			t.Errorf("a search held %d directories open at once, want at most %d", most, bound)
		}

		n := 0
		err := Grep(t.Context(), fsys, req, func(FileMatch) error {
			if n++; n == 7 {
				return ErrStop
			}
			return nil
		})
		if err != nil || n != 7 {
			t.Errorf("held %v: ErrStop after 7 files: err %v, %d calls", isHeld, err, n)
		}
		stillOpen("stopped")
		boom := errors.New("boom")
		n = 0
		err = Grep(t.Context(), fsys, req, func(FileMatch) error { n++; return boom })
		if err != boom || n != 1 {
			t.Errorf("held %v: found's error: err %v after %d calls", isHeld, err, n)
		}
		stillOpen("found's error")
		ctx, cancel := context.WithCancel(t.Context())
		n = 0
		err = Grep(ctx, fsys, req, func(FileMatch) error {
			if n++; n == 3 {
				cancel()
			}
			return nil
		})
		if !errors.Is(err, context.Canceled) {
			t.Errorf("held %v: cancelled: err %v", isHeld, err)
		}
		stillOpen("cancelled")
	}
}

func firstDiffStr(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func TestValidate(t *testing.T) {
	t.Parallel()
	ok := GrepRequest{Root: "/w", Pattern: "x", Mode: ModeContent}
	for _, tc := range []struct {
		edit func(*GrepRequest)
		want string
	}{
		{func(r *GrepRequest) {}, ""},
		{func(r *GrepRequest) { r.Pattern = "a(" }, "invalid regular expression: missing closing ): `a(`"},
		{func(r *GrepRequest) { r.Glob = "[" }, `glob: invalid glob pattern: "["`},
		{func(r *GrepRequest) { r.Glob = strings.Repeat("{a,b}", 9) }, "glob: the glob pattern's {...} groups expand to more than 256 patterns"},
		{func(r *GrepRequest) { r.Mode = "lines" }, `output_mode "lines": want content, files or count`},
		{func(r *GrepRequest) { r.Context = 21 }, "context 21: want 0 to 20"},
		{func(r *GrepRequest) { r.MaxFileBytes = -1 }, "max_file_bytes -1: want 0 or more"},
		{func(r *GrepRequest) { r.Root = "w" }, `root "w": want a clean absolute virtual path`},
		{func(r *GrepRequest) { r.Root = "/w/../x" }, `root "/w/../x": want a clean absolute virtual path`},
		// The first error is the pattern's, as the grep tool has it.
		{func(r *GrepRequest) { r.Pattern, r.Mode = "(", "x" }, "invalid regular expression"},
	} {
		r := ok
		tc.edit(&r)
		err := r.Validate()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.want)) {
			t.Errorf("%+v: %v, want %q", r, err, tc.want)
		}
	}
	g := GlobRequest{Root: "/w", Pattern: "**/*.go"}
	if err := g.Validate(); err != nil {
		t.Error(err)
	}
	g.Pattern = "a/[b"
	if err := g.Validate(); err == nil || err.Error() != `pattern: invalid glob pattern: "a/[b"` {
		t.Errorf("glob pattern: %v", err)
	}
	g.Pattern, g.Sort = "*", "size"
	if err := g.Validate(); err == nil || err.Error() != `sort "size": want path or mtime` {
		t.Errorf("sort: %v", err)
	}
	g.Sort, g.Limit = SortMtime, -1
	if err := g.Validate(); err == nil {
		t.Error("negative limit accepted")
	}
}

// TestJSON checks that results survive JSON unchanged, bytes that are not
// UTF-8 included: a remote search sends them so.
func TestJSON(t *testing.T) {
	t.Parallel()
	fm := FileMatch{Path: "/w/a", Matches: []int{2}, Lines: []Line{{1, []byte("x\xff\r")}, {2, []byte("")}, {3, []byte("é")}}}
	b, err := json.Marshal(fm)
	if err != nil {
		t.Fatal(err)
	}
	var back FileMatch
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(normLines(back.Lines), normLines(fm.Lines)) || back.Path != fm.Path || !slices.Equal(back.Matches, fm.Matches) {
		t.Errorf("round trip: %+v, want %+v", back, fm)
	}
	req := GrepRequest{Root: "/w", Pattern: "(?i)x", Glob: "*.go", Mode: ModeFiles, Context: 2, MaxFileBytes: 9}
	b, _ = json.Marshal(req)
	var rback GrepRequest
	if err := json.Unmarshal(b, &rback); err != nil || rback != req {
		t.Errorf("request round trip: %+v, %v", rback, err)
	}
}

func TestGlob(t *testing.T) {
	t.Parallel()
	fsys := writeTree(t, map[string]string{
		"w/a.go": "", "w/b.txt": "", "w/d/c.go": "", "w/d/e/f.go": "", "w/.git/x.go": "", "w/a/z.go": "",
	})
	old := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)
	if err := os.Chtimes(filepath.Join(fsys.dir, "w/d/c.go"), old, old); err != nil {
		t.Fatal(err)
	}
	run := func(req GlobRequest) (int, []Hit) {
		t.Helper()
		var hits []Hit
		n, err := Glob(t.Context(), fsys, req, func(h Hit) error { hits = append(hits, h); return nil })
		if err != nil {
			t.Fatalf("Glob(%+v): %v", req, err)
		}
		return n, hits
	}
	paths := func(hs []Hit) []string {
		var out []string
		for _, h := range hs {
			out = append(out, h.Path)
		}
		return out
	}
	n, hits := run(GlobRequest{Root: "/w", Pattern: "**/*.go"})
	if want := []string{"/w/a/z.go", "/w/a.go", "/w/d/c.go", "/w/d/e/f.go"}; n != 4 || !slices.Equal(paths(hits), want) {
		t.Errorf("**/*.go: %d %q, want %q", n, paths(hits), want)
	}
	if hits[0].Mtime != 0 {
		t.Errorf("mtime sorting by path: %d", hits[0].Mtime)
	}
	n, hits = run(GlobRequest{Root: "/w", Pattern: "**/*.go", Limit: 2})
	if want := []string{"/w/a/z.go", "/w/a.go"}; n != 4 || !slices.Equal(paths(hits), want) {
		t.Errorf("limit 2: total %d, hits %q, want %q", n, paths(hits), want)
	}
	_, hits = run(GlobRequest{Root: "/w", Pattern: "d/**/*.go", Sort: SortMtime})
	if len(hits) != 2 || hits[1].Path != "/w/d/c.go" || hits[1].Mtime != old.UnixNano() || hits[0].Mtime <= old.UnixNano() {
		t.Errorf("by mtime, d/c.go last: %+v, want its time %d", hits, old.UnixNano())
	}
	_, hits = run(GlobRequest{Root: "/w", Pattern: "{a,d/e}", IncludeDirs: true})
	if want := []string{"/w/a", "/w/d/e"}; !slices.Equal(paths(hits), want) {
		t.Errorf("directories: %q, want %q", paths(hits), want)
	}
	k := 0
	n, err := Glob(t.Context(), fsys, GlobRequest{Root: "/w", Pattern: "**"}, func(Hit) error {
		if k++; k == 2 {
			return ErrStop
		}
		return nil
	})
	if err != nil || k != 2 || n != 2 {
		t.Errorf("ErrStop: err %v, %d calls, total %d", err, k, n)
	}
	_, err = Glob(t.Context(), fsys, GlobRequest{Root: "/w/a.go", Pattern: "*"}, func(Hit) error { return nil })
	if !errors.Is(err, sandbox.ErrNotDir) {
		t.Errorf("a file as root: %v", err)
	}
	_, err = Glob(t.Context(), fsys, GlobRequest{Root: "/nope", Pattern: "*"}, func(Hit) error { return nil })
	if err == nil {
		t.Error("a missing root: no error")
	}
}

// TestGlobNewest checks the newest hits kept by a glob by mtime against
// sorting them all (stable: equal times in walk order), for every limit.
func TestGlobNewest(t *testing.T) {
	t.Parallel()
	files := map[string]string{}
	for i := range 40 {
		files[fmt.Sprintf("w/d%d/f%02d", i%3, i)] = ""
	}
	fsys := writeTree(t, files)
	base := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 40 {
		mt := base.Add(time.Duration(i*7%5) * time.Hour) // five times, many ties
		if err := os.Chtimes(filepath.Join(fsys.dir, fmt.Sprintf("w/d%d/f%02d", i%3, i)), mt, mt); err != nil {
			t.Fatal(err)
		}
	}
	var all []Hit
	if _, err := Glob(t.Context(), fsys, GlobRequest{Root: "/w", Pattern: "**"}, func(h Hit) error {
		fi, err := fsys.Stat(t.Context(), h.Path)
		if err != nil {
			return err
		}
		h.Mtime = fi.ModTime().UnixNano()
		all = append(all, h)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	slices.SortStableFunc(all, func(a, b Hit) int { return cmp.Compare(b.Mtime, a.Mtime) })
	for limit := range 42 {
		var got []Hit
		n, err := Glob(t.Context(), fsys, GlobRequest{Root: "/w", Pattern: "**", Sort: SortMtime, Limit: limit}, func(h Hit) error {
			got = append(got, h)
			return nil
		})
		want := all
		if limit > 0 {
			want = all[:min(limit, len(all))]
		}
		if err != nil || n != 40 || !slices.Equal(got, want) {
			t.Errorf("limit %d: total %d, err %v\n got %v\nwant %v", limit, n, err, got, want)
		}
	}
}
