package tools_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/filelock"
	"github.com/sandbox-mcp/sandbox-mcp/masking"
	"github.com/sandbox-mcp/sandbox-mcp/providers/local"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/tools"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

const (
	ws      = sandbox.WorkspaceDir
	outside = "Error: path outside the sandbox: "
)

// fixture is one thread of a local provider with host bash allowed, and the
// tools' Env for it.
type fixture struct {
	t        *testing.T
	stateDir string
	userData string // host dir of /mnt/user-data
	ws       string // host dir of /mnt/user-data/workspace
	locks    *filelock.Locks
	sb       sandbox.Sandbox
	env      *tools.Env
}

func newFixture(t *testing.T, opts ...func(*local.Config)) *fixture {
	t.Helper()
	stateDir := t.TempDir()
	locks := filelock.NewLocks()
	cfg := local.Config{StateDir: stateDir, AllowHostBash: true, Locks: locks}
	for _, o := range opts {
		o(&cfg)
	}
	stateDir = cfg.StateDir
	p, err := local.New(cfg)
	if err != nil {
		t.Fatalf("local.New: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	const thread = "t1"
	sb, err := p.Acquire(t.Context(), thread)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	t.Cleanup(func() { p.Release(thread) })
	userData := local.ThreadDir(stateDir, thread)
	var pairs []masking.Pair
	for _, m := range sb.Mounts() {
		pairs = append(pairs, masking.Pair{Host: m.Host, Virtual: m.Virtual})
	}
	pairs = append(pairs,
		masking.Pair{Host: userData, Virtual: sandbox.UserDataDir},
		masking.Pair{Host: stateDir, Virtual: "/state"},
	)
	mask := masking.New(pairs...)
	return &fixture{
		t:        t,
		stateDir: stateDir,
		userData: userData,
		ws:       filepath.Join(userData, "workspace"),
		locks:    locks,
		sb:       sb,
		env:      &tools.Env{Sandbox: sb, Limits: tools.DefaultLimits(), Mask: mask.Mask},
	}
}

func toolByName(t *testing.T, name string) tools.Tool {
	t.Helper()
	for _, tl := range tools.All() {
		if tl.Def.Name == name {
			return tl
		}
	}
	t.Fatalf("no tool %q in tools.All()", name)
	return tools.Tool{}
}

// call runs a tool and checks what every result must satisfy: one content
// block, and no host path of the thread in its text.
func (f *fixture) call(name string, args map[string]any) *tools.Result {
	f.t.Helper()
	return f.callEnv(f.env, name, args)
}

func (f *fixture) callEnv(env *tools.Env, name string, args map[string]any) *tools.Result {
	f.t.Helper()
	req := mcp.CallToolRequest{}
	req.Params.Name = name
	req.Params.Arguments = args
	res := toolByName(f.t, name).Handle(f.t.Context(), env, req)
	if res == nil || res.CallToolResult == nil {
		f.t.Fatalf("%s(%v): nil result", name, args)
	}
	if len(res.Content) != 1 {
		f.t.Fatalf("%s(%v): %d content blocks, want 1", name, args, len(res.Content))
	}
	if tc, ok := res.Content[0].(mcp.TextContent); ok {
		f.noHostPath(name, tc.Text)
	}
	checkFacts(f.t, name, res)
	return res
}

// noHostPath fails when s names the state dir (as given or resolved).
func (f *fixture) noHostPath(what, s string) {
	f.t.Helper()
	hosts := []string{f.stateDir}
	if real, err := filepath.EvalSymlinks(f.stateDir); err == nil {
		hosts = append(hosts, real)
	}
	for _, h := range hosts {
		if strings.Contains(s, h) {
			f.t.Errorf("%s: result names the host path %s:\n%s", what, h, s)
		}
	}
}

func resultText(t *testing.T, res *tools.Result) string {
	t.Helper()
	tc, ok := res.Content[0].(mcp.TextContent)
	if !ok {
		t.Fatalf("content is %T, want mcp.TextContent", res.Content[0])
	}
	return tc.Text
}

// ok calls a tool that must succeed and returns its text.
func (f *fixture) ok(name string, args map[string]any) string {
	f.t.Helper()
	res := f.call(name, args)
	s := resultText(f.t, res)
	if res.IsError {
		f.t.Fatalf("%s(%v): unexpected error: %s", name, args, s)
	}
	return s
}

// fail calls a tool that must fail and returns its one-line error text.
func (f *fixture) fail(name string, args map[string]any) string {
	f.t.Helper()
	res := f.call(name, args)
	s := resultText(f.t, res)
	if !res.IsError {
		f.t.Fatalf("%s(%v): want an error, got: %s", name, args, s)
	}
	if !strings.HasPrefix(s, "Error: ") || strings.Contains(s, "\n") {
		f.t.Errorf("%s(%v): error is not one line \"Error: ...\": %q", name, args, s)
	}
	return s
}

// host is the host path of a workspace-relative path.
func (f *fixture) host(rel string) string { return filepath.Join(f.ws, filepath.FromSlash(rel)) }

// write creates a workspace file (and its parents) on the host.
func (f *fixture) write(rel, content string) {
	f.t.Helper()
	p := f.host(rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) mkdir(rel string) {
	f.t.Helper()
	if err := os.MkdirAll(f.host(rel), 0o755); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) symlink(target, rel string) {
	f.t.Helper()
	if err := os.Symlink(target, f.host(rel)); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) read(rel string) string {
	f.t.Helper()
	b, err := os.ReadFile(f.host(rel))
	if err != nil {
		f.t.Fatal(err)
	}
	return string(b)
}

// noTempFiles fails when an atomic write left a temporary file behind.
func (f *fixture) noTempFiles() {
	f.t.Helper()
	filepath.WalkDir(f.userData, func(p string, d fs.DirEntry, err error) error {
		if err == nil && strings.HasPrefix(d.Name(), ".sandbox-mcp-") && strings.HasSuffix(d.Name(), ".tmp") {
			f.t.Errorf("temporary file left behind: %s", p)
		}
		return nil
	})
}

// specArgs is SPEC §6's table: every argument of each tool, required ones
// marked with *.
var specArgs = map[string][]string{
	"bash":         {"command*", "timeout", "description", "run_in_background", "yield_after", "reset"},
	"bash_output":  {"job", "offset", "wait"},
	"bash_input":   {"job*", "input", "close"},
	"bash_kill":    {"job*", "signal"},
	"expose_port":  {"port*", "close"},
	"sandbox_info": {},
	"ls":           {"path", "depth"},
	"glob":         {"pattern*", "path", "include_dirs", "max_results"},
	"grep":         {"pattern*", "path", "glob", "literal", "case_sensitive", "max_results"},
	"read_file":    {"path*", "start_line", "end_line"},
	"write_file":   {"path*", "content*", "append"},
	"str_replace":  {"path*", "old_str*", "new_str*", "replace_all"},
	// SPEC §18.
	"checkpoint":  {"message"},
	"checkpoints": {},
	"diff":        {"from", "to"},
	"restore":     {"id*", "force"},
}

var snakeCase = regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)

func TestAllStatic(t *testing.T) {
	t.Parallel()
	all := tools.All()
	var names []string
	for _, tl := range all {
		names = append(names, tl.Def.Name)
	}
	want := []string{"bash", "bash_input", "bash_kill", "bash_output", "checkpoint", "checkpoints", "diff", "expose_port", "glob", "grep", "ls", "read_file", "restore", "sandbox_info", "str_replace", "write_file"}
	got := slices.Sorted(slices.Values(names))
	if !slices.Equal(got, want) {
		t.Fatalf("tools.All() names = %v, want exactly %v", names, want)
	}

	readOnly := map[string]bool{"ls": true, "glob": true, "grep": true, "read_file": true, "bash_output": true, "sandbox_info": true,
		"checkpoints": true, "diff": true}
	// Neither: it changes no file and ends nothing of the sandbox's.
	notDestructive := map[string]bool{"expose_port": true, "checkpoint": true}
	for _, tl := range all {
		t.Run(tl.Def.Name, func(t *testing.T) {
			t.Parallel()
			d := tl.Def
			if !snakeCase.MatchString(d.Name) {
				t.Errorf("name %q is not snake_case", d.Name)
			}
			if strings.TrimSpace(d.Description) == "" {
				t.Error("empty description")
			}
			if tl.Handle == nil {
				t.Error("nil handler")
			}
			a := d.Annotations
			if a.ReadOnlyHint == nil || a.DestructiveHint == nil {
				t.Fatalf("annotations not set: readOnlyHint=%v destructiveHint=%v", a.ReadOnlyHint, a.DestructiveHint)
			}
			ro := readOnly[d.Name]
			if *a.ReadOnlyHint != ro {
				t.Errorf("readOnlyHint = %v, want %v", *a.ReadOnlyHint, ro)
			}
			if want := !ro && !notDestructive[d.Name]; *a.DestructiveHint != want {
				t.Errorf("destructiveHint = %v, want %v", *a.DestructiveHint, want)
			}
			if d.InputSchema.Type != "object" {
				t.Errorf("inputSchema.type = %q, want object", d.InputSchema.Type)
			}

			var wantReq []string
			for _, arg := range specArgs[d.Name] {
				name, req := strings.CutSuffix(arg, "*")
				if req {
					wantReq = append(wantReq, name)
				}
				prop, ok := d.InputSchema.Properties[name].(map[string]any)
				if !ok {
					t.Errorf("argument %q of SPEC §6 is not in the schema", name)
					continue
				}
				if desc, _ := prop["description"].(string); strings.TrimSpace(desc) == "" {
					t.Errorf("argument %q has no description", name)
				}
			}
			gotReq := slices.Sorted(slices.Values(d.InputSchema.Required))
			slices.Sort(wantReq)
			if !slices.Equal(gotReq, wantReq) {
				t.Errorf("required = %v, want %v", d.InputSchema.Required, wantReq)
			}
		})
	}
}

// TestSchemaGolden pins each tool's definition as the client sees it.
// Refresh with: go test ./tools/ -run TestSchemaGolden -update
func TestSchemaGolden(t *testing.T) {
	t.Parallel()
	for _, tl := range tools.All() {
		t.Run(tl.Def.Name, func(t *testing.T) {
			t.Parallel()
			got, err := json.MarshalIndent(tl.Def, "", "  ")
			if err != nil {
				t.Fatalf("marshal: %v", err)
			}
			got = append(got, '\n')
			golden := filepath.Join("testdata", tl.Def.Name+".golden")
			if *update {
				if err := os.MkdirAll("testdata", 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("schema of %s differs from %s (run with -update if the change is intended):\ngot:\n%s\nwant:\n%s", tl.Def.Name, golden, got, want)
			}
		})
	}
}
