package tools

import (
	"fmt"
	"strings"
)

// lineDiffMaxEdits bounds the work of a line diff (Myers' D): two texts
// further apart than this are shown as one hunk replacing every line
// between their common head and tail.
const lineDiffMaxEdits = 4000

// diffOp is one line of an edit script: ' ' kept, '-' removed, '+' added.
type diffOp struct {
	kind byte
	line string // with its "\n", if it had one
}

// linesOf splits s after each "\n" (the last line may have none).
func linesOf(s string) []string {
	if s == "" {
		return nil
	}
	l := strings.SplitAfter(s, "\n")
	if l[len(l)-1] == "" {
		l = l[:len(l)-1]
	}
	return l
}

// lineDiff is a shortest edit script from a to b (Myers' O(ND) algorithm
// on what lies between their common head and tail).
func lineDiff(a, b []string) []diffOp {
	pre := 0
	for pre < len(a) && pre < len(b) && a[pre] == b[pre] {
		pre++
	}
	suf := 0
	for suf < len(a)-pre && suf < len(b)-pre && a[len(a)-1-suf] == b[len(b)-1-suf] {
		suf++
	}
	var ops []diffOp
	for _, l := range a[:pre] {
		ops = append(ops, diffOp{' ', l})
	}
	ops = append(ops, myers(a[pre:len(a)-suf], b[pre:len(b)-suf])...)
	for _, l := range a[len(a)-suf:] {
		ops = append(ops, diffOp{' ', l})
	}
	return ops
}

// myers is the edit script of a and b, or, past lineDiffMaxEdits, every
// line of a removed and every line of b added.
func myers(a, b []string) []diffOp {
	n, m := len(a), len(b)
	replace := func() []diffOp {
		ops := make([]diffOp, 0, n+m)
		for _, l := range a {
			ops = append(ops, diffOp{'-', l})
		}
		for _, l := range b {
			ops = append(ops, diffOp{'+', l})
		}
		return ops
	}
	if n == 0 || m == 0 {
		return replace()
	}
	maxD := min(n+m, lineDiffMaxEdits)
	off := maxD + 1
	v := make([]int, 2*maxD+3)
	var trace [][]int
	for d := 0; d <= maxD; d++ {
		trace = append(trace, append([]int(nil), v...))
		for k := -d; k <= d; k += 2 {
			var x int
			if k == -d || (k != d && v[off+k-1] < v[off+k+1]) {
				x = v[off+k+1]
			} else {
				x = v[off+k-1] + 1
			}
			y := x - k
			for x < n && y < m && a[x] == b[y] {
				x, y = x+1, y+1
			}
			v[off+k] = x
			if x >= n && y >= m {
				return backtrack(a, b, trace, off, d)
			}
		}
	}
	return replace()
}

// backtrack walks the trace of myers back from (len(a), len(b)).
func backtrack(a, b []string, trace [][]int, off, d int) []diffOp {
	x, y := len(a), len(b)
	var rev []diffOp
	for ; d > 0; d-- {
		v := trace[d]
		k := x - y
		var pk int
		if k == -d || (k != d && v[off+k-1] < v[off+k+1]) {
			pk = k + 1
		} else {
			pk = k - 1
		}
		px := v[off+pk]
		py := px - pk
		for x > px && y > py {
			x, y = x-1, y-1
			rev = append(rev, diffOp{' ', a[x]})
		}
		if x == px {
			y--
			rev = append(rev, diffOp{'+', b[y]})
		} else {
			x--
			rev = append(rev, diffOp{'-', a[x]})
		}
	}
	for x > 0 && y > 0 {
		x, y = x-1, y-1
		rev = append(rev, diffOp{' ', a[x]})
	}
	ops := make([]diffOp, len(rev))
	for i, op := range rev {
		ops[len(rev)-1-i] = op
	}
	return ops
}

// hunks renders an edit script as unified diff hunks (without the file
// headers), diffContext lines of context around each change; each line is
// one string without its "\n" (a line that had none is followed by
// "\ No newline at end of file").
func hunks(ops []diffOp) []string {
	var out []string
	i := 0
	aLine, bLine := 1, 1 // line numbers of ops[i]
	for i < len(ops) {
		// The next change.
		j := i
		for j < len(ops) && ops[j].kind == ' ' {
			j++
		}
		if j == len(ops) {
			break
		}
		// Its hunk starts diffContext lines before it.
		start := max(j-diffContext, i)
		for ; i < start; i++ {
			aLine, bLine = aLine+1, bLine+1
		}
		// And runs until a stretch of more than 2*diffContext kept lines.
		end := j
		for end < len(ops) {
			if ops[end].kind != ' ' {
				end++
				continue
			}
			k := end
			for k < len(ops) && ops[k].kind == ' ' {
				k++
			}
			if k == len(ops) || k-end > 2*diffContext {
				end = min(end+diffContext, len(ops))
				break
			}
			end = k
		}
		an, bn := 0, 0
		for _, op := range ops[i:end] {
			if op.kind != '+' {
				an++
			}
			if op.kind != '-' {
				bn++
			}
		}
		out = append(out, fmt.Sprintf("@@ -%s +%s @@", hunkRange(aLine-1, an), hunkRange(bLine-1, bn)))
		for _, op := range ops[i:end] {
			out = append(out, string(op.kind)+strings.TrimSuffix(op.line, "\n"))
			if !strings.HasSuffix(op.line, "\n") {
				out = append(out, "\\ No newline at end of file")
			}
		}
		aLine, bLine = aLine+an, bLine+bn
		i = end
	}
	return out
}
