package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/internal/testkit"
)

// Bounds for every tenant (SPEC §16), against the real binary over HTTP.

// tokenClient is a go-sdk client with a bearer token and, when thread is
// set, X-Thread-ID (then it speaks the stateless 2026-07-28; else it gets a
// session of 2025-11-25 and an anonymous thread).
func tokenClient(t *testing.T, p *httpProc, token, thread string) *mcp.ClientSession {
	t.Helper()
	hc := &http.Client{Transport: bearerRT{token: token, thread: thread}}
	var opts *mcp.ClientSessionOptions
	if thread == "" {
		opts = &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"}
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e-bounds", Version: "1"}, nil).Connect(t.Context(),
		&mcp.StreamableClientTransport{Endpoint: p.url + "/mcp", HTTPClient: hc, MaxRetries: -1}, opts)
	if err != nil {
		t.Fatalf("connect: %v\n%s", err, p.stderr)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// tryCall calls a tool and returns its text and whether it is an error (a
// protocol error too).
func tryCall(ctx context.Context, cs *mcp.ClientSession, name string, args map[string]any) (string, bool) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		return err.Error(), true
	}
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String(), res.IsError
}

// openFiles counts the descriptors a process holds.
func openFiles(t *testing.T, pid int) int {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// Issue #24 item 1: token B naming thread after thread (stateless, with the
// thread argument) gets at most limits.threads_per_token threads with a
// live sandbox: busy ones (a job running) refuse the next new thread with
// an error naming the key; idle ones make room (their leases end), so the
// server's descriptors stay bounded however many names B tries. Token A
// works throughout.
func TestE2EHTTPThreadsPerToken(t *testing.T) {
	t.Parallel()
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfg, []byte("limits: {threads_per_token: 4}\nhttp:\n  max_sessions: 4\n  auth_tokens: [token-a, token-b]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startHTTPBinary(t, "--config", cfg)
	ctx := t.Context()
	// One stateless client per thread (X-Thread-ID names it).
	clients := map[string]*mcp.ClientSession{}
	on := func(token, thread string) *mcp.ClientSession {
		if clients[token+"/"+thread] == nil {
			clients[token+"/"+thread] = tokenClient(t, p, token, thread)
		}
		return clients[token+"/"+thread]
	}
	a := on("token-a", "a-home")
	if out, isErr := tryCall(ctx, a, "bash", map[string]any{"command": "echo a-ok"}); isErr || !strings.Contains(out, "a-ok") {
		t.Fatalf("token A's first call: %s", out)
	}

	// B fills its four threads with running jobs (b-home and three more).
	for i := range 4 {
		thread := "b-home"
		if i > 0 {
			thread = fmt.Sprintf("b-busy-%d", i)
		}
		out, isErr := tryCall(ctx, on("token-b", thread), "bash", map[string]any{"command": "sleep 300", "run_in_background": true})
		if isErr || !strings.Contains(out, "started") {
			t.Fatalf("B's job on %s: %s\n%s", thread, out, p.stderr)
		}
	}
	// Every new thread of B is refused now, naming the key; nothing grows.
	fdsBefore := openFiles(t, p.cmd.Process.Pid)
	for i := range 50 {
		out, isErr := tryCall(ctx, on("token-b", fmt.Sprintf("b-flood-%d", i)), "ls", map[string]any{})
		if !isErr || !strings.Contains(out, "limits.threads_per_token") {
			t.Fatalf("B's %dth new thread past its cap: %q (isError %v), want an error naming limits.threads_per_token", i, out, isErr)
		}
	}
	// A's new threads work meanwhile.
	for i := range 6 {
		out, isErr := tryCall(ctx, on("token-a", fmt.Sprintf("a-new-%d", i)), "bash", map[string]any{"command": "echo a-" + fmt.Sprint(i)})
		if isErr || !strings.Contains(out, fmt.Sprintf("a-%d", i)) {
			t.Fatalf("token A's call on a new thread while B is at its cap: %q\n%s", out, p.stderr)
		}
	}

	// Idle threads make room: with B's jobs ended, B's new threads work,
	// each taking the place of B's least recently used idle one, and the
	// server holds no more descriptors for 60 of them than for 4.
	for i := range 4 {
		thread := "b-home"
		if i > 0 {
			thread = fmt.Sprintf("b-busy-%d", i)
		}
		if out, isErr := tryCall(ctx, on("token-b", thread), "bash_kill", map[string]any{"job": "j1", "signal": "KILL"}); isErr {
			t.Fatalf("bash_kill on %s: %s", thread, out)
		}
	}
	for i := range 60 {
		out, isErr := tryCall(ctx, on("token-b", fmt.Sprintf("b-idle-%d", i)), "bash", map[string]any{"command": "true"})
		if isErr {
			t.Fatalf("B's new thread %d with only idle threads held: %s\n%s", i, out, p.stderr)
		}
	}
	fdsAfter := openFiles(t, p.cmd.Process.Pid)
	t.Logf("server descriptors: %d with B at its cap of busy threads, %d after 60 more of B's threads", fdsBefore, fdsAfter)
	if fdsAfter > fdsBefore+40 {
		t.Errorf("server descriptors grew from %d to %d over 60 threads of one token capped at 4", fdsBefore, fdsAfter)
	}
	if out, isErr := tryCall(ctx, a, "bash", map[string]any{"command": "echo still-a"}); isErr || !strings.Contains(out, "still-a") {
		t.Fatalf("token A after B's flood: %s", out)
	}
}

// Issue #24 item 3: without a valid token a client holds a small share of
// the connections (http.max_unauthenticated_connections), and an answer to
// one closes its connection: a flood of kept-alive /healthz and 401s, and
// of connections that never send a request, leaves a token holder served.
func TestE2EHTTPUnauthenticatedConnectionsShare(t *testing.T) {
	t.Parallel()
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfg, []byte("http:\n  max_connections: 96\n  max_unauthenticated_connections: 16\n  auth_tokens: [token-a]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startHTTPBinary(t, "--config", cfg)
	addr := strings.TrimPrefix(p.url, "http://")

	// An unauthenticated request is answered, then its connection closes.
	for _, path := range []string{"/healthz", "/mcp"} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: localhost\r\n\r\n", path)
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		if !resp.Close {
			t.Errorf("GET %s without a token answered %d on a connection kept alive; want it closed", path, resp.StatusCode)
		}
		c.Close()
	}

	// The flood, as the review ran it and harder: 200 connections that
	// send nothing (each one closed is dialled again 5 ms later), and 20 clients
	// re-sending GET /healthz and GET /mcp without a token on kept-alive
	// connections every 5 ms.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				c, err := net.Dial("tcp", addr)
				if err != nil {
					select {
					case <-stop:
						return
					case <-time.After(10 * time.Millisecond):
					}
					continue
				}
				closed := make(chan struct{})
				go func() { c.Read(make([]byte, 1)); close(closed) }()
				select {
				case <-stop:
					c.Close()
					return
				case <-closed:
					c.Close()
					time.Sleep(5 * time.Millisecond)
				}
			}
		}()
	}
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			path := []string{"/healthz", "/mcp"}[i%2]
			for {
				c, err := net.Dial("tcp", addr)
				if err != nil {
					continue
				}
				r := bufio.NewReader(c)
				for {
					select {
					case <-stop:
						c.Close()
						return
					case <-time.After(5 * time.Millisecond):
					}
					if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: localhost\r\n\r\n", path); err != nil {
						break
					}
					c.SetReadDeadline(time.Now().Add(2 * time.Second))
					resp, err := http.ReadResponse(r, nil)
					if err != nil {
						break
					}
					resp.Body.Close()
				}
				c.Close()
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()
	time.Sleep(500 * time.Millisecond) // the flood at full height

	// A token holder's calls, and its new connections, go through. (A new
	// connection may be cut before its first request is read — in a storm
	// of new connections, a connection is a token holder's only once it
	// has said so — and a client tries again.)
	cs := tokenClient(t, p, "token-a", "a-thread")
	for i := range 20 {
		out, isErr := tryCall(t.Context(), cs, "bash", map[string]any{"command": fmt.Sprintf("echo call-%d", i)})
		if isErr || !strings.Contains(out, fmt.Sprintf("call-%d", i)) {
			t.Fatalf("token holder's call %d during the flood: %s", i, out)
		}
	}
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	retried := 0
	for i := range 20 {
		var resp *http.Response
		var err error
		for try := range 3 {
			req, _ := http.NewRequest(http.MethodGet, p.url+"/healthz", nil)
			req.Header.Set("Authorization", "Bearer token-a")
			if resp, err = hc.Do(req); err == nil {
				break
			}
			retried++
			_ = try
		}
		if err != nil {
			t.Fatalf("token holder's new connection %d during the flood, tried 3 times: %v", i, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("token holder's /healthz %d during the flood: %d", i, resp.StatusCode)
		}
	}
	t.Logf("token holder: 20 calls and 20 new connections through the flood (%d connections tried again)", retried)
}

// Issue #24 item 2: an anonymous session's jobs end with it (its thread
// can never be named again), on the default local sandbox.
func TestE2EHTTPAnonymousJobsEndWithSession(t *testing.T) {
	t.Parallel()
	p := startHTTPBinary(t)
	cs := tokenClient(t, p, "", "")
	if v := cs.InitializeResult().ProtocolVersion; v != "2025-11-25" {
		t.Fatalf("negotiated %q, want a session (2025-11-25)", v)
	}
	marker := fmt.Sprintf("E2E_ANON=%d-%d", os.Getpid(), time.Now().UnixNano())
	t.Cleanup(func() {
		for _, pid := range testkit.Marked(marker) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	for range 3 {
		out, isErr := tryCall(t.Context(), cs, "bash", map[string]any{"command": "export " + marker + "; sleep 3000", "run_in_background": true})
		if isErr {
			if strings.Contains(out, "bash is off") {
				t.Skip("SKIPPED: bash is off here (no bubblewrap)")
			}
			t.Fatalf("background job: %s", out)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for len(testkit.Marked(marker)) < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("the jobs never showed up\n%s", p.stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cs.Close() // DELETE: the session ends
	deadline = time.Now().Add(20 * time.Second)
	for {
		pids := testkit.Marked(marker)
		if len(pids) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("an ended anonymous session's jobs %v still run 20 s later\n%s", pids, p.stderr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Issue #24 item 8: the server's binary, bound into every sandbox as its
// supervisor, does not show its host path in /proc/self/mountinfo (a home
// directory names its user), on bubblewrap and on docker, through bash and
// read_file.
func TestE2EBinaryPathMasked(t *testing.T) {
	t.Parallel()
	for _, provider := range []string{"local", "docker"} {
		t.Run(provider, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			args := []string{"--state-dir", filepath.Join(dir, "state"), "--audit-log", "off", "--thread", "mi"}
			if provider == "docker" {
				_, cfgFile, _ := dockerE2EConfig(t)
				args = append(args, "--config", cfgFile)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			cs, stderr := stdioSession(t, ctx, exec.Command(binary(t), args...))
			defer cs.Close()
			bash, _ := tryCall(ctx, cs, "bash", map[string]any{"command": "cat /proc/self/mountinfo"})
			if strings.Contains(bash, "bash is off") {
				t.Skip("SKIPPED: bash is off here (no bubblewrap)")
			}
			if !strings.Contains(bash, "[exit code 0]") {
				t.Fatalf("cat /proc/self/mountinfo: %s\n%s", bash, stderr)
			}
			read, _ := tryCall(ctx, cs, "read_file", map[string]any{"path": "/proc/self/mountinfo"})
			// The binary lives in a directory of its own (sandbox-mcp-e2e-N):
			// its name in any form — as given, resolved, relative to its
			// file system — is the host path showing.
			secret := filepath.Base(filepath.Dir(binary(t)))
			for what, out := range map[string]string{"bash": bash, "read_file": read} {
				for _, line := range strings.Split(out, "\n") {
					if strings.Contains(line, secret) {
						t.Errorf("%s of /proc/self/mountinfo shows the binary's host path: %s", what, line)
					}
				}
			}
			if provider == "docker" && !strings.Contains(bash, binaryVirtual) {
				t.Errorf("the binary's mount is not shown as %s:\n%s", binaryVirtual, bash)
			}
		})
	}
}

// Issue #24 item 2 on docker: an anonymous session's jobs end with it, and
// its container goes at once (no one can name its thread again), not after
// idle_timeout.
func TestE2EDockerAnonymousJobsEndWithSession(t *testing.T) {
	t.Parallel()
	_, cfgFile, prefix := dockerE2EConfig(t)
	p := startHTTPBinary(t, "--config", cfgFile)
	cs := tokenClient(t, p, "", "")
	marker := fmt.Sprintf("E2E_ANON_DOCKER=%d-%d", os.Getpid(), time.Now().UnixNano())
	for range 2 {
		if out, isErr := tryCall(t.Context(), cs, "bash", map[string]any{"command": "export " + marker + "; sleep 3000", "run_in_background": true}); isErr {
			t.Fatalf("background job: %s\n%s", out, p.stderr)
		}
	}
	containers := func() []string {
		out, _ := exec.Command("docker", "ps", "-aq", "--filter", "label=sandbox-mcp.prefix="+prefix).Output()
		return strings.Fields(string(out))
	}
	deadline := time.Now().Add(30 * time.Second)
	for len(testkit.Marked(marker)) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the jobs never showed up\n%s", p.stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := len(containers()); n != 1 {
		t.Fatalf("%d containers for the anonymous thread, want 1", n)
	}
	cs.Close() // DELETE: the session ends
	deadline = time.Now().Add(30 * time.Second)
	for {
		pids, left := testkit.Marked(marker), containers()
		if len(pids) == 0 && len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("30 s after an anonymous session ended: jobs %v, containers %v\n%s", pids, left, p.stderr)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// One token's connections never take every slot from another (the red
// team's F2): each token holds at most its share of max_connections; a
// connection past it is answered 503 and closed.
func TestE2EHTTPConnectionsSharedAmongTokens(t *testing.T) {
	t.Parallel()
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfg, []byte("http:\n  max_connections: 64\n  auth_tokens: [token-a, token-b]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startHTTPBinary(t, "--config", cfg)
	addr := strings.TrimPrefix(p.url, "http://")
	// Token B holds 80 kept-alive connections, each asking again and again.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var held, refused atomic.Int64
	for range 80 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("tcp", addr)
			if err != nil {
				return
			}
			defer c.Close()
			r := bufio.NewReader(c)
			for first := true; ; first = false {
				if _, err := fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer token-b\r\n\r\n"); err != nil {
					return
				}
				c.SetReadDeadline(time.Now().Add(5 * time.Second))
				resp, err := http.ReadResponse(r, nil)
				if err != nil {
					return
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK || resp.Close {
					refused.Add(1)
					return
				}
				if first {
					held.Add(1)
				}
				select {
				case <-stop:
					return
				case <-time.After(200 * time.Millisecond):
				}
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()
	time.Sleep(time.Second)
	t.Logf("token B holds %d connections, %d refused", held.Load(), refused.Load())
	if held.Load() > 40 {
		t.Errorf("token B holds %d of 64 connections, more than its share", held.Load())
	}
	// Token A's new connections and calls all go through.
	cs := tokenClient(t, p, "token-a", "a-thread")
	for i := range 10 {
		out, isErr := tryCall(t.Context(), cs, "bash", map[string]any{"command": fmt.Sprintf("echo a-%d", i)})
		if isErr || !strings.Contains(out, fmt.Sprintf("a-%d", i)) {
			t.Fatalf("token A's call %d while token B holds its connections: %s", i, out)
		}
	}
}

// A thread whose job runs stays live for its token after its session
// ended (the red team's F1: 90 sessions, each leaving a job, made 90 live
// sandboxes past a cap of 11 and ran the server out of files).
func TestE2EHTTPThreadsWithJobsCountAfterTheirSession(t *testing.T) {
	t.Parallel()
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfg, []byte("limits: {threads_per_token: 3}\nhttp:\n  auth_tokens: [token-a, token-b]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startHTTPBinary(t, "--config", cfg)
	session := func(token, thread string) *mcp.ClientSession {
		hc := &http.Client{Transport: bearerRT{token: token, thread: thread}}
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e-bounds", Version: "1"}, nil).Connect(t.Context(),
			&mcp.StreamableClientTransport{Endpoint: p.url + "/mcp", HTTPClient: hc, MaxRetries: -1}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
		if err != nil {
			t.Fatalf("connect: %v\n%s", err, p.stderr)
		}
		return cs
	}
	for i := range 3 {
		cs := session("token-b", fmt.Sprintf("b-job-%d", i))
		if out, isErr := tryCall(t.Context(), cs, "bash", map[string]any{"command": "sleep 300", "run_in_background": true}); isErr {
			if strings.Contains(out, "bash is off") {
				t.Skip("SKIPPED: bash is off here (no bubblewrap)")
			}
			t.Fatalf("B's job %d: %s", i, out)
		}
		cs.Close() // the session ends; its job runs on
	}
	cs := session("token-b", "b-job-3")
	defer cs.Close()
	if out, isErr := tryCall(t.Context(), cs, "ls", map[string]any{}); !isErr || !strings.Contains(out, "limits.threads_per_token") {
		t.Fatalf("B's fourth thread with three live by their jobs: %q, want an error naming limits.threads_per_token", out)
	}
	a := session("token-a", "a-1")
	defer a.Close()
	if out, isErr := tryCall(t.Context(), a, "bash", map[string]any{"command": "echo a-ok"}); isErr || !strings.Contains(out, "a-ok") {
		t.Fatalf("token A: %s", out)
	}
}
