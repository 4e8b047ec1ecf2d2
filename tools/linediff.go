package tools

import (
	"fmt"
	"math"
	"strings"
)

// lineDiffMaxEdits bounds the work and memory of a line diff (Myers' D):
// two texts further apart than this are shown as one hunk replacing every
// line between their common head and tail. myers keeps d+1 int32s per step
// d, so a diff holds at most about 2*lineDiffMaxEdits^2 bytes (12.5 MB)
// whatever the input — and still shows hunks for a thousand lines changed
// in a file (2 000 edits).
const lineDiffMaxEdits = 2500

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
//
// Step d keeps only its own band of V: the furthest x on each diagonal
// k = -d, -d+2, ..., d, at index (k+d)/2, as int32 (a line index of a text
// under diffFileMax).
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
	if n == 0 || m == 0 || n >= math.MaxInt32 || m >= math.MaxInt32 {
		return replace()
	}
	maxD := min(n+m, lineDiffMaxEdits)
	var trace [][]int32
	for d := 0; d <= maxD; d++ {
		cur := make([]int32, d+1)
		for k := -d; k <= d; k += 2 {
			var x int
			switch {
			case d == 0:
				x = 0
			case k == -d || (k != d && bandAt(trace[d-1], d-1, k-1) < bandAt(trace[d-1], d-1, k+1)):
				x = bandAt(trace[d-1], d-1, k+1)
			default:
				x = bandAt(trace[d-1], d-1, k-1) + 1
			}
			y := x - k
			for x < n && y < m && a[x] == b[y] {
				x, y = x+1, y+1
			}
			cur[(k+d)/2] = int32(x)
			if x >= n && y >= m {
				return backtrack(a, b, trace, d)
			}
		}
		trace = append(trace, cur)
	}
	return replace()
}

// bandAt is the x of diagonal k in the band of step d.
func bandAt(band []int32, d, k int) int {
	return int(band[(k+d)/2])
}

// backtrack walks the trace of myers (the bands of steps 0..d-1) back
// from (len(a), len(b)), reached at step d.
func backtrack(a, b []string, trace [][]int32, d int) []diffOp {
	x, y := len(a), len(b)
	var rev []diffOp
	for ; d > 0; d-- {
		prev := trace[d-1]
		k := x - y
		var pk int
		if k == -d || (k != d && bandAt(prev, d-1, k-1) < bandAt(prev, d-1, k+1)) {
			pk = k + 1
		} else {
			pk = k - 1
		}
		px := bandAt(prev, d-1, pk)
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
