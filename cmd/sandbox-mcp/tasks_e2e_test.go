package main

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/internal/testkit"
)

// MCP tasks (SPEC §20, the io.modelcontextprotocol/tasks extension) end to
// end: the real binary, driven by a tasks-capable client of our own —
// raw JSON-RPC on the wire mcp-go and go-sdk speak (neither has the
// extension yet) — over stdio and Streamable HTTP, in both eras: on
// 2026-07-28 a request that declares the extension gets tasks, a
// session's (2025-11-25) never does (SEP-2663), on every provider.

const extTasks = "io.modelcontextprotocol/tasks"

// taskClient is one client: over stdio (a server process of its own) or
// HTTP (a server's URL, one thread); speaking 2026-07-28 (no session:
// every request carries its revision and capabilities in _meta) or a
// session's 2025-11-25 (initialize first); declaring the tasks extension
// (caps) or not.
type taskClient struct {
	t      *testing.T
	legacy bool // 2025-11-25, with a session
	caps   bool // declares the extension: in _meta (and, legacy, at initialize)

	mu   sync.Mutex
	next int
	// stdio
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Reader
	stderr *testkit.Buffer
	// HTTP
	url, thread, session string
	token                string // a bearer token, if any
}

// rpcReply is a JSON-RPC answer: a result or an error.
type rpcReply struct {
	Result map[string]any `json:"result"`
	Err    *rpcError      `json:"error"`
	Status int            `json:"-"` // HTTP status (0: stdio)
	Raw    string         `json:"-"`
}

type rpcError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Data    any    `json:"data"`
}

func (r rpcReply) text() string {
	content, _ := r.Result["content"].([]any)
	if len(content) == 0 {
		return ""
	}
	c, _ := content[0].(map[string]any)
	s, _ := c["text"].(string)
	return s
}

func (r rpcReply) str(key string) string { s, _ := r.Result[key].(string); return s }

// stdioTaskClient starts the server over stdio with args and a client on
// its pipes.
func stdioTaskClient(t *testing.T, legacy, caps bool, args ...string) *taskClient {
	t.Helper()
	cmd := exec.Command(binary(t), args...)
	c := &taskClient{t: t, legacy: legacy, caps: caps, cmd: cmd, stderr: &testkit.Buffer{}}
	cmd.Stderr = c.stderr
	var err error
	if c.in, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	c.out = bufio.NewReaderSize(out, 1<<20)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		c.in.Close()
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
		}
		if s := c.stderr.String(); strings.Contains(s, "WARNING: DATA RACE") || strings.Contains(s, "panic:") {
			t.Errorf("server stderr shows a race or a panic:\n%s", s)
		}
	})
	c.handshake()
	return c
}

// httpTaskClient is a client of the HTTP server at url, in thread (with
// a bearer token, if given).
func httpTaskClient(t *testing.T, url, thread string, legacy, caps bool, token ...string) *taskClient {
	t.Helper()
	c := &taskClient{t: t, legacy: legacy, caps: caps, url: url, thread: thread}
	if len(token) > 0 {
		c.token = token[0]
	}
	c.handshake()
	return c
}

// kill ends a stdio client's server at once (SIGKILL: no cleanup).
func (c *taskClient) kill() {
	c.cmd.Process.Signal(syscall.SIGKILL)
}

// handshake: a session's initialize (declaring the extension in its
// capabilities when caps), or a 2026-07-28 discover that lists it.
func (c *taskClient) handshake() {
	c.t.Helper()
	if !c.legacy {
		r := c.do("server/discover", map[string]any{})
		ext, _ := r.Result["capabilities"].(map[string]any)["extensions"].(map[string]any)
		if _, ok := ext[extTasks]; !ok {
			c.t.Fatalf("server/discover does not list the tasks extension: %s", r.Raw)
		}
		return
	}
	caps := map[string]any{}
	if c.caps {
		caps["extensions"] = map[string]any{extTasks: map[string]any{}}
	}
	r := c.do("initialize", map[string]any{"protocolVersion": "2025-11-25", "capabilities": caps, "clientInfo": map[string]any{"name": "tasks-e2e", "version": "1"}})
	if r.str("protocolVersion") != "2025-11-25" {
		c.t.Fatalf("initialize: %s", r.Raw)
	}
	if ext, _ := r.Result["capabilities"].(map[string]any)["extensions"].(map[string]any); ext[extTasks] != nil {
		c.t.Errorf("a session's initialize lists the tasks extension (SEP-2663: not defined there): %s", r.Raw)
	}
	c.notify("notifications/initialized")
}

// meta is the _meta of a request: on 2026-07-28 its revision and
// capabilities; in a session, the capabilities alone (which the server
// must not take as declaring the extension).
func (c *taskClient) meta() map[string]any {
	caps := map[string]any{}
	if c.caps {
		caps["extensions"] = map[string]any{extTasks: map[string]any{}}
	}
	m := map[string]any{"io.modelcontextprotocol/clientCapabilities": caps}
	if !c.legacy {
		m["io.modelcontextprotocol/protocolVersion"] = "2026-07-28"
	}
	return m
}

func (c *taskClient) notify(method string) {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": method})
	if c.cmd != nil {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.in.Write(append(b, '\n'))
		return
	}
	resp, err := c.post(method, "", b)
	if err != nil {
		c.t.Fatal(err)
	}
	resp.Body.Close()
}

// do sends one request and returns its answer.
func (c *taskClient) do(method string, params map[string]any) rpcReply {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.next++
	id := c.next
	if method != "initialize" {
		p := map[string]any{"_meta": c.meta()}
		for k, v := range params {
			p[k] = v
		}
		params = p
	}
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	var raw []byte
	var status int
	if c.cmd != nil {
		if _, err := c.in.Write(append(b, '\n')); err != nil {
			c.t.Fatalf("%s: %v\n%s", method, err, c.stderr)
		}
		for {
			line, err := c.out.ReadBytes('\n')
			if err != nil {
				c.t.Fatalf("%s: no answer: %v\n%s", method, err, c.stderr)
			}
			if hasID(line, id) {
				raw = line
				break
			}
		}
	} else {
		name, _ := params["name"].(string)
		if tid, ok := params["taskId"].(string); ok {
			name = tid // the extension's routing header: the task id
		}
		resp, err := c.post(method, name, b)
		if err != nil {
			c.t.Fatalf("%s: %v", method, err)
		}
		defer resp.Body.Close()
		status = resp.StatusCode
		if method == "initialize" {
			c.session = resp.Header.Get("Mcp-Session-Id")
		}
		body, _ := io.ReadAll(resp.Body)
		raw = body
		if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
			raw = nil
			for _, line := range strings.Split(string(body), "\n") {
				if d, ok := strings.CutPrefix(line, "data: "); ok && hasID([]byte(d), id) {
					raw = []byte(d)
				}
			}
		}
	}
	var r rpcReply
	if err := json.Unmarshal(raw, &r); err != nil {
		c.t.Fatalf("%s: answer %q: %v", method, raw, err)
	}
	r.Status, r.Raw = status, string(raw)
	if r.Result == nil && r.Err == nil {
		c.t.Fatalf("%s: neither result nor error: %s", method, raw)
	}
	return r
}

func hasID(msg []byte, id int) bool {
	var m struct {
		ID     any    `json:"id"`
		Method string `json:"method"`
	}
	return json.Unmarshal(msg, &m) == nil && m.Method == "" && m.ID == float64(id)
}

// post sends one message over HTTP with the headers its era takes.
func (c *taskClient) post(method, name string, body []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(c.t.Context(), "POST", c.url+"/mcp", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if c.thread != "" {
		req.Header.Set("X-Thread-ID", c.thread)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if c.legacy {
		if c.session != "" {
			req.Header.Set("Mcp-Session-Id", c.session)
			req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
		}
	} else {
		req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
		req.Header.Set("Mcp-Method", method)
		if name != "" {
			req.Header.Set("Mcp-Name", name)
		}
	}
	return http.DefaultClient.Do(req)
}

func (c *taskClient) tool(name string, args map[string]any) rpcReply {
	c.t.Helper()
	return c.do("tools/call", map[string]any{"name": name, "arguments": args})
}

func (c *taskClient) taskOp(method, id string, extra map[string]any) rpcReply {
	c.t.Helper()
	p := map[string]any{"taskId": id}
	for k, v := range extra {
		p[k] = v
	}
	return c.do(method, p)
}

// waitTask polls tasks/get (at the interval the task asks) until its
// status is no longer working, within a minute.
func (c *taskClient) waitTask(id string) rpcReply {
	c.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		r := c.taskOp("tasks/get", id, nil)
		if r.Err != nil {
			c.t.Fatalf("tasks/get %s: %s", id, r.Raw)
		}
		if r.str("status") != "working" || time.Now().After(deadline) {
			return r
		}
		poll, _ := r.Result["pollIntervalMs"].(float64)
		time.Sleep(time.Duration(max(poll, 100)) * time.Millisecond)
	}
}

// newTask calls bash with args (yield_after 1 s) and returns the task it
// answers, checked as a CreateTaskResult.
func (c *taskClient) newTask(args map[string]any) rpcReply {
	c.t.Helper()
	if _, ok := args["yield_after"]; !ok {
		args["yield_after"] = 1
	}
	r := c.tool("bash", args)
	if r.Err != nil || r.str("resultType") != "task" || !regexp.MustCompile(`^j\d+$`).MatchString(r.str("taskId")) || r.str("status") != "working" ||
		r.Result["ttlMs"] != nil || r.Result["content"] != nil || r.str("createdAt") == "" || r.str("lastUpdatedAt") == "" {
		c.t.Fatalf("bash past yield_after, tasks declared: want a CreateTaskResult, got %s", r.Raw)
	}
	return r
}

// marker is a sleep of its own (a number no other test uses at once) and
// the pattern that finds it in a process list but not itself.
func marker(t *testing.T) (sleep, pattern string) {
	n, err := rand.Int(rand.Reader, big.NewInt(9000))
	if err != nil {
		t.Fatal(err)
	}
	v := 1000 + n.Int64()
	return fmt.Sprintf("sleep %d", v), fmt.Sprintf("sleep %d[%d]", v/10, v%10)
}

// running counts the processes of the sandbox whose command line matches
// pattern.
func running(t *testing.T, c *taskClient, pattern string) string {
	t.Helper()
	r := c.tool("bash", map[string]any{"command": "cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' ' | grep -c '" + pattern + "'; true"})
	return strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(r.text()), "[exit code 0]"))
}

// tasksScenario is the extension's behaviour with clients of one server:
// mk makes a client in a thread, declaring the extension or not (2026-07-28).
func tasksScenario(t *testing.T, mk func(thread string, caps bool) *taskClient, thread string) {
	t.Helper()
	a := mk(thread, true)
	// A bash call still running at yield_after is a task: working, with
	// its output so far.
	created := a.newTask(map[string]any{"command": "echo start; read x; echo got $x; cat; echo eof"})
	id := created.str("taskId")
	if created.str("statusMessage") != "start" {
		t.Errorf("the task's first status message: %s", created.Raw)
	}
	got := a.taskOp("tasks/get", id, nil)
	if got.Err != nil || got.str("resultType") != "complete" || got.str("status") != "working" || got.str("statusMessage") != "start" || got.Result["result"] != nil {
		t.Fatalf("tasks/get of a working task: %s", got.Raw)
	}
	// The task is the job: bash_output knows it by the same id; the
	// polls took nothing from what it shows next.
	if out := a.tool("bash_output", map[string]any{"job": id}); out.text() != "[job "+id+" running; next offset 6]" {
		t.Errorf("bash_output of the task's job: %s", out.Raw)
	}
	// Another thread names the same id and finds nothing of this one's.
	b := mk(thread+"-other", true)
	for _, op := range []struct {
		method string
		extra  map[string]any
	}{{"tasks/get", nil}, {"tasks/cancel", nil}, {"tasks/update", map[string]any{"inputResponses": map[string]any{"stdin": map[string]any{"action": "accept", "content": map[string]any{"input": "intruder\n"}}}}}} {
		r := b.taskOp(op.method, id, op.extra)
		if r.Err == nil || r.Err.Code != -32602 || strings.Contains(r.Raw, "start") || strings.Contains(r.Err.Message, "\n") {
			t.Errorf("%s of another thread's task: %s", op.method, r.Raw)
		}
	}
	// tasks/update writes its stdin; decline closes it.
	if r := a.taskOp("tasks/update", id, map[string]any{"inputResponses": map[string]any{"stdin": map[string]any{"action": "accept", "content": map[string]any{"input": "hello\nrest\n"}}}}); r.Err != nil || r.str("resultType") != "complete" || len(r.Result) > 2 {
		t.Fatalf("tasks/update: %s", r.Raw)
	}
	if r := a.taskOp("tasks/update", id, map[string]any{"inputResponses": map[string]any{"stdin": map[string]any{"action": "decline"}}}); r.Err != nil {
		t.Fatalf("tasks/update (decline: close stdin): %s", r.Raw)
	}
	done := a.waitTask(id)
	res, _ := done.Result["result"].(map[string]any)
	if done.str("status") != "completed" || done.str("resultType") != "complete" || res == nil || res["isError"] != nil || done.Result["ttlMs"] == nil {
		t.Fatalf("the ended task: %s", done.Raw)
	}
	if text := (rpcReply{Result: res}).text(); text != "start\ngot hello\nrest\neof\n[exit code 0]" {
		t.Errorf("the task's result: %q, want what the bash call would have answered had it waited", text)
	}
	if r := a.tool("bash_output", map[string]any{"job": id}); r.text() != "got hello\nrest\neof\n[job "+id+" exited with code 0; next offset 25]" {
		t.Errorf("bash_output of the ended task's job: %s", r.Raw)
	}
	if r := a.taskOp("tasks/update", id, map[string]any{"inputResponses": map[string]any{"stdin": map[string]any{"action": "accept", "content": map[string]any{"input": "late\n"}}}}); r.Err == nil || r.Err.Code != -32602 || !strings.Contains(r.Err.Message, "has ended") {
		t.Errorf("tasks/update of an ended task: %s", r.Raw)
	}
	if r := a.taskOp("tasks/update", id, map[string]any{"inputResponses": map[string]any{"name": map[string]any{"action": "accept", "content": map[string]any{"input": "x"}}}}); r.Err == nil || r.Err.Code != -32602 || !strings.Contains(r.Err.Message, `only "stdin"`) {
		t.Errorf("tasks/update with a key the task never asked for: %s", r.Raw)
	}

	// tasks/cancel ends the process group: the status is cancelled and
	// the process is gone.
	sleep, pattern := marker(t)
	id = a.newTask(map[string]any{"command": "echo c; " + sleep + " & wait"}).str("taskId")
	if n := running(t, a, pattern); n != "1" {
		t.Fatalf("the task's process before cancel: %q running", n)
	}
	if r := a.taskOp("tasks/cancel", id, nil); r.Err != nil || r.str("resultType") != "complete" {
		t.Fatalf("tasks/cancel: %s", r.Raw)
	}
	if r := a.waitTask(id); r.str("status") != "cancelled" || r.Result["result"] != nil {
		t.Errorf("a cancelled task: %s", r.Raw)
	}
	if n := running(t, a, pattern); n != "0" {
		t.Errorf("the task's process after cancel: %q running", n)
	}

	// Without the capability: §15 as it was, and no tasks/* at all.
	nc := mk(thread, false)
	r := nc.tool("bash", map[string]any{"command": "echo nc; sleep 3", "yield_after": 1})
	if m := regexp.MustCompile(`^nc\n\[still running as job (j\d+)\]$`).FindStringSubmatch(r.text()); m == nil || r.str("resultType") == "task" || r.Result["taskId"] != nil {
		t.Errorf("a client without the capability: %s", r.Raw)
	} else if g := nc.taskOp("tasks/get", m[1], nil); g.Err == nil || g.Err.Code != -32021 {
		t.Errorf("tasks/get without the capability: %s", g.Raw)
	}
	// A command that ends within yield_after answers as ever.
	if r := a.tool("bash", map[string]any{"command": "echo quick", "yield_after": 5}); r.text() != "quick\n[exit code 0]" || r.str("resultType") != "complete" {
		t.Errorf("a quick command of a tasks client: %s", r.Raw)
	}
}

// legacyScenario: a session (2025-11-25) that declares the extension at
// initialize and in _meta gets §15's answer, and its tasks/* are method
// not found: SEP-2663 does not define the extension there.
func legacyScenario(t *testing.T, c *taskClient) {
	t.Helper()
	r := c.tool("bash", map[string]any{"command": "echo old; sleep 3", "yield_after": 1})
	m := regexp.MustCompile(`^old\n\[still running as job (j\d+)\]$`).FindStringSubmatch(r.text())
	if m == nil || r.Result["taskId"] != nil {
		t.Fatalf("a session's call past yield_after: %s", r.Raw)
	}
	if g := c.taskOp("tasks/get", m[1], nil); g.Err == nil || g.Err.Code != -32601 {
		t.Errorf("a session's tasks/get: %s", g.Raw)
	}
}

// On the local provider (bubblewrap where it runs), over stdio.
func TestE2ETasksStdio(t *testing.T) {
	t.Parallel()
	state := filepath.Join(t.TempDir(), "state")
	args := []string{"--state-dir", state, "--audit-log", filepath.Join(t.TempDir(), "audit.jsonl"), "--allow-host-bash"}
	tasksScenario(t, func(thread string, caps bool) *taskClient {
		return stdioTaskClient(t, false, caps, append(args, "--thread", thread)...)
	}, "tasks")
	legacyScenario(t, stdioTaskClient(t, true, true, append(args, "--thread", "tasks-legacy")...))
}

// On the local provider, over Streamable HTTP: 2026-07-28 requests naming
// their thread, and a session. The audit log records every task request.
func TestE2ETasksHTTP(t *testing.T) {
	t.Parallel()
	audit := filepath.Join(t.TempDir(), "audit.jsonl")
	p := startHTTPBinary(t, "--audit-log", audit)
	tasksScenario(t, func(thread string, caps bool) *taskClient {
		return httpTaskClient(t, p.url, thread, false, caps)
	}, "tasks")
	legacyScenario(t, httpTaskClient(t, p.url, "tasks-legacy", true, true))

	lines, _ := auditLines(t, audit)
	seen := map[string]int{}
	for _, l := range lines {
		if tool, _ := l["tool"].(string); strings.HasPrefix(tool, "tasks/") && l["thread"] == "tasks" {
			seen[tool+" "+l["outcome"].(string)]++
			if args, _ := l["args"].(map[string]any); tool == "tasks/update" && args["input"] != nil {
				if _, isSize := args["input"].(map[string]any); !isSize {
					t.Errorf("the audit log keeps stdin's text: %v", l)
				}
			}
		}
	}
	for _, want := range []string{"tasks/get ok", "tasks/update ok", "tasks/cancel ok", "tasks/update error"} {
		if seen[want] == 0 {
			t.Errorf("no audit line %q: %v", want, seen)
		}
	}
	// The HTTP answers of the extension's errors carry their status.
	c := httpTaskClient(t, p.url, "tasks", false, true)
	if r := c.taskOp("tasks/get", "j999", nil); r.Status != http.StatusBadRequest || r.Err == nil || r.Err.Code != -32602 {
		t.Errorf("an unknown task over HTTP: %d %s", r.Status, r.Raw)
	}
	// A 2026-07-28 request names its thread, or is told how to.
	c.thread = ""
	if r := c.taskOp("tasks/get", "j1", nil); r.Err == nil || r.Err.Code != -32602 || !strings.Contains(r.Err.Message, "X-Thread-ID") {
		t.Errorf("tasks/get naming no thread: %s", r.Raw)
	}
	c.thread = "tasks"
	// Mcp-Name is the task id.
	resp, err := c.post("tasks/get", "j2", []byte(`{"jsonrpc":"2.0","id":99,"method":"tasks/get","params":{"taskId":"j1","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"extensions":{"`+extTasks+`":{}}}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), `"code":-32020`) {
		t.Errorf("Mcp-Name other than the task id: %d %s", resp.StatusCode, body)
	}
}

// With tokens, a thread id is the token's own (SPEC §3): another token
// naming the same thread and task id finds nothing of the first's.
func TestE2ETasksTokens(t *testing.T) {
	t.Parallel()
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfg, []byte("http:\n  auth_tokens: [token-a, token-b]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startHTTPBinary(t, "--config", cfg)
	a := httpTaskClient(t, p.url, "shared", false, true, "token-a")
	id := a.newTask(map[string]any{"command": "echo secret-of-a; read x"}).str("taskId")
	b := httpTaskClient(t, p.url, "shared", false, true, "token-b")
	for _, method := range []string{"tasks/get", "tasks/cancel"} {
		if r := b.taskOp(method, id, nil); r.Err == nil || r.Err.Code != -32602 || strings.Contains(r.Raw, "secret-of-a") {
			t.Errorf("%s of another token's task of the same thread id: %s", method, r.Raw)
		}
	}
	if r := a.taskOp("tasks/get", id, nil); r.str("status") != "working" {
		t.Errorf("the first token's task after the other's attempts: %s", r.Raw)
	}
	a.taskOp("tasks/cancel", id, nil)
}

// On the docker provider, over stdio: the scenario, then a server killed
// mid-task — the task lives in the container's supervisor, and the next
// server answers it.
func TestE2EDockerTasks(t *testing.T) {
	t.Parallel()
	dir, cfgFile, _ := dockerE2EConfig(t)
	state := filepath.Join(dir, "state")
	args := []string{"--config", cfgFile, "--state-dir", state, "--audit-log", "off"}
	tasksScenario(t, func(thread string, caps bool) *taskClient {
		return stdioTaskClient(t, false, caps, append(args, "--thread", thread)...)
	}, "tasks")

	first := stdioTaskClient(t, false, true, append(args, "--thread", "restart")...)
	id := first.newTask(map[string]any{"command": "echo before; read x; echo after $x"}).str("taskId")
	first.kill()
	second := stdioTaskClient(t, false, true, append(args, "--thread", "restart")...)
	if r := second.taskOp("tasks/get", id, nil); r.Err != nil || r.str("status") != "working" || r.str("statusMessage") != "before" {
		t.Fatalf("the task after its server was killed: %s\n%s", r.Raw, second.stderr)
	}
	if r := second.taskOp("tasks/update", id, map[string]any{"inputResponses": map[string]any{"stdin": map[string]any{"action": "accept", "content": map[string]any{"input": "restart\n"}}}}); r.Err != nil {
		t.Fatalf("tasks/update after a restart: %s", r.Raw)
	}
	done := second.waitTask(id)
	if res, _ := done.Result["result"].(map[string]any); (rpcReply{Result: res}).text() != "before\nafter restart\n[exit code 0]" {
		t.Errorf("the task's result after a restart: %s", done.Raw)
	}
}

// On the kubernetes provider, over Streamable HTTP (2026-07-28) through
// two replicas taking turns: a task made through one is read, fed and
// cancelled through the other; then a replica killed mid-task, and a new
// one answers it.
func TestE2EKubernetesTasks(t *testing.T) {
	t.Parallel()
	cfgFile, dir := k8sE2EConfig(t, os.Getenv("SANDBOX_MCP_K8S_BUSYBOX_IMAGE"))
	r1 := startHTTPBinary(t, "--config", cfgFile, "--state-dir", filepath.Join(dir, "s1"))
	r2 := startHTTPBinary(t, "--config", cfgFile, "--state-dir", filepath.Join(dir, "s2"))
	lb, _ := roundRobin(t, r1, r2)
	tasksScenario(t, func(thread string, caps bool) *taskClient {
		return httpTaskClient(t, lb.url, thread, false, caps)
	}, "tasks")

	c := httpTaskClient(t, r1.url, "restart", false, true)
	id := c.newTask(map[string]any{"command": "echo before; read x; echo after $x"}).str("taskId")
	r1.cmd.Process.Signal(syscall.SIGKILL)
	<-r1.exited
	r3 := startHTTPBinary(t, "--config", cfgFile, "--state-dir", filepath.Join(dir, "s3"))
	c = httpTaskClient(t, r3.url, "restart", false, true)
	if r := c.taskOp("tasks/get", id, nil); r.Err != nil || r.str("status") != "working" || r.str("statusMessage") != "before" {
		t.Fatalf("the task after its replica was killed, through a new one: %s\n%s", r.Raw, r3.stderr)
	}
	c.taskOp("tasks/update", id, map[string]any{"inputResponses": map[string]any{"stdin": map[string]any{"action": "accept", "content": map[string]any{"input": "restart\n"}}}})
	done := c.waitTask(id)
	if res, _ := done.Result["result"].(map[string]any); (rpcReply{Result: res}).text() != "before\nafter restart\n[exit code 0]" {
		t.Errorf("the task's result after a restart: %s", done.Raw)
	}
}
