package tools

import (
	"fmt"
	"strings"
)

// diffContext is how many unchanged lines surround a change.
const diffContext = 3

// unifiedDiff is a unified diff of a and b with one hunk spanning every
// change (the lines between the first and the last changed line).
func unifiedDiff(name, a, b string) string {
	if a == b {
		return ""
	}
	al, bl := strings.SplitAfter(a, "\n"), strings.SplitAfter(b, "\n")
	if al[len(al)-1] == "" {
		al = al[:len(al)-1]
	}
	if bl[len(bl)-1] == "" {
		bl = bl[:len(bl)-1]
	}
	pre := 0
	for pre < len(al) && pre < len(bl) && al[pre] == bl[pre] {
		pre++
	}
	suf := 0
	for suf < len(al)-pre && suf < len(bl)-pre && al[len(al)-1-suf] == bl[len(bl)-1-suf] {
		suf++
	}
	start := max(pre-diffContext, 0)
	aEnd, bEnd := min(len(al)-suf+diffContext, len(al)), min(len(bl)-suf+diffContext, len(bl))
	var d strings.Builder
	fmt.Fprintf(&d, "--- %s\n+++ %s\n", name, name)
	fmt.Fprintf(&d, "@@ -%s +%s @@\n", hunkRange(start, aEnd-start), hunkRange(start, bEnd-start))
	line := func(prefix, s string) {
		d.WriteString(prefix)
		d.WriteString(strings.TrimSuffix(s, "\n"))
		d.WriteByte('\n')
		if !strings.HasSuffix(s, "\n") {
			d.WriteString("\\ No newline at end of file\n")
		}
	}
	for _, s := range al[start:pre] {
		line(" ", s)
	}
	for _, s := range al[pre : len(al)-suf] {
		line("-", s)
	}
	for _, s := range bl[pre : len(bl)-suf] {
		line("+", s)
	}
	for _, s := range al[len(al)-suf : aEnd] {
		line(" ", s)
	}
	return d.String()
}

func hunkRange(start, n int) string {
	if n == 0 {
		return fmt.Sprintf("%d,0", start)
	}
	if n == 1 {
		return fmt.Sprintf("%d", start+1)
	}
	return fmt.Sprintf("%d,%d", start+1, n)
}
