//go:build unix

package daemon

import (
	"strings"
	"testing"
)

// The state file is written by the sandbox: whatever it holds, parsing it
// never panics, and what it accepts is within the bounds and well formed.
func FuzzParseState(f *testing.F) {
	f.Add([]byte("/w\x00A=1\x00B=2\x00\x00"))
	f.Add([]byte("/w\x00export -p\x00declare -x A=\"1\"\ndeclare -x B=$'a\\nb'\n\x00"))
	f.Add([]byte("/w\x00export -p\x00export A='x'\n\x00"))
	f.Add([]byte("/tmp\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		cwd, vars, _, err := parseState(b)
		if err != nil {
			return
		}
		if !strings.HasPrefix(cwd, "/") {
			t.Fatalf("accepted a relative directory %q", cwd)
		}
		if len(vars.env) > maxStateVars {
			t.Fatalf("%d variables accepted", len(vars.env))
		}
		for _, kv := range vars.env {
			if !strings.Contains(kv, "=") || strings.ContainsRune(kv, 0) {
				t.Fatalf("accepted the entry %q", kv)
			}
		}
	})
}
