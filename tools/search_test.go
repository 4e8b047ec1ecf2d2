package tools_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// tree builds a workspace:
//
//	b.txt  a/z.txt  a/sub/deep.txt  a/sub/deeper/x.txt  c/  .hidden
func lsTree(f *fixture) {
	f.write("b.txt", "b")
	f.write("a/z.txt", "z")
	f.write("a/sub/deep.txt", "d")
	f.write("a/sub/deeper/x.txt", "x")
	f.mkdir("c")
	f.write(".hidden", "h")
}

func TestLs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args map[string]any
		want string
	}{
		{
			name: "default path and depth 2",
			args: map[string]any{},
			want: ws + `/
  .hidden
  a/
    sub/
    z.txt
  b.txt
  c/`,
		},
		{
			name: "depth 1",
			args: map[string]any{"depth": 1},
			want: ws + `/
  .hidden
  a/
  b.txt
  c/`,
		},
		{
			name: "depth 3",
			args: map[string]any{"depth": 3},
			want: ws + `/
  .hidden
  a/
    sub/
      deep.txt
      deeper/
    z.txt
  b.txt
  c/`,
		},
		{
			name: "depth above the max is capped at 5",
			args: map[string]any{"path": "a", "depth": 99},
			want: ws + `/a/
  sub/
    deep.txt
    deeper/
      x.txt
  z.txt`,
		},
		{
			name: "subdirectory, relative",
			args: map[string]any{"path": "a/sub", "depth": 1},
			want: ws + `/a/sub/
  deep.txt
  deeper/`,
		},
		{
			name: "trailing slash",
			args: map[string]any{"path": ws + "/c/"},
			want: ws + `/c/`,
		},
		{
			name: "user-data",
			args: map[string]any{"path": "/mnt/user-data", "depth": 1},
			want: `/mnt/user-data/
  outputs/
  uploads/
  workspace/`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			lsTree(f)
			got := f.ok("ls", tc.args)
			if strings.TrimRight(got, "\n") != tc.want {
				t.Errorf("got:\n%s\nwant:\n%s", got, tc.want)
			}
		})
	}
}

func TestLsErrors(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	if got, want := f.fail("ls", map[string]any{"path": "missing"}), "Error: not found: "+ws+"/missing"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestLsTruncation(t *testing.T) {
	t.Parallel()
	const limit = 200
	f := newFixture(t)
	f.env.Limits.LsOutputMaxChars = limit
	var names []string
	for i := range 100 {
		name := fmt.Sprintf("file-%03d.txt", i)
		names = append(names, name)
		f.write(name, "")
	}
	res := f.call("ls", map[string]any{})
	got := resultText(t, res)
	lines := strings.Split(got, "\n")
	if lines[0] != ws+"/" {
		t.Errorf("first line %q, want %q", lines[0], ws+"/")
	}
	last := lines[len(lines)-1]
	if !strings.Contains(last, "truncated") {
		t.Fatalf("no truncation note at the end of:\n%s", got)
	}
	body := strings.Join(lines[:len(lines)-1], "\n")
	if len(body) > limit {
		t.Errorf("listing is %d chars before the note, limit %d", len(body), limit)
	}
	// Head truncation: the entries shown are the first ones, whole.
	shown := lines[1 : len(lines)-1]
	if len(shown) == 0 || len(shown) >= len(names) {
		t.Fatalf("%d entries shown of %d", len(shown), len(names))
	}
	for i, l := range shown {
		if l != "  "+names[i] {
			t.Errorf("line %d = %q, want %q", i+1, l, "  "+names[i])
		}
	}
	if !res.Truncated {
		t.Error("Result.Truncated is false")
	}
}

// globTree builds a workspace with Go files at several depths and a .git.
func globTree(f *fixture) {
	f.write("main.go", "package main")
	f.write("README.md", "# r")
	f.write("pkg/a.go", "package pkg")
	f.write("pkg/b_test.go", "package pkg")
	f.write("pkg/sub/c.go", "package sub")
	f.write(".git/config", "[core]")
	f.write(".git/hooks/x.go", "package hooks")
	f.mkdir("pkg/empty")
}

func TestGlob(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		args  map[string]any
		under string   // directory in the header
		want  []string // paths, in any order
	}{
		{
			name:  "double star",
			args:  map[string]any{"pattern": "**/*.go"},
			under: ws,
			want:  []string{ws + "/main.go", ws + "/pkg/a.go", ws + "/pkg/b_test.go", ws + "/pkg/sub/c.go"},
		},
		{
			name:  "single star stays in its directory",
			args:  map[string]any{"pattern": "*.go"},
			under: ws,
			want:  []string{ws + "/main.go"},
		},
		{
			name:  "alternatives",
			args:  map[string]any{"pattern": "**/*.{md,go}", "path": "pkg"},
			under: ws + "/pkg",
			want:  []string{ws + "/pkg/a.go", ws + "/pkg/b_test.go", ws + "/pkg/sub/c.go"},
		},
		{
			name:  "files only by default",
			args:  map[string]any{"pattern": "pkg/*"},
			under: ws,
			want:  []string{ws + "/pkg/a.go", ws + "/pkg/b_test.go"},
		},
		{
			name:  "include_dirs",
			args:  map[string]any{"pattern": "pkg/*", "include_dirs": true},
			under: ws,
			want:  []string{ws + "/pkg/a.go", ws + "/pkg/b_test.go", ws + "/pkg/empty", ws + "/pkg/sub"},
		},
		{
			name:  ".git skipped",
			args:  map[string]any{"pattern": "**/config"},
			under: ws,
			want:  nil,
		},
		{
			name:  ".git skipped with include_dirs",
			args:  map[string]any{"pattern": "**/.git", "include_dirs": true},
			under: ws,
			want:  nil,
		},
		{
			name:  "path argument",
			args:  map[string]any{"pattern": "*.go", "path": "pkg"},
			under: ws + "/pkg",
			want:  []string{ws + "/pkg/a.go", ws + "/pkg/b_test.go"},
		},
		{
			name:  "absolute pattern",
			args:  map[string]any{"pattern": ws + "/pkg/**/*.go"},
			under: ws + "/pkg",
			want:  []string{ws + "/pkg/a.go", ws + "/pkg/b_test.go", ws + "/pkg/sub/c.go"},
		},
		{
			name:  "absolute pattern in outputs",
			args:  map[string]any{"pattern": "/mnt/user-data/outputs/*"},
			under: "/mnt/user-data/outputs",
			want:  nil,
		},
		{
			name:  "no match",
			args:  map[string]any{"pattern": "**/*.rs"},
			under: ws,
			want:  nil,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			globTree(f)
			got := f.ok("glob", tc.args)
			lines := strings.Split(got, "\n")
			if header := fmt.Sprintf("Found %d paths under %s", len(tc.want), tc.under); lines[0] != header {
				t.Errorf("header %q, want %q", lines[0], header)
			}
			paths := slices.Sorted(slices.Values(lines[1:]))
			want := slices.Sorted(slices.Values(tc.want))
			if !slices.Equal(paths, want) && !(len(paths) == 0 && len(want) == 0) {
				t.Errorf("paths:\n%s\nwant:\n%s", strings.Join(paths, "\n"), strings.Join(want, "\n"))
			}
		})
	}
}

func TestGlobTruncation(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	globTree(f)
	res := f.call("glob", map[string]any{"pattern": "**/*.go", "max_results": 2})
	got := resultText(t, res)
	lines := strings.Split(got, "\n")
	if want := "Found 4 paths under " + ws; lines[0] != want {
		t.Errorf("header %q, want %q", lines[0], want)
	}
	if len(lines) != 4 {
		t.Fatalf("want header, 2 paths and a note, got:\n%s", got)
	}
	for _, p := range lines[1:3] {
		if !strings.HasPrefix(p, ws+"/") || !strings.HasSuffix(p, ".go") {
			t.Errorf("line %q is not a matching virtual path", p)
		}
	}
	if !strings.Contains(lines[3], "truncated") {
		t.Errorf("no truncation note: %q", lines[3])
	}
	if !res.Truncated {
		t.Error("Result.Truncated is false")
	}
}

func TestGlobErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args map[string]any
		want string // substring
	}{
		{"missing pattern", map[string]any{}, "pattern"},
		{"invalid pattern", map[string]any{"pattern": "[a-"}, "invalid glob pattern"},
		{"missing dir", map[string]any{"pattern": "*", "path": "nope"}, "Error: not found: " + ws + "/nope"},
		{"path is a file", map[string]any{"pattern": "*", "path": "main.go"}, ws + "/main.go"},
		{"outside", map[string]any{"pattern": "*", "path": "/etc"}, outside + "/etc"},
		{"absolute pattern outside", map[string]any{"pattern": "/etc/*"}, outside + "/etc"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			globTree(f)
			if got := f.fail("glob", tc.args); !strings.Contains(got, tc.want) {
				t.Errorf("error %q does not contain %q", got, tc.want)
			}
		})
	}
}

func grepTree(f *fixture) {
	f.write("a.txt", "Hello world\nfoo bar\nHELLO again\n")
	f.write("b.go", "package b\n// hello from go\n")
	f.write("re.txt", "cost is $5 (a.b)\ncost is 5 ab\n")
	f.write("bin.dat", "hello\x00binary hello\n")
	f.write("crlf.txt", "hello crlf\r\nbye\r\n")
	f.write(".git/HEAD", "hello git\n")
	f.write("sub/c.txt", "x\nsay hello\n")
}

func TestGrep(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args map[string]any
		want []string // lines, in any order
	}{
		{
			name: "case-insensitive by default, binary and .git skipped",
			args: map[string]any{"pattern": "hello"},
			want: []string{
				ws + "/a.txt:1: Hello world",
				ws + "/a.txt:3: HELLO again",
				ws + "/b.go:2: // hello from go",
				ws + "/crlf.txt:1: hello crlf",
				ws + "/sub/c.txt:2: say hello",
			},
		},
		{
			name: "case_sensitive",
			args: map[string]any{"pattern": "Hello", "case_sensitive": true},
			want: []string{ws + "/a.txt:1: Hello world"},
		},
		{
			name: "regex",
			args: map[string]any{"pattern": `^foo\s+b.r$`},
			want: []string{ws + "/a.txt:2: foo bar"},
		},
		{
			name: "^ anchors at the start of each line, not of the file",
			args: map[string]any{"pattern": "^foo"},
			want: []string{ws + "/a.txt:2: foo bar"},
		},
		{
			name: "$ anchors at the end of each line, not of the file",
			args: map[string]any{"pattern": "world$"},
			want: []string{ws + "/a.txt:1: Hello world"},
		},
		{
			name: "literal with metacharacters",
			args: map[string]any{"pattern": "$5 (a.b)", "literal": true},
			want: []string{ws + "/re.txt:1: cost is $5 (a.b)"},
		},
		{
			name: "literal dot is not a wildcard",
			args: map[string]any{"pattern": "a.b", "literal": true},
			want: []string{ws + "/re.txt:1: cost is $5 (a.b)"},
		},
		{
			name: "glob on base name",
			args: map[string]any{"pattern": "hello", "glob": "*.go"},
			want: []string{ws + "/b.go:2: // hello from go"},
		},
		{
			name: "glob on relative path",
			args: map[string]any{"pattern": "hello", "glob": "sub/**"},
			want: []string{ws + "/sub/c.txt:2: say hello"},
		},
		{
			// Each alternative by its own form: one with a slash does not
			// turn the others into relative-path patterns.
			name: "glob alternatives, base name and relative path",
			args: map[string]any{"pattern": "hello", "glob": "{c.txt,none/x}"},
			want: []string{ws + "/sub/c.txt:2: say hello"},
		},
		{
			name: "path is a directory",
			args: map[string]any{"pattern": "hello", "path": "sub"},
			want: []string{ws + "/sub/c.txt:2: say hello"},
		},
		{
			name: "path is a file",
			args: map[string]any{"pattern": "o", "path": ws + "/a.txt"},
			want: []string{ws + "/a.txt:1: Hello world", ws + "/a.txt:2: foo bar", ws + "/a.txt:3: HELLO again"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			grepTree(f)
			got := f.ok("grep", tc.args)
			lines := slices.Sorted(slices.Values(strings.Split(got, "\n")))
			want := slices.Sorted(slices.Values(tc.want))
			if !slices.Equal(lines, want) {
				t.Errorf("got:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
			}
		})
	}
}

func TestGrepNoMatch(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	grepTree(f)
	res := f.call("grep", map[string]any{"pattern": "zebra"})
	got := resultText(t, res)
	if res.IsError {
		t.Fatalf("no match is an error: %s", got)
	}
	if strings.Contains(got, ":1:") {
		t.Errorf("no-match result looks like a match: %q", got)
	}
}

func TestGrepLongLine(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	long := "needle " + strings.Repeat("x", 5000) + " END"
	f.write("long.txt", long+"\nshort needle\n")
	got := f.ok("grep", map[string]any{"pattern": "needle"})
	lines := strings.Split(got, "\n")
	if len(lines) != 2 {
		t.Fatalf("want 2 lines, got:\n%.300s", got)
	}
	prefix := ws + "/long.txt:1: needle xxx"
	if !strings.HasPrefix(lines[0], prefix) {
		t.Errorf("line %.80q does not start with %q", lines[0], prefix)
	}
	if len(lines[0]) >= len(long) || strings.Contains(lines[0], "END") {
		t.Errorf("long line not cut: %d chars", len(lines[0]))
	}
	if lines[1] != ws+"/long.txt:2: short needle" {
		t.Errorf("second line %q", lines[1])
	}
}

func TestGrepTruncation(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	var b strings.Builder
	for i := 1; i <= 10; i++ {
		fmt.Fprintf(&b, "match %d\n", i)
	}
	f.write("m.txt", b.String())
	res := f.call("grep", map[string]any{"pattern": "match", "max_results": 3})
	got := resultText(t, res)
	lines := strings.Split(got, "\n")
	if len(lines) != 4 {
		t.Fatalf("want 3 matches and a note, got:\n%s", got)
	}
	for i, l := range lines[:3] {
		if want := fmt.Sprintf("%s/m.txt:%d: match %d", ws, i+1, i+1); l != want {
			t.Errorf("line %d = %q, want %q", i, l, want)
		}
	}
	if !strings.Contains(lines[3], "truncated") {
		t.Errorf("no truncation note: %q", lines[3])
	}
	if !res.Truncated {
		t.Error("Result.Truncated is false")
	}
	// Exactly max_results matches is not truncated.
	res = f.call("grep", map[string]any{"pattern": "match [1-3]$", "max_results": 3})
	if got := resultText(t, res); strings.Contains(got, "truncated") || res.Truncated {
		t.Errorf("exactly max_results matches reported as truncated:\n%s", got)
	}
}

func TestGrepErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args map[string]any
		want string // substring
	}{
		{"invalid regex", map[string]any{"pattern": "a(b"}, "Error: invalid regular expression: missing closing ): `a(b`"},
		{"missing pattern", map[string]any{}, "pattern"},
		{"missing path", map[string]any{"pattern": "x", "path": "nope"}, "Error: not found: " + ws + "/nope"},
		{"outside", map[string]any{"pattern": "root", "path": "/etc/passwd"}, outside + "/etc/passwd"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			grepTree(f)
			got := f.fail("grep", tc.args)
			if !strings.Contains(got, tc.want) {
				t.Errorf("error %q does not contain %q", got, tc.want)
			}
			if strings.Contains(got, "(?i)") {
				t.Errorf("error %q shows the flags grep adds, not the agent's pattern", got)
			}
		})
	}
}
