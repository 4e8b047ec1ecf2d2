package tools

import (
	"fmt"
	"runtime"
	"testing"
)

// TestRedTeamLineDiffMemory: two 5000-line texts with no line in common
// (about 60 KB each, far below diffFileMax) make myers keep a copy of its
// 8003-int V for every D up to 4000: ~256 MB allocated for one file of one
// diff call. An agent drives this with two write_files and a diff.
func TestRedTeamLineDiffMemory(t *testing.T) {
	var a, b []string
	for i := range 5000 {
		a = append(a, fmt.Sprintf("old line %d\n", i))
		b = append(b, fmt.Sprintf("new line %d\n", i))
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	lineDiff(a, b)
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > 32<<20 {
		t.Errorf("one line diff of two %d-line texts allocated %d MiB", len(a), got>>20)
	}
}
