package tools

import (
	"math/rand"
	"strings"
	"testing"
)

// apply rebuilds both sides of an edit script.
func apply(ops []diffOp) (a, b string) {
	var sa, sb strings.Builder
	for _, op := range ops {
		if op.kind != '+' {
			sa.WriteString(op.line)
		}
		if op.kind != '-' {
			sb.WriteString(op.line)
		}
	}
	return sa.String(), sb.String()
}

func TestLineDiffRebuildsBothSides(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewSource(1))
	words := []string{"a\n", "b\n", "c\n", "d\n", "e"}
	gen := func() string {
		var s strings.Builder
		for range r.Intn(30) {
			s.WriteString(words[r.Intn(len(words)-1)])
		}
		if r.Intn(3) == 0 {
			s.WriteString("e")
		}
		return s.String()
	}
	for i := range 2000 {
		a, b := gen(), gen()
		ops := lineDiff(linesOf(a), linesOf(b))
		ga, gb := apply(ops)
		if ga != a || gb != b {
			t.Fatalf("case %d: script of %q -> %q rebuilds %q -> %q", i, a, b, ga, gb)
		}
	}
}

func TestHunks(t *testing.T) {
	t.Parallel()
	var a, b []string
	for i := range 30 {
		l := string(rune('a'+i%26)) + "\n"
		a = append(a, l)
		b = append(b, l)
	}
	b[2] = "X\n"
	b[25] = "Y\n"
	got := strings.Join(hunks(lineDiff(a, b)), "\n")
	want := "@@ -1,6 +1,6 @@\n a\n b\n-c\n+X\n d\n e\n f\n@@ -23,7 +23,7 @@\n w\n x\n y\n-z\n+Y\n a\n b\n c"
	if got != want {
		t.Fatalf("hunks:\n%s\nwant:\n%s", got, want)
	}
	if got := hunks(lineDiff([]string{"a"}, []string{"b"})); strings.Join(got, "\n") != "@@ -1 +1 @@\n-a\n\\ No newline at end of file\n+b\n\\ No newline at end of file" {
		t.Fatalf("no newline: %q", got)
	}
}
