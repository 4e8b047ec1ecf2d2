package tools_test

import (
	"strings"
	"testing"
)

// TestArgsStrict: an argument of the wrong type, a name the tool does not
// take, a missing required one, a value below its minimum: each is one
// error line naming the argument and listing what the tool takes — never
// silently replaced by a default (SPEC §6).
func TestArgsStrict(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.write("f.txt", "one\ntwo\nthree\nfour\nfive\n")
	const readTakes = "read_file takes path (string, required), start_line (integer), end_line (integer), with_hash (boolean)"
	tests := []struct {
		tool string
		args map[string]any
		want string // the error up to "; TOOL takes"
	}{
		{"read_file", map[string]any{"path": "f.txt", "start_line": "four"}, `argument "start_line" must be an integer, got the string "four"`},
		{"read_file", map[string]any{"path": "f.txt", "start": 4.0}, `unknown argument "start"`},
		{"read_file", map[string]any{"path": "f.txt", "start_line": 3.9}, `argument "start_line" must be an integer, got 3.9`},
		{"read_file", map[string]any{"path": "f.txt", "start_line": 1e300}, `argument "start_line" is out of range: 1e+300`},
		{"read_file", map[string]any{"path": "f.txt", "start_line": -2.0}, `argument "start_line" must be 1 or more, got -2`},
		{"read_file", map[string]any{"path": "f.txt", "with_hash": "true"}, `argument "with_hash" must be a boolean (true or false), got the string "true"`},
		{"read_file", map[string]any{"path": 7.0}, `argument "path" must be a string, got 7`},
		{"read_file", map[string]any{"path": nil}, `missing required argument "path"`},
		{"read_file", map[string]any{}, `missing required argument "path"`},
		{"read_file", map[string]any{"path": []any{"f.txt"}}, `argument "path" must be a string, got an array`},
		{"ls", map[string]any{"depth": "2"}, `argument "depth" must be an integer, got the string "2"`},
		{"ls", map[string]any{"depth": 0.0}, `argument "depth" must be 1 or more, got 0`},
		{"glob", map[string]any{"pattern": "*", "max_results": -5.0}, `argument "max_results" must be 1 or more, got -5`},
		{"glob", map[string]any{"pattern": "*", "offset": -1.0}, `argument "offset" must be 0 or more, got -1`},
		{"glob", map[string]any{"pattern": "*", "include_dirs": "yes"}, `argument "include_dirs" must be a boolean (true or false), got the string "yes"`},
		{"grep", map[string]any{"pattern": "x", "context": 2.5}, `argument "context" must be an integer, got 2.5`},
		{"grep", map[string]any{"pattern": "x", "case_sensitive": 1.0}, `argument "case_sensitive" must be a boolean (true or false), got 1`},
		{"grep", map[string]any{"pattern": "x", "regex": "x"}, `unknown argument "regex"`},
		{"write_file", map[string]any{"path": "g.txt", "content": 5.0}, `argument "content" must be a string, got 5`},
		{"write_file", map[string]any{"path": "g.txt", "content": "x", "append": "false"}, `argument "append" must be a boolean (true or false), got the string "false"`},
		{"str_replace", map[string]any{"path": "f.txt", "old_str": "one", "new_str": "1", "replace_all": "true"}, `argument "replace_all" must be a boolean (true or false), got the string "true"`},
		{"str_replace", map[string]any{"path": "f.txt", "old_str": "one"}, `missing required argument "new_str"`},
		{"bash", map[string]any{"command": "echo hi", "timeout": "10"}, `argument "timeout" must be a number, got the string "10"`},
		{"bash", map[string]any{"command": "echo hi", "timeout": -1.0}, `argument "timeout" must be more than 0, got -1`},
		{"bash", map[string]any{"cmd": "echo hi"}, `unknown argument "cmd"`},
		{"expose_port", map[string]any{"port": 70000.0}, `argument "port" must be 65535 or less, got 70000`},
		{"expose_port", map[string]any{"port": 0.0}, `argument "port" must be 1 or more, got 0`},
		{"expose_port", map[string]any{"port": "3000"}, `argument "port" must be an integer, got the string "3000"`},
		{"expose_port", map[string]any{"close": true}, `missing required argument "port"`},
	}
	for _, tc := range tests {
		got := f.fail(tc.tool, tc.args)
		if !strings.HasPrefix(got, "Error: "+tc.want) {
			t.Errorf("%s(%v) = %q, want %q", tc.tool, tc.args, got, "Error: "+tc.want+"; ...")
			continue
		}
		if tc.tool == "read_file" && !strings.HasSuffix(got, "; "+readTakes) {
			t.Errorf("%s(%v) = %q, want it to end with %q", tc.tool, tc.args, got, readTakes)
		}
		if !strings.Contains(got, tc.tool+" takes ") {
			t.Errorf("%s(%v) = %q, want the list of what %s takes", tc.tool, tc.args, got, tc.tool)
		}
	}
	// Nothing was written or changed by a refused call.
	if got := f.read("f.txt"); got != "one\ntwo\nthree\nfour\nfive\n" {
		t.Errorf("f.txt = %q after refused calls", got)
	}
	// null for an optional argument is its default; valid arguments work.
	if got := f.ok("read_file", map[string]any{"path": "f.txt", "start_line": nil, "end_line": 2.0}); got != "one\ntwo\n" {
		t.Errorf("read_file with start_line null, end_line 2 = %q", got)
	}
	if got := f.ok("read_file", map[string]any{"path": "f.txt", "start_line": 4, "end_line": 4.0}); got != "four\n" {
		t.Errorf("read_file start_line 4 = %q", got)
	}
}
