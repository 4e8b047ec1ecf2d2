package search

import (
	"strings"
	"testing"

	"github.com/bmatcuk/doublestar/v4"
)

// TestGlobMatcher checks compiled patterns (brace expansion and the fast
// paths of globMatcher) against doublestar.
func TestGlobMatcher(t *testing.T) {
	t.Parallel()
	patterns := []string{
		"**/*.go", "**/*", "**/*.GO", "**/x.go", "**/*_test.go", "**/{a,b}.go", "**/[ab].go", "**/?.go",
		"**/*.{go,md}", `**/\*.go`, "**/.*", "**/**/*.go", "**/a/*.go", "*.go", "a/**/*.go", "**", "**/",
		"**/*go", "**/*.", "**/a*", "**/{a/b,c}",
		"{a,b}/{x,c}.go", "{a,{b,c}}", "{,a/}x.go", "a{,/**}", "{}x.go", "[{]*", `\{a,b\}`, "{a,b",
		"*{.go,_test.go}", "{**/,}*.md", "{[ab],c}/*", "a/{b/**,x.go}", "{a,b}{,/}{c,}", "**/{x,a}.{go,GO}",
	}
	paths := []string{
		"x.go", "a/x.go", "a/b/c/x.go", ".hidden.go", "a/.x.go", "x.GO", "a/b", "a", "a/b.go", "b.go",
		"c", "a/b/c", "x_test.go", "a/x_test.go", "*.go", "a/*.go", "go", "a/go", ".go", "a.", "x.md",
		"a/a/x.go", "ab/x.go", "α/β.go", "{a,b}", "{.go", "b/c.go", "a/c", "ac", "bc", "b/", "a/b/x.md",
	}
	for _, p := range patterns {
		g, err := compileGlob("pattern", p)
		if !doublestar.ValidatePattern(p) {
			if err == nil {
				t.Errorf("compileGlob(%q) accepted an invalid pattern", p)
			}
			continue
		}
		if err != nil {
			t.Fatalf("compileGlob(%q): %v", p, err)
		}
		for _, rel := range paths {
			want, _ := doublestar.Match(p, rel)
			if got, _ := g.match(t.Context(), rel); got != want {
				t.Errorf("compileGlob(%q).match(%q) = %v, doublestar says %v", p, rel, got, want)
			}
		}
	}
}

// TestExpandBracesBounded: the limit holds for the whole expansion and for
// every step of it, so a brace bomb costs nothing.
func TestExpandBracesBounded(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		pattern string
		n       int
	}{
		{strings.Repeat("{,}", 8), 256},
		{strings.Repeat("{,}", 9), -1},
		{strings.Repeat("{,}", 34), -1},
		{"{" + strings.Repeat("{a,b},", 200) + "c}", -1},
		{"{a,b,c}{d,e}", 6},
		{"x", 1},
	} {
		alts, ok := expandBraces(c.pattern, globMaxAlternatives)
		if c.n < 0 {
			if ok {
				t.Errorf("expandBraces(%.30q...) = %d patterns, want refused", c.pattern, len(alts))
			}
			continue
		}
		if !ok || len(alts) != c.n {
			t.Errorf("expandBraces(%.30q...) = %d patterns, %v; want %d", c.pattern, len(alts), ok, c.n)
		}
	}
}
