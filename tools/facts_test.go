package tools_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/tools"
)

// schemas holds each tool's outputSchema, compiled once.
var schemas sync.Map // tool name → *jsonschema.Schema

// checkFacts fails when a tool that declares an outputSchema answers a
// success without structuredContent, or with structuredContent the schema
// refuses (MCP: a client may reject such a result), or when an error
// carries facts. callEnv runs it on every result of this package's tests.
func checkFacts(t *testing.T, name string, res *tools.Result) {
	t.Helper()
	def := toolByName(t, name).Def
	if res.IsError {
		if res.StructuredContent != nil {
			t.Errorf("%s: an error result carries structuredContent %v", name, res.StructuredContent)
		}
		return
	}
	if def.OutputSchema.Type == "" {
		if res.StructuredContent != nil {
			t.Errorf("%s: structuredContent without an outputSchema", name)
		}
		return
	}
	if res.StructuredContent == nil {
		t.Errorf("%s: a success without structuredContent, though the tool declares an outputSchema", name)
		return
	}
	s, ok := schemas.Load(name)
	if !ok {
		raw, err := json.Marshal(def.OutputSchema)
		if err != nil {
			t.Fatalf("%s: outputSchema: %v", name, err)
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
		if err != nil {
			t.Fatalf("%s: outputSchema: %v", name, err)
		}
		c := jsonschema.NewCompiler()
		if err := c.AddResource(name+".json", doc); err != nil {
			t.Fatalf("%s: outputSchema: %v", name, err)
		}
		compiled, err := c.Compile(name + ".json")
		if err != nil {
			t.Fatalf("%s: outputSchema does not compile: %v", name, err)
		}
		s, _ = schemas.LoadOrStore(name, compiled)
	}
	raw, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatalf("%s: structuredContent: %v", name, err)
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("%s: structuredContent: %v", name, err)
	}
	if err := s.(*jsonschema.Schema).Validate(v); err != nil {
		t.Errorf("%s: structuredContent %s does not match the outputSchema: %v", name, raw, err)
	}
}

// facts is a result's structured content as JSON would give it to a client.
func facts(t *testing.T, res *tools.Result) map[string]any {
	t.Helper()
	raw, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("structuredContent %s: %v", raw, err)
	}
	return m
}

func TestOutputSchemas(t *testing.T) {
	t.Parallel()
	for _, tl := range tools.All() {
		has := tl.Def.OutputSchema.Type == "object"
		if want := tl.Def.Name != "ls"; has != want {
			t.Errorf("%s: outputSchema declared = %v, want %v", tl.Def.Name, has, want)
		}
	}
}

func TestFactsBash(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	m := facts(t, f.call("bash", map[string]any{"command": "echo hi; exit 3"}))
	if m["exit_code"] != 3.0 || m["timed_out"] != false || m["truncated"] != false || m["job"] != nil {
		t.Errorf("exit 3: facts %v", m)
	}
	m = facts(t, f.call("bash", map[string]any{"command": "sleep 5", "timeout": 0.3}))
	if _, ok := m["exit_code"]; ok || m["timed_out"] != true {
		t.Errorf("timed out: facts %v", m)
	}
	m = facts(t, f.call("bash", map[string]any{"command": "seq 1 100000"}))
	saved, _ := m["saved_to"].(string)
	if m["truncated"] != true || !strings.HasPrefix(saved, tools.SpillDir+"/") ||
		m["saved_uri"] != tools.OutputsScheme+strings.TrimPrefix(saved, sandbox.OutputsDir+"/") {
		t.Fatalf("long output: facts %v", m)
	}
	if got := f.ok("read_file", map[string]any{"path": saved, "start_line": 100000, "end_line": 100000}); strings.TrimSpace(got) != "100000" {
		t.Errorf("saved_to %s: last line %q", saved, got)
	}
	m = facts(t, f.call("bash", map[string]any{"command": "echo started; sleep 30", "run_in_background": true}))
	job, _ := m["job"].(string)
	if job == "" || m["state"] != "running" {
		t.Fatalf("background: facts %v", m)
	}
	m = facts(t, f.call("bash_output", map[string]any{}))
	list, _ := m["jobs"].([]any)
	if len(list) != 1 || list[0].(map[string]any)["job"] != job || list[0].(map[string]any)["state"] != "running" {
		t.Errorf("bash_output list: facts %v", m)
	}
	m = facts(t, f.call("bash_kill", map[string]any{"job": job, "signal": "KILL"}))
	if m["job"] != job || m["state"] != "killed" || m["signal"] != "KILL" || m["exit_code"] != 137.0 {
		t.Errorf("bash_kill: facts %v", m)
	}
	m = facts(t, f.call("bash_output", map[string]any{"job": job, "offset": 0}))
	if m["state"] != "killed" || m["next_offset"] != float64(len("started\n")) {
		t.Errorf("bash_output of the killed job: facts %v", m)
	}
	m = facts(t, f.call("bash", map[string]any{"command": "echo done", "run_in_background": true}))
	job2, _ := m["job"].(string)
	m = facts(t, f.call("bash_output", map[string]any{"job": job2, "wait": 10}))
	if m["state"] != "exited" || m["exit_code"] != 0.0 {
		t.Errorf("an ended job: facts %v", m)
	}
}

func TestFactsSearch(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for i := range 5 {
		f.write(fmt.Sprintf("d/f%d.txt", i), "needle\nhay\nneedle\n")
	}
	m := facts(t, f.call("glob", map[string]any{"pattern": "d/*.txt", "max_results": 2}))
	paths, _ := m["paths"].([]any)
	if m["total"] != 5.0 || len(paths) != 2 || paths[0] != ws+"/d/f0.txt" || m["next_offset"] != 2.0 {
		t.Errorf("glob: facts %v", m)
	}
	m = facts(t, f.call("glob", map[string]any{"pattern": "d/*.txt", "offset": 4}))
	if paths, _ := m["paths"].([]any); len(paths) != 1 || m["next_offset"] != nil || m["offset"] != 4.0 {
		t.Errorf("glob, last page: facts %v", m)
	}
	m = facts(t, f.call("glob", map[string]any{"pattern": "nothing*"}))
	if paths, ok := m["paths"].([]any); !ok || len(paths) != 0 || m["total"] != 0.0 {
		t.Errorf("glob, nothing: facts %v", m)
	}
	m = facts(t, f.call("grep", map[string]any{"pattern": "needle"}))
	if m["matches"] != 10.0 || m["files"] != 5.0 || m["shown"] != 10.0 || m["complete"] != true || m["next_offset"] != nil {
		t.Errorf("grep: facts %v", m)
	}
	m = facts(t, f.call("grep", map[string]any{"pattern": "needle", "max_results": 3}))
	saved, _ := m["saved_to"].(string)
	if m["matches"] != 10.0 || m["shown"] != 3.0 || m["next_offset"] != 3.0 || !strings.HasPrefix(saved, tools.SpillDir+"/") {
		t.Errorf("grep, cut: facts %v", m)
	}
	m = facts(t, f.call("grep", map[string]any{"pattern": "needle", "output_mode": "files"}))
	if _, ok := m["matches"]; ok || m["files"] != 5.0 || m["shown"] != 5.0 {
		t.Errorf("grep files: facts %v", m)
	}
	m = facts(t, f.call("grep", map[string]any{"pattern": "absent"}))
	if m["matches"] != 0.0 || m["files"] != 0.0 || m["shown"] != 0.0 {
		t.Errorf("grep, no match: facts %v", m)
	}
}

func TestFactsEdits(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	sum := func(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }
	m := facts(t, f.call("write_file", map[string]any{"path": ws + "/a.txt", "content": "one\ntwo\n"}))
	if m["path"] != ws+"/a.txt" || m["bytes"] != 8.0 || m["sha256"] != sum("one\ntwo\n") {
		t.Errorf("write_file: facts %v", m)
	}
	m = facts(t, f.call("write_file", map[string]any{"path": ws + "/a.txt", "content": "three\n", "append": true}))
	if m["bytes"] != 14.0 || m["sha256"] != sum(f.read("a.txt")) {
		t.Errorf("write_file append: facts %v (file %q)", m, f.read("a.txt"))
	}
	// The hash an edit answers is the one the next edit may expect.
	m = facts(t, f.call("str_replace", map[string]any{"path": ws + "/a.txt", "old_str": "two", "new_str": "2",
		"expected_sha256": m["sha256"]}))
	if m["replacements"] != 1.0 || m["sha256"] != sum("one\n2\nthree\n") || m["dry_run"] != nil {
		t.Errorf("str_replace: facts %v", m)
	}
	m = facts(t, f.call("str_replace", map[string]any{"path": ws + "/a.txt", "old_str": "one", "new_str": "1", "dry_run": true,
		"expected_sha256": m["sha256"]}))
	if m["replacements"] != 1.0 || m["dry_run"] != true || m["sha256"] != sum("one\n2\nthree\n") {
		t.Errorf("str_replace dry run: facts %v", m)
	}
	m = facts(t, f.call("read_file", map[string]any{"path": ws + "/a.txt"}))
	if m["sha256"] != sum("one\n2\nthree\n") || m["lines"] != 3.0 || m["bytes"] != 12.0 {
		t.Errorf("read_file: facts %v", m)
	}
}

func TestOutputsURI(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		sandbox.OutputsDir + "/.tool-results/x.txt": tools.OutputsScheme + ".tool-results/x.txt",
		sandbox.OutputsDir + "/a b/c#d?.txt":        tools.OutputsScheme + "a%20b/c%23d%3F.txt",
		sandbox.OutputsDir:                          "",
		sandbox.OutputsDir + "/":                    "",
		sandbox.WorkspaceDir + "/x":                 "",
	} {
		if got := tools.OutputsURI(in); got != want {
			t.Errorf("OutputsURI(%q) = %q, want %q", in, got, want)
		}
	}
}
