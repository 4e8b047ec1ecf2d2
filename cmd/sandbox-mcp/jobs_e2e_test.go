package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// An agent's session with living processes (SPEC §15), over HTTP with
// go-sdk clients, on the default local sandbox (bubblewrap where it
// runs): a dev server started in the background and reached from another
// session of the thread, a long test run that outlives yield_after and is
// polled to its end, a prompt answered, the cap of 16 jobs, and a thread
// that cannot name another thread's job. These clients speak the
// session-bearing 2025-11-25 (the next test: 2026-07-28, the same suite).
func TestE2EJobs(t *testing.T) {
	t.Parallel()
	busybox, err := exec.LookPath("busybox")
	if err != nil {
		t.Skip("SKIPPED: no busybox for the dev server (apt-get install busybox)")
	}
	audit := filepath.Join(t.TempDir(), "audit.jsonl")
	p := startHTTPBinary(t, "--audit-log", audit)
	p.legacyClients = true
	jobsScenario(t, p, p, busybox, audit)
}

// The same with http.stateless on: go-sdk's client, naming its thread,
// speaks 2026-07-28 — no session; every request leases its thread's
// sandbox.
func TestE2EJobsStateless(t *testing.T) {
	t.Parallel()
	busybox, err := exec.LookPath("busybox")
	if err != nil {
		t.Skip("SKIPPED: no busybox for the dev server (apt-get install busybox)")
	}
	audit := filepath.Join(t.TempDir(), "audit.jsonl")
	p := startStateless(t, "--audit-log", audit)
	if v := jobsSession(t, p, "dev").InitializeResult().ProtocolVersion; v != "2026-07-28" {
		t.Fatalf("go-sdk's client negotiated %q, want the stateless 2026-07-28", v)
	}
	jobsScenario(t, p, p, busybox, audit)
}

// The same on the docker provider, in a stock busybox image (sh, no bash).
func TestE2EDockerJobs(t *testing.T) {
	t.Parallel()
	dir, cfgFile, _ := dockerE2EConfig(t)
	cfg, err := os.ReadFile(cfgFile)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(cfgFile, []byte(strings.Replace(string(cfg), "image: sandbox-mcp-base:latest", "image: sandbox-mcp-test:busybox-sh", 1)), 0o644)
	audit := filepath.Join(dir, "audit.jsonl")
	p := startHTTPBinary(t, "--config", cfgFile, "--audit-log", audit)
	jobsScenario(t, p, p, "busybox", audit)
}

// The same on the kubernetes provider, its sessions split over two server
// replicas (the jobs live in the Pod's supervisor); then a job outlives the
// replica that started it, killed, and a new replica reads it.
func TestE2EKubernetesJobs(t *testing.T) {
	t.Parallel()
	cfgFile, dir := k8sE2EConfig(t, os.Getenv("SANDBOX_MCP_K8S_BUSYBOX_IMAGE"))
	audit1, audit2 := filepath.Join(dir, "audit1.jsonl"), filepath.Join(dir, "audit2.jsonl")
	r1 := startHTTPBinary(t, "--config", cfgFile, "--state-dir", filepath.Join(dir, "s1"), "--audit-log", audit1)
	r2 := startHTTPBinary(t, "--config", cfgFile, "--state-dir", filepath.Join(dir, "s2"), "--audit-log", audit2)
	r1.legacyClients, r2.legacyClients = true, true // sessions, each on its replica
	jobsScenario(t, r1, r2, "busybox", audit1, audit2)
	jobOutlivesReplica(t, r1, cfgFile, dir)
}

// The same with http.stateless on both replicas: one thread's requests go
// to either (no session affinity), and a replica killed mid-run loses the
// client no file, job or shell state.
func TestE2EKubernetesJobsStateless(t *testing.T) {
	t.Parallel()
	cfgFile, dir := k8sE2EConfig(t, os.Getenv("SANDBOX_MCP_K8S_BUSYBOX_IMAGE"))
	cfg, err := os.ReadFile(cfgFile)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(cfgFile, append(cfg, "http:\n  stateless: true\n"...), 0o644)
	audit1, audit2 := filepath.Join(dir, "audit1.jsonl"), filepath.Join(dir, "audit2.jsonl")
	r1 := startHTTPBinary(t, "--config", cfgFile, "--state-dir", filepath.Join(dir, "s1"), "--audit-log", audit1)
	r2 := startHTTPBinary(t, "--config", cfgFile, "--state-dir", filepath.Join(dir, "s2"), "--audit-log", audit2)
	// Every client's requests alternate between the replicas.
	lb, drop := roundRobin(t, r1, r2)
	jobsScenario(t, lb, lb, "busybox", audit1, audit2)

	// One replica goes (taken out of the rotation, then killed) while a job
	// runs and a file is written: the same client goes on through the other.
	a := jobsSession(t, lb, "dev")
	got, isErr := jobsCall(t, lb, a, "bash", map[string]any{"command": "echo kept > kept.txt; i=0; while :; do i=$((i+1)); echo n$i; sleep 0.5; done", "run_in_background": true})
	m := regexp.MustCompile(`\[job (j\d+) started\]$`).FindStringSubmatch(got)
	if isErr || m == nil {
		t.Fatalf("start: %q", got)
	}
	drop(r1)
	r1.cmd.Process.Signal(syscall.SIGKILL)
	<-r1.exited
	if got, _ := jobsCall(t, lb, a, "bash_output", map[string]any{"job": m[1], "wait": 10}); !regexp.MustCompile(`n\d+\n\[job ` + m[1] + ` running; next offset \d+\]$`).MatchString(got) {
		t.Errorf("the job after a replica died: %q", got)
	}
	if got, _ := jobsCall(t, lb, a, "read_file", map[string]any{"path": "kept.txt"}); got != "kept\n" {
		t.Errorf("the file after a replica died: %q", got)
	}
	jobsCall(t, lb, a, "bash_kill", map[string]any{"job": m[1], "signal": "KILL"})
}

// roundRobin is a load balancer in front of replicas: each request goes to
// the next one in turn (no affinity), streams passed through as they come;
// drop takes a replica out of the rotation.
func roundRobin(t *testing.T, replicas ...*httpProc) (lb *httpProc, drop func(*httpProc)) {
	t.Helper()
	var mu sync.Mutex
	live := slices.Clone(replicas)
	next := 0
	proxy := &httputil.ReverseProxy{
		FlushInterval: -1,
		Rewrite: func(r *httputil.ProxyRequest) {
			mu.Lock()
			target := live[next%len(live)]
			next++
			mu.Unlock()
			u, _ := url.Parse(target.url)
			r.SetURL(u)
			r.Out.Host = r.In.Host
		},
	}
	srv := httptest.NewServer(proxy)
	t.Cleanup(srv.Close)
	return &httpProc{url: srv.URL, stderr: replicas[len(replicas)-1].stderr}, func(p *httpProc) {
		mu.Lock()
		defer mu.Unlock()
		live = slices.DeleteFunc(live, func(q *httpProc) bool { return q == p })
	}
}

// jobOutlivesReplica starts a job through r1, kills r1, and reads the job
// through a new replica.
func jobOutlivesReplica(t *testing.T, r1 *httpProc, cfgFile, dir string) {
	t.Helper()
	a := jobsSession(t, r1, "dev")
	got, isErr := jobsCall(t, r1, a, "bash", map[string]any{"command": "i=0; while :; do i=$((i+1)); echo n$i; sleep 0.5; done", "run_in_background": true})
	m := regexp.MustCompile(`\[job (j\d+) started\]$`).FindStringSubmatch(got)
	if isErr || m == nil {
		t.Fatalf("start: %q", got)
	}
	r1.cmd.Process.Signal(syscall.SIGKILL)
	<-r1.exited
	r3 := startHTTPBinary(t, "--config", cfgFile, "--state-dir", filepath.Join(dir, "s3"))
	c := jobsSession(t, r3, "dev")
	got, isErr = jobsCall(t, r3, c, "bash_output", map[string]any{"job": m[1], "wait": 10})
	if isErr || !regexp.MustCompile(`n\d+\n\[job `+m[1]+` running; next offset \d+\]$`).MatchString(got) {
		t.Errorf("the job after its replica died, through a new one: %q", got)
	}
	jobsCall(t, r3, c, "bash_kill", map[string]any{"job": m[1], "signal": "KILL"})
}

func jobsSession(t *testing.T, p *httpProc, thread string) *mcp.ClientSession {
	t.Helper()
	hc := &http.Client{Transport: bearerRT{thread: thread}}
	var opts *mcp.ClientSessionOptions
	want := "2026-07-28"
	if p.legacyClients {
		opts, want = &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"}, "2025-11-25"
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil).Connect(t.Context(),
		&mcp.StreamableClientTransport{Endpoint: p.url + "/mcp", HTTPClient: hc, MaxRetries: -1}, opts)
	if err != nil {
		t.Fatalf("connect: %v\n%s", err, p.stderr)
	}
	if v := cs.InitializeResult().ProtocolVersion; v != want {
		t.Fatalf("the client negotiated %q, want %q", v, want)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func jobsCall(t *testing.T, p *httpProc, cs *mcp.ClientSession, name string, args map[string]any) (string, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s(%v): %v\n%s", name, args, err, p.stderr)
	}
	return res.Content[0].(*mcp.TextContent).Text, res.IsError
}

// jobsScenario is an agent's session with jobs: one session of thread
// "dev" on server pa, another of "dev" and one of thread "other" on pb;
// busybox runs busybox in the sandboxes; audits are the servers' logs.
func jobsScenario(t *testing.T, pa, pb *httpProc, busybox string, audits ...string) {
	call := func(cs *mcp.ClientSession, name string, args map[string]any) (string, bool) {
		t.Helper()
		return jobsCall(t, pb, cs, name, args)
	}
	ok := func(cs *mcp.ClientSession, name string, args map[string]any) string {
		t.Helper()
		got, isErr := call(cs, name, args)
		if isErr {
			t.Fatalf("%s(%v): %s", name, args, got)
		}
		return got
	}
	a, b, other := jobsSession(t, pa, "dev"), jobsSession(t, pb, "dev"), jobsSession(t, pb, "other")

	// One shell for the thread: a cd and an export in one session (on
	// kubernetes, one replica) hold in the next call of another; reset
	// starts afresh; the other thread's shell is its own.
	ok(a, "bash", map[string]any{"command": "mkdir -p deep/er && cd deep/er && export STAGE=two"})
	if got := ok(b, "bash", map[string]any{"command": `pwd; echo "$STAGE"`}); got != "/mnt/user-data/workspace/deep/er\ntwo\n[exit code 0]" {
		t.Errorf("the shell state across sessions: %q", got)
	}
	if got := ok(other, "bash", map[string]any{"command": `pwd; echo "[$STAGE]"`}); got != "/mnt/user-data/workspace\n[]\n[exit code 0]" {
		t.Errorf("another thread's shell: %q", got)
	}
	if got := ok(b, "bash", map[string]any{"command": `pwd; echo "[$STAGE]"`, "reset": true}); got != "/mnt/user-data/workspace\n[]\n[exit code 0]" {
		t.Errorf("reset: %q", got)
	}

	// A dev server, started by one session, reached by another.
	ok(a, "bash", map[string]any{"command": "mkdir -p site && echo hello-from-dev > site/index.html"})
	got := ok(a, "bash", map[string]any{"command": busybox + " httpd -f -vv -p 127.0.0.1:18765 -h site", "run_in_background": true})
	if !strings.HasSuffix(got, "[job j1 started]") {
		t.Fatalf("start the dev server: %q", got)
	}
	got = ok(b, "bash", map[string]any{"command": "for i in $(seq 50); do " + busybox + " wget -qO- http://127.0.0.1:18765/ && exit; sleep 0.1; done; exit 1"})
	if got != "hello-from-dev\n[exit code 0]" {
		t.Fatalf("reach the dev server: %q", got)
	}
	if got := ok(b, "bash_output", map[string]any{}); !strings.HasPrefix(got, "j1 running: "+busybox+" httpd") {
		t.Errorf("list: %q", got)
	}
	// The server's log says it served the request.
	if got := ok(b, "bash_output", map[string]any{"job": "j1", "offset": 0}); !strings.Contains(got, "response:200") {
		t.Errorf("dev server log: %q", got)
	}

	// Another thread cannot name it.
	if got, isErr := call(other, "bash_output", map[string]any{"job": "j1"}); !isErr || !strings.Contains(got, "no job j1") {
		t.Errorf("another thread's bash_output j1: %q", got)
	}
	if got, isErr := call(other, "bash_kill", map[string]any{"job": "j1"}); !isErr || !strings.Contains(got, "no job j1") {
		t.Errorf("another thread's bash_kill j1: %q", got)
	}
	if got := ok(other, "bash_output", map[string]any{}); got != "no jobs" {
		t.Errorf("another thread's list: %q", got)
	}

	// A long test run outlives yield_after and is polled to its end.
	got = ok(a, "bash", map[string]any{"command": "for i in 1 2 3; do echo step$i; sleep 1; done; echo all passed", "yield_after": 1.5})
	yielded := regexp.MustCompile(`^((?:step\d\n)*)\[still running as job j2\]$`).FindStringSubmatch(got)
	if yielded == nil {
		t.Fatalf("yield: %q", got)
	}
	// What the yield showed and what the polls add is the whole output.
	var polled strings.Builder
	polled.WriteString(yielded[1])
	for range 20 {
		got = ok(b, "bash_output", map[string]any{"job": "j2", "wait": 60})
		polled.WriteString(regexp.MustCompile(`\[job j2 running; next offset \d+\]$`).ReplaceAllString(got, ""))
		if strings.Contains(got, "exited with code") {
			break
		}
	}
	if s := polled.String(); s != "step1\nstep2\nstep3\nall passed\n[job j2 exited with code 0; next offset 29]" {
		t.Errorf("the yield and the polls: %q", s)
	}

	// The dev server stopped, with its group.
	if got := ok(a, "bash_kill", map[string]any{"job": "j1"}); !strings.Contains(got, "[job j1 exited with code 143; next offset") {
		t.Errorf("bash_kill: %q", got)
	}
	if got := ok(b, "bash", map[string]any{"command": busybox + " wget -qO- -T 2 http://127.0.0.1:18765/"}); strings.Contains(got, "hello-from-dev") {
		t.Errorf("the dev server still answers after bash_kill: %q", got)
	}

	// A prompt, answered from the other session.
	got = ok(a, "bash", map[string]any{"command": `printf 'continue? '; read answer; echo "got $answer"`, "run_in_background": true})
	if !strings.HasSuffix(got, "[job j3 started]") {
		t.Errorf("prompt: %q", got)
	}
	for i := 0; !strings.Contains(got, "continue? ") && i < 10; i++ { // a slow machine: the prompt comes later
		got += ok(b, "bash_output", map[string]any{"job": "j3", "wait": 1})
	}
	if !strings.Contains(got, "continue? ") {
		t.Errorf("the prompt: %q", got)
	}
	got = ok(b, "bash_input", map[string]any{"job": "j3", "input": "yes\n"})
	for i := 0; !strings.Contains(got, "exited") && i < 10; i++ { // a slow machine: the answer comes later
		got += ok(b, "bash_output", map[string]any{"job": "j3", "wait": 1})
	}
	if !strings.Contains(got, "got yes\n") || !strings.Contains(got, "[job j3 exited with code 0") {
		t.Errorf("answer: %q", got)
	}

	// 16 jobs at the cap, the 17th refused.
	for i := range 16 {
		if got := ok(a, "bash", map[string]any{"command": "sleep 120", "run_in_background": true}); !strings.HasSuffix(got, fmt.Sprintf("[job j%d started]", i+4)) {
			t.Fatalf("job %d: %q", i+1, got)
		}
	}
	if got, isErr := call(b, "bash", map[string]any{"command": "sleep 1", "run_in_background": true}); !isErr || !strings.Contains(got, "16") || !strings.Contains(got, "bash_kill") {
		t.Errorf("17th job: %q (isError %v), want refused naming the cap of 16", got, isErr)
	}
	for i := range 16 {
		ok(b, "bash_kill", map[string]any{"job": fmt.Sprintf("j%d", i+4), "signal": "KILL"})
	}

	// The audit log has every job call; what was typed only by size and hash.
	var data []byte
	for _, f := range audits {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		data = append(data, b...)
	}
	tools := map[string]int{}
	for line := range strings.SplitSeq(strings.TrimSpace(string(data)), "\n") {
		var ev struct {
			Tool string         `json:"tool"`
			Args map[string]any `json:"args"`
		}
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("audit line %q: %v", line, err)
		}
		tools[ev.Tool]++
		if ev.Tool == "bash_input" {
			// Its size only: a hash of a short secret gives it away.
			if in, _ := ev.Args["input"].(map[string]any); len(in) != 1 || in["size"] != float64(4) {
				t.Errorf("audit of bash_input's input: %v, want its size only", ev.Args)
			}
		}
	}
	for _, name := range []string{"bash", "bash_output", "bash_input", "bash_kill"} {
		if tools[name] == 0 {
			t.Errorf("no audit line for %s: %v", name, tools)
		}
	}
}
