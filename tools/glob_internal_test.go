package tools

import (
	"testing"

	"github.com/bmatcuk/doublestar/v4"
)

// TestGlobMatcher checks the fast paths of globMatcher against doublestar.
func TestGlobMatcher(t *testing.T) {
	t.Parallel()
	patterns := []string{
		"**/*.go", "**/*", "**/*.GO", "**/x.go", "**/*_test.go", "**/{a,b}.go", "**/[ab].go", "**/?.go",
		"**/*.{go,md}", `**/\*.go`, "**/.*", "**/**/*.go", "**/a/*.go", "*.go", "a/**/*.go", "**", "**/",
		"**/*go", "**/*.", "**/a*", "**/{a/b,c}",
	}
	paths := []string{
		"x.go", "a/x.go", "a/b/c/x.go", ".hidden.go", "a/.x.go", "x.GO", "a/b", "a", "a/b.go", "b.go",
		"c", "a/b/c", "x_test.go", "a/x_test.go", "*.go", "a/*.go", "go", "a/go", ".go", "a.", "x.md",
		"a/a/x.go", "ab/x.go", "α/β.go",
	}
	for _, p := range patterns {
		if !doublestar.ValidatePattern(p) {
			t.Fatalf("invalid pattern %q in the test", p)
		}
		m := globMatcher(p)
		for _, rel := range paths {
			want, _ := doublestar.Match(p, rel)
			if got := m(rel); got != want {
				t.Errorf("globMatcher(%q)(%q) = %v, doublestar says %v", p, rel, got, want)
			}
		}
	}
}
