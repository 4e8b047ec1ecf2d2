package main

// End-to-end tests: the real binary, built once, driven over stdio by an
// independent MCP client (go-sdk), as an MCP host would drive it.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/sys/unix"

	"github.com/sandbox-mcp/sandbox-mcp/internal/testkit"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor/supervisortest"
)

var (
	buildOnce sync.Once
	buildDir  string
	buildBin  string
	buildErr  error
)

func TestMain(m *testing.M) {
	// doctor's checks make providers in this process: they run the daemon
	// built for it; the server binaries find theirs beside them.
	code := supervisortest.Run(m, supervisor.SetFallback)
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// binary builds the real binary once, the supervisor daemon beside it as
// releases ship them; a failed build fails every test that needs it.
func binary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "sandbox-mcp-e2e-")
		if buildErr != nil {
			return
		}
		buildBin = filepath.Join(buildDir, "sandbox-mcp")
		args := []string{"build", "-o", buildBin}
		if supervisortest.RaceEnabled() { // the server too, so races in it show
			args = append(args, "-race")
		}
		cmd := exec.Command("go", append(args, ".")...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
			return
		}
		daemon, err := os.ReadFile(supervisortest.Path(t))
		if err == nil {
			err = os.WriteFile(filepath.Join(buildDir, supervisor.DaemonName), daemon, 0o755)
		}
		if err != nil {
			buildErr = fmt.Errorf("the supervisor daemon beside the server: %v", err)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildBin
}

// proc is one running server process and the client session talking to it.
type proc struct {
	t         testing.TB
	cs        *mcp.ClientSession
	cmd       *exec.Cmd
	stdin     io.WriteCloser // rawPipes only
	stdout    io.ReadCloser  // rawPipes only
	stderr    *testkit.Buffer
	stateDir  string
	auditPath string
	thread    string
	closeOnce sync.Once
	closeErr  error
}

type opts struct {
	stateDir  string
	auditPath string   // default: a file in its own temp dir, outside the state dir
	thread    string   // "" = no --thread flag
	noBash    bool     // leave --allow-host-bash off
	isolation string   // --isolation; "" = the default (auto)
	extra     []string // more flags
	env       []string // more KEY=VALUE of the server's environment
	// rawPipes connects over the process's own pipes (mcp.IOTransport)
	// instead of mcp.CommandTransport, so a test can close stdin while a
	// call is in flight: go-sdk's ClientSession.Close waits for in-flight
	// calls before it closes stdin, which a crashed client never does.
	rawPipes bool
}

// start runs the binary over stdio and connects a go-sdk client to it. A
// successful connection proves stdout carries only protocol: any stray
// byte there would break the JSON-RPC stream.
func start(t testing.TB, o opts) *proc {
	t.Helper()
	bin := binary(t)
	if o.stateDir == "" {
		o.stateDir = filepath.Join(t.TempDir(), "state")
	}
	if o.auditPath == "" {
		o.auditPath = filepath.Join(t.TempDir(), "audit.jsonl")
	}
	args := []string{"--state-dir", o.stateDir, "--audit-log", o.auditPath}
	if !o.noBash {
		args = append(args, "--allow-host-bash")
	}
	if o.thread != "" {
		args = append(args, "--thread", o.thread)
	}
	if o.isolation != "" {
		args = append(args, "--isolation", o.isolation)
	}
	args = append(args, o.extra...)
	cmd := exec.Command(bin, args...)
	stderr := &testkit.Buffer{}
	cmd.Stderr = stderr
	cmd.Env = append(append(os.Environ(), "SANDBOX_MCP_E2E_SECRET=hunter2"), o.env...)

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var transport mcp.Transport = &mcp.CommandTransport{Command: cmd}
	var stdin io.WriteCloser
	var out io.ReadCloser
	if o.rawPipes {
		var err error
		out, err = cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if stdin, err = cmd.StdinPipe(); err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		transport = &mcp.IOTransport{Reader: out, Writer: stdin}
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil).Connect(ctx, transport, nil)
	if err != nil {
		if cmd.Process != nil {
			cmd.Process.Kill()
		}
		t.Fatalf("connect to %v: %v\nstderr:\n%s", args, err, stderr)
	}
	thread := o.thread
	if thread == "" {
		thread = "default"
	}
	p := &proc{t: t, cs: cs, cmd: cmd, stdin: stdin, stdout: out, stderr: stderr, stateDir: o.stateDir, auditPath: o.auditPath, thread: thread}
	t.Cleanup(func() {
		p.close()
		if s := stderr.String(); strings.Contains(s, "WARNING: DATA RACE") || strings.Contains(s, "panic:") {
			t.Errorf("server stderr shows a race or a panic:\n%s", s)
		}
	})
	return p
}

// close ends the session: stdin closed, then the process awaited.
func (p *proc) close() error {
	p.closeOnce.Do(func() {
		p.closeErr = p.cs.Close()
		if p.stdin == nil {
			return // CommandTransport waited for the process
		}
		p.stdin.Close()
		exited := make(chan error, 1)
		go func() { exited <- p.cmd.Wait() }()
		select {
		case p.closeErr = <-exited:
		case <-time.After(30 * time.Second):
			p.cmd.Process.Kill()
			<-exited
			p.closeErr = errors.New("server still running 30s after stdin closed; killed")
		}
	})
	return p.closeErr
}

// workspace is the host directory behind /mnt/user-data/workspace.
func (p *proc) workspace() string {
	return filepath.Join(p.stateDir, "threads", p.thread, "user-data", "workspace")
}

// call calls a tool and returns its one text block and isError. Every
// result is checked for the state dir's host path (masking, SPEC §5).
func (p *proc) call(name string, args map[string]any) (string, bool) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.t.Context(), 60*time.Second)
	defer cancel()
	res, err := p.cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		p.t.Fatalf("%s(%v): protocol error: %v\nstderr:\n%s", name, args, err, p.stderr)
	}
	if len(res.Content) != 1 {
		p.t.Fatalf("%s(%v): %d content blocks, want 1: %#v", name, args, len(res.Content), res.Content)
	}
	tc, ok := res.Content[0].(*mcp.TextContent)
	if !ok {
		p.t.Fatalf("%s(%v): content is %T, want text", name, args, res.Content[0])
	}
	for _, host := range hostForms(p.stateDir) {
		if strings.Contains(tc.Text, host) {
			p.t.Errorf("%s(%v): result names the state dir host path %s:\n%s", name, args, host, tc.Text)
		}
	}
	return tc.Text, res.IsError
}

// want calls a tool and checks its exact result.
func (p *proc) want(name string, args map[string]any, want string, wantErr bool) {
	p.t.Helper()
	got, isErr := p.call(name, args)
	if got != want || isErr != wantErr {
		p.t.Errorf("%s(%v) =\n%q (isError %v)\nwant\n%q (isError %v)", name, args, got, isErr, want, wantErr)
	}
}

// hostForms is a host path as given and symlink-resolved.
func hostForms(p string) []string {
	out := []string{p}
	if r, err := filepath.EvalSymlinks(p); err == nil && r != p {
		out = append(out, r)
	}
	return out
}

// auditLines reads the audit log, one decoded JSON object a line.
func auditLines(t *testing.T, path string) ([]map[string]any, []byte) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("audit log: %v", err)
	}
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("audit line %d is not JSON: %v\n%s", n, err, sc.Bytes())
		}
		out = append(out, m)
	}
	return out, raw
}

func TestE2EToolsList(t *testing.T) {
	t.Parallel()
	p := start(t, opts{})
	res, err := p.cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	readOnly := map[string]bool{"ls": true, "glob": true, "grep": true, "read_file": true, "bash_output": true, "checkpoints": true, "diff": true}
	destructive := map[string]bool{"bash": true, "write_file": true, "str_replace": true, "bash_input": true, "bash_kill": true, "restore": true}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
		if tool.Description == "" {
			t.Errorf("%s: no description", tool.Name)
		}
		a := tool.Annotations
		if a == nil {
			t.Errorf("%s: no annotations", tool.Name)
			continue
		}
		switch {
		case readOnly[tool.Name]:
			if !a.ReadOnlyHint {
				t.Errorf("%s: readOnlyHint false, want true", tool.Name)
			}
			if a.DestructiveHint != nil && *a.DestructiveHint {
				t.Errorf("%s: destructiveHint true on a read-only tool", tool.Name)
			}
		case destructive[tool.Name]:
			if a.ReadOnlyHint {
				t.Errorf("%s: readOnlyHint true, want false", tool.Name)
			}
			if a.DestructiveHint == nil || !*a.DestructiveHint {
				t.Errorf("%s: destructiveHint %v, want true", tool.Name, a.DestructiveHint)
			}
		}
	}
	// A fixed order, the most used first (not mcp-go's by name).
	want := []string{"bash", "ls", "glob", "grep", "read_file", "write_file", "str_replace", "bash_output", "bash_input", "bash_kill", "expose_port", "sandbox_info",
		"checkpoint", "checkpoints", "diff", "restore"}
	if !slices.Equal(names, want) {
		t.Errorf("tools = %v, want exactly %v in this order", names, want)
	}
	for _, tool := range res.Tools {
		if len(tool.Icons) != 1 || !strings.HasPrefix(tool.Icons[0].Source, "data:image/svg+xml;base64,") {
			t.Errorf("%s: icons %+v, want one SVG data URI", tool.Name, tool.Icons)
		}
		if schema, _ := tool.OutputSchema.(map[string]any); (schema["type"] == "object") != (tool.Name != "ls") {
			t.Errorf("%s: outputSchema %v", tool.Name, tool.OutputSchema)
		}
	}
	if icons := p.cs.InitializeResult().ServerInfo.Icons; len(icons) != 1 || icons[0].MIMEType != "image/svg+xml" {
		t.Errorf("server icons %+v, want one SVG", icons)
	}
}

// TestE2EStructuredContent: the facts of a result reach a client as
// structuredContent, beside its one text block.
func TestE2EStructuredContent(t *testing.T) {
	t.Parallel()
	p := start(t, opts{})
	call := func(name string, args map[string]any) map[string]any {
		t.Helper()
		res, err := p.cs.CallTool(t.Context(), &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil || res.IsError || len(res.Content) != 1 {
			t.Fatalf("%s(%v): %v %+v", name, args, err, res)
		}
		m, ok := res.StructuredContent.(map[string]any)
		if !ok {
			t.Fatalf("%s(%v): structuredContent %#v", name, args, res.StructuredContent)
		}
		return m
	}
	w := call("write_file", map[string]any{"path": "a.txt", "content": "x\n"})
	if w["sha256"] != "73cb3858a687a8494ca3323053016282f3dad39d42cf62ca4e79dda2aac7d9ac" || w["bytes"] != 2.0 {
		t.Errorf("write_file: %v", w)
	}
	if g := call("glob", map[string]any{"pattern": "*.txt"}); g["total"] != 1.0 {
		t.Errorf("glob: %v", g)
	}
	if b := call("bash", map[string]any{"command": "exit 4"}); b["exit_code"] != 4.0 {
		t.Errorf("bash: %v", b)
	}
	if r := call("read_file", map[string]any{"path": "a.txt"}); r["sha256"] != w["sha256"] || r["lines"] != 1.0 {
		t.Errorf("read_file: %v", r)
	}
	// A cut output names its whole copy as a resource the client can read.
	long := call("bash", map[string]any{"command": "seq 1 100000"})
	uri, _ := long["saved_uri"].(string)
	if long["truncated"] != true || !strings.HasPrefix(uri, "sandbox://outputs/.tool-results/") {
		t.Fatalf("bash, long output: %v", long)
	}
	rr, err := p.cs.ReadResource(t.Context(), &mcp.ReadResourceParams{URI: uri})
	if err != nil || len(rr.Contents) != 1 || !strings.HasSuffix(rr.Contents[0].Text, "\n99999\n100000\n") {
		t.Errorf("resources/read %s: %v %+v", uri, err, rr)
	}
}

func TestE2EEveryTool(t *testing.T) {
	t.Parallel()
	for _, iso := range isolations {
		t.Run(iso, func(t *testing.T) {
			t.Parallel()
			everyTool(t, start(t, opts{isolation: iso}))
		})
	}
}

func everyTool(t *testing.T, p *proc) {
	const ws = "/mnt/user-data/workspace"
	const content = "hello world\nsecond line\n"

	p.want("write_file", map[string]any{"path": "notes/a.txt", "content": content},
		fmt.Sprintf("Wrote %d bytes to %s/notes/a.txt", len(content), ws), false)
	if got, err := os.ReadFile(filepath.Join(p.workspace(), "notes", "a.txt")); err != nil || string(got) != content {
		t.Errorf("host file after write_file = %q, %v; want %q", got, err, content)
	}

	p.want("read_file", map[string]any{"path": ws + "/notes/a.txt"}, content, false)

	p.want("str_replace", map[string]any{"path": "notes/a.txt", "old_str": "world", "new_str": "there"},
		"Replaced 1 occurrence(s) in "+ws+"/notes/a.txt", false)
	if got, _ := os.ReadFile(filepath.Join(p.workspace(), "notes", "a.txt")); string(got) != "hello there\nsecond line\n" {
		t.Errorf("host file after str_replace = %q", got)
	}

	p.want("write_file", map[string]any{"path": ws + "/b.md", "content": "# B\n"},
		"Wrote 4 bytes to "+ws+"/b.md", false)

	p.want("ls", map[string]any{}, ws+"/\n  b.md\n  notes/\n    a.txt", false)
	p.want("ls", map[string]any{"path": ws + "/notes"}, ws+"/notes/\n  a.txt", false)

	p.want("glob", map[string]any{"pattern": "**/*.txt"},
		"Found 1 paths under "+ws+"\n"+ws+"/notes/a.txt", false)
	p.want("glob", map[string]any{"pattern": "*", "path": ws},
		"Found 1 paths under "+ws+"\n"+ws+"/b.md", false)

	p.want("grep", map[string]any{"pattern": "SECOND"}, ws+"/notes/a.txt:2: second line", false)
	p.want("grep", map[string]any{"pattern": "^#", "glob": "*.md"}, ws+"/b.md:1: # B", false)

	// bash: interleaved output, then the exit code; the cwd and HOME are
	// masked; virtual paths work in the command; secrets are not inherited.
	p.want("bash", map[string]any{"command": "cat notes/a.txt; echo oops >&2; exit 3"},
		"hello there\nsecond line\noops\n[exit code 3]", false)
	p.want("bash", map[string]any{"command": `pwd; echo "$HOME"; echo "secret=$SANDBOX_MCP_E2E_SECRET"`},
		ws+"\n"+ws+"\nsecret=\n[exit code 0]", false)
	p.want("bash", map[string]any{"command": "echo made > " + ws + "/from-bash.txt && ls " + ws},
		"b.md\nfrom-bash.txt\nnotes\n[exit code 0]", false)
	p.want("read_file", map[string]any{"path": "from-bash.txt"}, "made\n", false)
}

func TestE2ERefusedPaths(t *testing.T) {
	t.Parallel()
	p := start(t, opts{})
	// A symlink in the workspace pointing out of it, planted on the host.
	if err := os.MkdirAll(p.workspace(), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc", filepath.Join(p.workspace(), "etc-link")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		tool string
		args map[string]any
		path string // the virtual path named in the error
	}{
		{"read_file", map[string]any{"path": "../../../etc/passwd"}, "/etc/passwd"},
		{"read_file", map[string]any{"path": "/mnt/user-data/workspace/../../../etc/hostname"}, "/etc/hostname"},
		{"read_file", map[string]any{"path": "etc-link/passwd"}, "/mnt/user-data/workspace/etc-link/passwd"},
		{"write_file", map[string]any{"path": "/tmp/e2e-escape.txt", "content": "x"}, "/tmp/e2e-escape.txt"},
		{"write_file", map[string]any{"path": "etc-link/e2e-escape", "content": "x"}, "/mnt/user-data/workspace/etc-link/e2e-escape"},
		{"ls", map[string]any{"path": "/etc"}, "/etc"},
		{"grep", map[string]any{"pattern": "root", "path": "/etc/passwd"}, "/etc/passwd"},
		{"glob", map[string]any{"pattern": "*", "path": "/etc"}, "/etc"},
		{"str_replace", map[string]any{"path": "/mnt/user-data-x/f", "old_str": "a", "new_str": "b"}, "/mnt/user-data-x/f"},
	} {
		got, isErr := p.call(c.tool, c.args)
		want := "Error: path outside the sandbox: " + c.path
		if !isErr || got != want {
			t.Errorf("%s(%v) = %q (isError %v), want %q (isError true)", c.tool, c.args, got, isErr, want)
		}
	}
	if _, err := os.Stat("/tmp/e2e-escape.txt"); err == nil {
		t.Errorf("write_file outside the sandbox created /tmp/e2e-escape.txt")
	}

	// A host path under the state dir is outside too, and the error masks it.
	hostFile := filepath.Join(p.workspace(), "secret.txt")
	if err := os.WriteFile(hostFile, []byte("s"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, isErr := p.call("read_file", map[string]any{"path": hostFile})
	if !isErr || !strings.HasPrefix(got, "Error: path outside the sandbox: ") {
		t.Errorf("read_file(host path) = %q (isError %v), want a path-outside error", got, isErr)
	}

	// Every refusal is audited as denied.
	p.close()
	lines, _ := auditLines(t, p.auditPath)
	for i, l := range lines {
		if l["outcome"] != "denied" {
			t.Errorf("audit line %d: outcome %v, want denied: %v", i+1, l["outcome"], l)
		}
	}
}

func TestE2EErrors(t *testing.T) {
	t.Parallel()
	p := start(t, opts{})
	p.want("write_file", map[string]any{"path": "d/f.txt", "content": "one two two\n"}, "Wrote 12 bytes to /mnt/user-data/workspace/d/f.txt", false)
	for _, c := range []struct {
		tool string
		args map[string]any
		want string // prefix of the one error line
	}{
		{"read_file", map[string]any{"path": "missing.txt"}, "Error: not found: /mnt/user-data/workspace/missing.txt"},
		{"read_file", map[string]any{"path": "d"}, "Error: is a directory: /mnt/user-data/workspace/d"},
		{"write_file", map[string]any{"path": "d", "content": "x"}, "Error: "},
		{"str_replace", map[string]any{"path": "d/f.txt", "old_str": "three", "new_str": "x"}, "Error: old_str not found"},
		{"str_replace", map[string]any{"path": "d/f.txt", "old_str": "two", "new_str": "x"}, "Error: old_str found 2 times"},
	} {
		got, isErr := p.call(c.tool, c.args)
		if !isErr || !strings.HasPrefix(got, c.want) || strings.Contains(got, "\n") {
			t.Errorf("%s(%v) = %q (isError %v), want one line starting %q (isError true)", c.tool, c.args, got, isErr, c.want)
		}
	}
	if got, _ := os.ReadFile(filepath.Join(p.workspace(), "d", "f.txt")); string(got) != "one two two\n" {
		t.Errorf("a failed str_replace changed the file: %q", got)
	}
}

func TestE2EThreads(t *testing.T) {
	t.Parallel()
	state := filepath.Join(t.TempDir(), "state")

	a := start(t, opts{stateDir: state, thread: "a"})
	a.want("write_file", map[string]any{"path": "only-a.txt", "content": "from a"}, "Wrote 6 bytes to /mnt/user-data/workspace/only-a.txt", false)
	a.want("read_file", map[string]any{"path": "only-a.txt"}, "from a", false)

	// Another thread, at the same time, on the same state dir: not visible.
	b := start(t, opts{stateDir: state, thread: "b"})
	got, isErr := b.call("read_file", map[string]any{"path": "only-a.txt"})
	if !isErr || got != "Error: not found: /mnt/user-data/workspace/only-a.txt" {
		t.Errorf("thread b read_file(only-a.txt) = %q (isError %v), want not found", got, isErr)
	}
	b.want("glob", map[string]any{"pattern": "**"}, "Found 0 paths under /mnt/user-data/workspace", false)
	b.want("bash", map[string]any{"command": "ls -A; echo end"}, "end\n[exit code 0]", false)
	if err := a.close(); err != nil {
		t.Errorf("thread a server exit: %v\nstderr:\n%s", err, a.stderr)
	}

	// The thread's files persist across a restart.
	a2 := start(t, opts{stateDir: state, thread: "a"})
	a2.want("read_file", map[string]any{"path": "only-a.txt"}, "from a", false)
	a2.want("ls", map[string]any{}, "/mnt/user-data/workspace/\n  only-a.txt", false)

	// And the default thread is yet another one.
	d := start(t, opts{stateDir: state})
	d.want("ls", map[string]any{}, "/mnt/user-data/workspace/", false)
}

// runBinary runs the binary to completion with no stdin, in this
// process's environment.
func runBinary(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return runEnv(t, os.Environ(), args...)
}

func TestE2EInvalidThread(t *testing.T) {
	t.Parallel()
	for _, thread := range []string{"../x", "a/b", ".hidden", "..", "x\ny", strings.Repeat("x", 129)} {
		t.Run(strconv.Quote(thread), func(t *testing.T) {
			t.Parallel()
			state := filepath.Join(t.TempDir(), "state")
			stdout, stderr, code := runBinary(t, "--state-dir", state, "--allow-host-bash", "--thread", thread)
			if code == 0 {
				t.Errorf("--thread %q: exit 0, want non-zero", thread)
			}
			if stdout != "" {
				t.Errorf("--thread %q: stdout %q, want nothing", thread, stdout)
			}
			if !strings.HasSuffix(stderr, "\n") || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, "thread") {
				t.Errorf("--thread %q: stderr = %q, want one line naming the thread", thread, stderr)
			}
			if _, err := os.Stat(filepath.Join(state, "threads")); err == nil {
				t.Errorf("--thread %q: a threads dir was created", thread)
			}
		})
	}
}

func TestE2EBashDisabled(t *testing.T) {
	t.Parallel()
	// Without isolation, bash needs --allow-host-bash (SPEC §12): without
	// it, bash is listed as off (an agent should not learn it by failing),
	// the instructions say why, and a call is refused naming the flag.
	p := start(t, opts{noBash: true, isolation: "none"})
	res, err := p.cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var desc string
	for _, tl := range res.Tools {
		if tl.Name == "bash" {
			desc = tl.Description
		}
	}
	if !strings.HasPrefix(desc, "OFF in this server: ") || !strings.Contains(desc, "--allow-host-bash") {
		t.Errorf("bash's description = %q, want it to say bash is off and name --allow-host-bash", desc)
	}
	if in := p.cs.InitializeResult().Instructions; !strings.Contains(in, "bash is off") || !strings.Contains(in, "--allow-host-bash") {
		t.Errorf("instructions = %q, want them to say bash is off and name --allow-host-bash", in)
	}
	got, isErr := p.call("bash", map[string]any{"command": "touch /mnt/user-data/workspace/ran"})
	if !isErr || !strings.HasPrefix(got, "Error: ") || !strings.Contains(got, "--allow-host-bash") || strings.Contains(got, "\n") {
		t.Errorf("bash without --allow-host-bash = %q (isError %v), want one error line naming --allow-host-bash", got, isErr)
	}
	if _, err := os.Stat(filepath.Join(p.workspace(), "ran")); err == nil {
		t.Errorf("bash ran without --allow-host-bash")
	}
	// The file tools still work.
	p.want("write_file", map[string]any{"path": "x", "content": "y"}, "Wrote 1 bytes to /mnt/user-data/workspace/x", false)
	p.close()
	lines, _ := auditLines(t, p.auditPath)
	if len(lines) != 2 || lines[0]["tool"] != "bash" || lines[0]["outcome"] != "denied" || lines[1]["tool"] != "write_file" {
		t.Errorf("audit = %v, want bash denied, then write_file", lines)
	}
}

func TestE2EAudit(t *testing.T) {
	t.Parallel()
	p := start(t, opts{thread: "audited"})
	const secret = "TOP-SECRET-CONTENT-4242\n"
	const oldStr, newStr = "SECRET", "REDACTED-NEW-9191"
	sum := sha256.Sum256([]byte(secret))

	calls := []struct {
		tool    string
		args    map[string]any
		outcome string
	}{
		{"write_file", map[string]any{"path": "s.txt", "content": secret}, "ok"},
		{"str_replace", map[string]any{"path": "s.txt", "old_str": oldStr, "new_str": newStr}, "ok"},
		{"read_file", map[string]any{"path": "missing"}, "error"},
		{"read_file", map[string]any{"path": "/etc/passwd"}, "denied"},
		{"bash", map[string]any{"command": "exit 4"}, "ok"},
		{"ls", map[string]any{}, "ok"},
	}
	for _, c := range calls {
		p.call(c.tool, c.args)
	}
	// Lines are written before each result returns: no need to stop the
	// server to read them.
	lines, raw := auditLines(t, p.auditPath)
	if len(lines) != len(calls) {
		t.Fatalf("audit log has %d lines, want %d (one per call):\n%s", len(lines), len(calls), raw)
	}
	for i, c := range calls {
		l := lines[i]
		if l["tool"] != c.tool || l["thread"] != "audited" || l["outcome"] != c.outcome {
			t.Errorf("audit line %d: tool %v thread %v outcome %v, want %s audited %s", i+1, l["tool"], l["thread"], l["outcome"], c.tool, c.outcome)
		}
		if l["provider"] != "local" {
			t.Errorf("audit line %d: provider %v, want local", i+1, l["provider"])
		}
		if _, ok := l["time"].(string); !ok {
			t.Errorf("audit line %d: no time", i+1)
		}
		if _, ok := l["duration_ms"].(float64); !ok {
			t.Errorf("audit line %d: no duration_ms", i+1)
		}
	}

	args, _ := lines[0]["args"].(map[string]any)
	content, ok := args["content"].(map[string]any)
	if !ok {
		t.Fatalf("write_file args.content = %#v, want {size, sha256}", args["content"])
	}
	if content["size"] != float64(len(secret)) || content["sha256"] != hex.EncodeToString(sum[:]) {
		t.Errorf("write_file args.content = %v, want size %d sha256 %x", content, len(secret), sum)
	}
	if args["path"] != "s.txt" && args["path"] != "/mnt/user-data/workspace/s.txt" {
		t.Errorf("write_file args.path = %v", args["path"])
	}
	for _, s := range []string{"TOP-SECRET-CONTENT", newStr} {
		if bytes.Contains(raw, []byte(s)) {
			t.Errorf("audit log holds file content %q:\n%s", s, raw)
		}
	}
	if args, _ := lines[4]["args"].(map[string]any); args["command"] != "exit 4" {
		t.Errorf("bash args.command = %v, want the command text", args["command"])
	}
	if lines[4]["exit_code"] != float64(4) {
		t.Errorf("bash exit_code = %v, want 4", lines[4]["exit_code"])
	}
	for _, host := range hostForms(p.stateDir) {
		if bytes.Contains(raw, []byte(host)) {
			t.Errorf("audit log names the state dir host path %s", host)
		}
	}
	if fi, err := os.Stat(p.auditPath); err == nil && fi.Mode().Perm()&0o077 != 0 {
		t.Errorf("audit log mode %v, want owner-only", fi.Mode().Perm())
	}
}

func TestE2ELogsOnStderr(t *testing.T) {
	t.Parallel()
	p := start(t, opts{})
	p.want("ls", map[string]any{}, "/mnt/user-data/workspace/", false)
	if err := p.close(); err != nil {
		t.Errorf("server exit after stdin closed: %v", err)
	}
	// The connection worked, so stdout was protocol only; the log line
	// about serving went to stderr.
	if s := p.stderr.String(); !strings.Contains(s, "serving MCP over stdio") {
		t.Errorf("stderr has no start-up log line:\n%s", s)
	}
}

func TestE2EDefaultAuditPath(t *testing.T) {
	t.Parallel()
	state := filepath.Join(t.TempDir(), "state")
	bin := binary(t)
	cmd := exec.Command(bin, "--state-dir", state)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil).Connect(t.Context(), &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "ls", Arguments: map[string]any{}}); err != nil {
		t.Fatal(err)
	}
	cs.Close()
	lines, _ := auditLines(t, filepath.Join(state, "audit.jsonl"))
	if len(lines) != 1 || lines[0]["tool"] != "ls" || lines[0]["thread"] != "default" {
		t.Errorf("<state-dir>/audit.jsonl = %v, want one ls line on thread default", lines)
	}
}

// startSleeper starts a bash call running a background child that holds
// the output pipe open, its own child, and a foreground sleep, all marked
// in their environment. It returns the call's cancel func, a channel with
// the call's outcome, and the marker once at least two of them run.
func startSleeper(t *testing.T, p *proc) (cancel context.CancelFunc, called <-chan error, marker string) {
	t.Helper()
	marker = fmt.Sprintf("E2E_SLEEPER=%d-%d", os.Getpid(), time.Now().UnixNano())
	cmd := "export " + marker + "; sh -c 'sleep 300; echo never' & sleep 300"
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := p.cs.CallTool(ctx, &mcp.CallToolParams{Name: "bash", Arguments: map[string]any{"command": cmd}})
		done <- err
	}()
	t.Cleanup(func() {
		for _, pid := range testkit.Marked(marker) {
			syscall.Kill(pid, syscall.SIGKILL) // this test's own leftovers
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for len(testkit.Marked(marker)) < 2 {
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("the command's processes never showed up\nstderr:\n%s", p.stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return cancel, done, marker
}

// waitGone polls until no marked process runs; 10s is a deadline against
// hanging, not a speed requirement.
func waitGone(t *testing.T, p *proc, marker, after string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		pids := testkit.Marked(marker)
		if len(pids) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes %v still run 10s after %s\nstderr:\n%s", pids, after, p.stderr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// isolations are the ways bash runs that the tests cover: on the host, and
// the default (bubblewrap where it works, else the host).
var isolations = []string{"none", "auto"}

func TestE2EBashCancelledByClient(t *testing.T) {
	t.Parallel()
	for _, iso := range isolations {
		t.Run(iso, func(t *testing.T) {
			t.Parallel()
			p := start(t, opts{isolation: iso})
			cancel, called, marker := startSleeper(t, p)
			cancel() // go-sdk sends notifications/cancelled
			if err := <-called; !errors.Is(err, context.Canceled) {
				t.Errorf("cancelled call returned %v, want context.Canceled", err)
			}
			waitGone(t, p, marker, "notifications/cancelled")
			// The session goes on.
			p.want("bash", map[string]any{"command": "echo still here"}, "still here\n[exit code 0]", false)
		})
	}
}

func TestE2EBashKilledWhenClientGoesAway(t *testing.T) {
	t.Parallel()
	for _, iso := range isolations {
		t.Run(iso, func(t *testing.T) {
			t.Parallel()
			p := start(t, opts{rawPipes: true, isolation: iso})
			cancel, called, marker := startSleeper(t, p)
			defer cancel()
			// The client vanishes: stdin closes with the call in flight, and
			// no notifications/cancelled is sent.
			if err := p.stdin.Close(); err != nil {
				t.Fatal(err)
			}
			waitGone(t, p, marker, "the client closed stdin")
			select {
			case <-called:
			case <-time.After(30 * time.Second):
				t.Errorf("the bash call never returned after the server lost its client")
			}
			if err := p.close(); err != nil {
				t.Errorf("server exit after stdin closed: %v\nstderr:\n%s", err, p.stderr)
			}
		})
	}
}

// A client that stops reading (its end of the server's stdout closed,
// stdin still open): the server's next answer finds a broken pipe. The
// session ends as if input had ended — the call in flight cancelled, its
// commands killed, the server exiting 0 — rather than the server dying of
// SIGPIPE with nothing ended in order.
func TestE2EClientStopsReading(t *testing.T) {
	t.Parallel()
	p := start(t, opts{rawPipes: true, isolation: "none"})
	_, _, marker := startSleeper(t, p)
	if err := p.stdout.Close(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	go p.cs.Ping(ctx, nil) // its answer is the write that fails
	exited := make(chan error, 1)
	go func() { exited <- p.cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("the server whose client stopped reading exited with %v, want 0\nstderr:\n%s", err, p.stderr)
		}
	case <-time.After(30 * time.Second):
		p.cmd.Process.Kill()
		<-exited
		t.Fatalf("the server still runs 30 s after its client stopped reading\nstderr:\n%s", p.stderr)
	}
	waitGone(t, p, marker, "the server's session ended")
}

func TestE2EBashTimeout(t *testing.T) {
	t.Parallel()
	p := start(t, opts{})
	p.want("bash", map[string]any{"command": "echo before; sleep 60 & sleep 60", "timeout": 1},
		"before\n[timed out after 1s]", false)
	lines, _ := auditLines(t, p.auditPath)
	if len(lines) != 1 || lines[0]["outcome"] != "timeout" {
		t.Errorf("audit = %v, want one bash line with outcome timeout", lines)
	}
}

// Tool calls of one session run concurrently; appends to one file hold its
// lock, so none is lost (SPEC §7).
func TestE2EConcurrentAppends(t *testing.T) {
	t.Parallel()
	p := start(t, opts{})
	const n = 40
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			res, err := p.cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "write_file",
				Arguments: map[string]any{"path": "log.txt", "content": fmt.Sprintf("line %02d\n", i), "append": true}})
			if err != nil || res.IsError {
				t.Errorf("append %d: %v %+v", i, err, res)
			}
		})
	}
	wg.Wait()
	got, err := os.ReadFile(filepath.Join(p.workspace(), "log.txt"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(got), "\n"), "\n")
	slices.Sort(lines)
	var want []string
	for i := range n {
		want = append(want, fmt.Sprintf("line %02d", i))
	}
	if !slices.Equal(lines, want) {
		t.Errorf("after %d concurrent appends the file has %d lines:\n%s", n, len(lines), got)
	}
}

// SIGTERM ends the server: the running command's processes die with it
// and its call is still in the audit log (SPEC §9).
func TestE2ESIGTERM(t *testing.T) {
	t.Parallel()
	p := start(t, opts{rawPipes: true})
	cancel, _, marker := startSleeper(t, p)
	defer cancel()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitGone(t, p, marker, "SIGTERM")
	if err := p.close(); err != nil {
		t.Errorf("server exit after SIGTERM: %v\nstderr:\n%s", err, p.stderr)
	}
	lines, raw := auditLines(t, p.auditPath)
	if len(lines) != 1 || lines[0]["tool"] != "bash" {
		t.Errorf("audit after SIGTERM = %s, want the interrupted bash call", raw)
	}
}

func TestE2EVersionHelp(t *testing.T) {
	t.Parallel()
	stdout, stderr, code := runBinary(t, "--version")
	if code != 0 || !regexp.MustCompile(`^sandbox-mcp \S+\n$`).MatchString(stdout) {
		t.Errorf("--version: exit %d stdout %q stderr %q, want exit 0 and \"sandbox-mcp <version>\"", code, stdout, stderr)
	}
	stdout, stderr, code = runBinary(t, "--help")
	if code != 0 {
		t.Errorf("--help: exit %d, want 0; stderr %q", code, stderr)
	}
	for _, flag := range []string{"-state-dir", "-thread", "-allow-host-bash", "-audit-log", "-mount", "-version"} {
		if !strings.Contains(stdout, flag) {
			t.Errorf("--help does not mention %s:\n%s", flag, stdout)
		}
	}
	_, stderr, code = runBinary(t, "--no-such-flag")
	if code != 2 || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, "no-such-flag") {
		t.Errorf("--no-such-flag: exit %d stderr %q, want 2 and one line naming the flag", code, stderr)
	}
}

// stdin is switched to non-blocking for the poller while serving, and put
// back on exit: the open pipe may be shared with whatever the parent runs
// next on the same stdin.
func TestE2EStdinModeRestored(t *testing.T) {
	t.Parallel()
	var p [2]int
	if err := syscall.Pipe2(p[:], syscall.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	r, w := os.NewFile(uintptr(p[0]), "r"), os.NewFile(uintptr(p[1]), "w")
	defer r.Close()
	cmd := exec.Command(binary(t), "--state-dir", t.TempDir(), "--audit-log", "off")
	cmd.Stdin = r
	var out bytes.Buffer
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	io.WriteString(w, `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`+"\n")
	nonblock := func() bool {
		fl, err := unix.FcntlInt(uintptr(p[0]), unix.F_GETFL, 0)
		if err != nil {
			t.Fatal(err)
		}
		return fl&unix.O_NONBLOCK != 0
	}
	deadline := time.Now().Add(10 * time.Second)
	for !nonblock() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // the server switches it at start
	}
	if !nonblock() {
		t.Fatal("stdin was never made non-blocking while serving")
	}
	w.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit: %v", err)
	}
	if !strings.Contains(out.String(), `"id":0`) {
		t.Fatalf("no initialize answer: %q", out.String())
	}
	if nonblock() {
		t.Fatal("stdin left non-blocking after exit")
	}
}

// SPEC's sample config has an http section; with it, and without --http,
// the server still serves stdio (the default mode).
func TestE2ESampleConfigServesStdio(t *testing.T) {
	t.Parallel()
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfg, []byte("http: {addr: 127.0.0.1:1, auth_tokens: [x], allowed_origins: []}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := start(t, opts{extra: []string{"--config", cfg}})
	p.want("write_file", map[string]any{"path": "a.txt", "content": "x"}, "Wrote 1 bytes to /mnt/user-data/workspace/a.txt", false)
	if !strings.Contains(p.stderr.String(), "not served without --http") {
		t.Errorf("no start-up line about http.addr:\n%s", p.stderr)
	}
}
