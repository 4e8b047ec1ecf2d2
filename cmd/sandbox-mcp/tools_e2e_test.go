package main

import (
	"strings"
	"testing"
)

// TestE2EGlobBombAudited: a brace bomb in glob's pattern or grep's glob
// answers an error at once and, like every call, leaves its audit line
// (before the bound the call never returned, so none was written).
func TestE2EGlobBombAudited(t *testing.T) {
	t.Parallel()
	p := start(t, opts{})
	p.want("write_file", map[string]any{"path": "a.txt", "content": "x\n"}, "Wrote 2 bytes to /mnt/user-data/workspace/a.txt", false)
	bomb := strings.Repeat("{,}", 34) + "*.go"
	for _, c := range []struct {
		tool string
		args map[string]any
	}{
		{"glob", map[string]any{"pattern": bomb}},
		{"grep", map[string]any{"pattern": "x", "glob": bomb}},
	} {
		if got, isErr := p.call(c.tool, c.args); !isErr || !strings.Contains(got, "limit") {
			t.Errorf("%s with a brace bomb = %q (isError %v), want an error naming the limit", c.tool, got, isErr)
		}
	}
	lines, raw := auditLines(t, p.auditPath)
	if len(lines) != 3 || lines[1]["tool"] != "glob" || lines[1]["outcome"] != "error" || lines[2]["tool"] != "grep" || lines[2]["outcome"] != "error" {
		t.Errorf("audit log = \n%s\nwant write_file, then glob and grep with outcome error", raw)
	}
}
