package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/internal/testkit"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor/supervisortest"
)

// httpProc is the real binary serving --http on a free loopback port.
type httpProc struct {
	cmd    *exec.Cmd
	url    string
	stderr *testkit.Buffer
	exited chan error
	// legacyClients: jobsSession's clients speak 2025-11-25 (a session)
	// instead of go-sdk's default 2026-07-28.
	legacyClients bool
}

var listenLine = regexp.MustCompile(`serving MCP over HTTP addr=(\S+)`)

func startHTTPBinary(t *testing.T, args ...string) *httpProc {
	t.Helper()
	state := filepath.Join(t.TempDir(), "state")
	cmd := exec.Command(binary(t), append([]string{"--http", "127.0.0.1:0", "--state-dir", state, "--audit-log", "off"}, args...)...)
	stderr := &testkit.Buffer{}
	pr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &httpProc{cmd: cmd, stderr: stderr, exited: make(chan error, 1)}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			line := sc.Text()
			stderr.Write([]byte(line + "\n"))
			if m := listenLine.FindStringSubmatch(line); m != nil {
				addr <- m[1]
			}
		}
	}()
	go func() { p.exited <- cmd.Wait() }()
	select {
	case a := <-addr:
		p.url = "http://" + a
	case err := <-p.exited:
		t.Fatalf("server exited: %v\n%s", err, stderr)
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("server did not start:\n%s", stderr)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		if s := stderr.String(); strings.Contains(s, "WARNING: DATA RACE") || strings.Contains(s, "panic:") {
			t.Errorf("server stderr shows a race or a panic:\n%s", s)
		}
	})
	return p
}

type bearerRT struct{ token, thread string }

func (b bearerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if b.token != "" {
		r.Header.Set("Authorization", "Bearer "+b.token)
	}
	if b.thread != "" {
		r.Header.Set("X-Thread-ID", b.thread)
	}
	return http.DefaultTransport.RoundTrip(r)
}

func TestE2EHTTPStreamableAndSSE(t *testing.T) {
	t.Parallel()
	p := startHTTPBinary(t, "--auth-token", "tok")
	hc := &http.Client{Transport: bearerRT{token: "tok", thread: "web"}}
	var mu sync.Mutex
	var progress []string
	client := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			mu.Lock()
			progress = append(progress, r.Params.Message)
			mu.Unlock()
		},
	})
	cs, err := client.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: p.url + "/mcp", HTTPClient: hc, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatalf("connect: %v\n%s", err, p.stderr)
	}
	defer cs.Close()
	// It names its thread: no session (http.stateless, the default).
	if v := cs.InitializeResult().ProtocolVersion; v != "2026-07-28" {
		t.Errorf("negotiated %q, want 2026-07-28", v)
	}
	params := &mcp.CallToolParams{Name: "bash", Arguments: map[string]any{"command": "for i in 1 2 3; do echo step$i; sleep 1; done; echo done > /mnt/user-data/outputs/r.txt"}}
	params.SetProgressToken("p1")
	res, err := cs.CallTool(t.Context(), params)
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Content[0].(*mcp.TextContent).Text; got != "step1\nstep2\nstep3\n[exit code 0]" {
		t.Fatalf("bash: %q", got)
	}
	mu.Lock()
	if len(progress) == 0 || !strings.HasPrefix(progress[len(progress)-1], "step") {
		t.Errorf("progress notifications: %q", progress)
	}
	mu.Unlock()

	// The same thread over SSE sees the file.
	sse, err := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil).Connect(t.Context(), &mcp.SSEClientTransport{Endpoint: p.url + "/sse", HTTPClient: hc}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sse.Close()
	res, err = sse.CallTool(t.Context(), &mcp.CallToolParams{Name: "read_file", Arguments: map[string]any{"path": "/mnt/user-data/outputs/r.txt"}})
	if err != nil || res.Content[0].(*mcp.TextContent).Text != "done\n" {
		t.Fatalf("read over SSE: %v %+v", err, res)
	}

	// Without the token nothing gets in.
	if _, err := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil).Connect(t.Context(),
		&mcp.StreamableClientTransport{Endpoint: p.url + "/mcp", MaxRetries: -1}, nil); err == nil {
		t.Fatal("connected without a token")
	}
}

func TestE2EHTTPSigtermExitsZero(t *testing.T) {
	t.Parallel()
	p := startHTTPBinary(t)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil).Connect(t.Context(),
		&mcp.StreamableClientTransport{Endpoint: p.url + "/mcp", MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if _, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "ls", Arguments: map[string]any{}}); err != nil {
		t.Fatal(err)
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.exited:
		if err != nil {
			t.Fatalf("exit: %v\n%s", err, p.stderr)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("no exit after SIGTERM:\n%s", p.stderr)
	}
}

func TestE2EHTTPRefusesPublicBindWithoutToken(t *testing.T) {
	t.Parallel()
	for _, addr := range []string{":0", "0.0.0.0:0"} {
		_, stderr, code := runBinary(t, "--http", addr, "--state-dir", t.TempDir())
		if code != 2 || strings.Count(strings.TrimSpace(stderr), "\n") != 0 || !strings.Contains(stderr, "auth") {
			t.Errorf("--http %s: code %d stderr %q", addr, code, stderr)
		}
	}
}

// vmHWM is the peak resident set of a process, in bytes.
func vmHWM(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmHWM")
	return 0
}

// 80 calls of 10 MB at once cost the server a bounded amount of memory:
// what does not fit waits, or gets 503 and is sent again; none is lost.
// In sessions (clients naming no thread) and stateless (2026-07-28,
// clients naming their thread: the server reads each body once more).
func TestE2EHTTPConcurrentLargeCallsBoundedMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("moves 800 MB")
	}
	if supervisortest.RaceEnabled() {
		t.Skip("measures the memory of the binary as shipped, not of a -race build")
	}
	for _, era := range []struct{ name, thread string }{{"session", ""}, {"stateless", "big"}} {
		t.Run(era.name, func(t *testing.T) { concurrentLargeCalls(t, era.thread) })
	}
}

func concurrentLargeCalls(t *testing.T, thread string) {
	p := startHTTPBinary(t)
	const calls = 80
	content := strings.Repeat("0123456789abcdef", 10_000_000/16) // 10 MB, within the 10 MiB body cap
	var wg sync.WaitGroup
	errs := make(chan error, calls)
	for i := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil).Connect(t.Context(),
				&mcp.StreamableClientTransport{Endpoint: p.url + "/mcp", MaxRetries: -1, HTTPClient: &http.Client{Transport: bearerRT{thread: thread}}}, nil)
			if err != nil {
				errs <- err
				return
			}
			defer cs.Close()
			for {
				res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "write_file", Arguments: map[string]any{"path": fmt.Sprintf("big%d.txt", i), "content": content}})
				// The server is busy: send it again, as Retry-After says. It
				// refuses without reading a body it will not take (and closes
				// the connection), so a client still writing its 10 MB may see
				// the connection reset before it can read the 503.
				if err != nil && (strings.Contains(err.Error(), "Service Unavailable") ||
					strings.Contains(err.Error(), "connection reset by peer") || strings.Contains(err.Error(), "broken pipe")) {
					time.Sleep(time.Second)
					continue
				}
				if err != nil {
					errs <- err
				} else if text := res.Content[0].(*mcp.TextContent).Text; !strings.HasPrefix(text, "Wrote 10000000 bytes") {
					errs <- fmt.Errorf("call %d: %s", i, text)
				}
				return
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	hwm := vmHWM(t, p.cmd.Process.Pid)
	t.Logf("server peak RSS with %d concurrent 10 MB write_file calls (%s): %d MB", calls, map[bool]string{true: "stateless", false: "sessions"}[thread != ""], hwm>>20)
	if hwm > 1<<30 {
		t.Errorf("server peak RSS %d MB: want under 1 GB", hwm>>20)
	}
}

// The http section's limits are read from the config; a bad one stops
// start-up naming its key.
func TestE2EHTTPLimitKeys(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	os.WriteFile(good, []byte("http:\n  max_connections: 4\n  header_timeout: 5\n  body_timeout: 5\n  conn_idle_timeout: 5\n"+
		"  max_sessions: 10\n  max_sessions_per_token: 2\n  max_body_bytes_in_flight: 20000000\n  max_calls: 8\n"+
		"  allowed_hosts: [mcp.example.com]\n  anonymous_threads: keep\n  auth_tokens: [tok]\n"), 0o644)
	p := startHTTPBinary(t, "--config", good)
	// max_sessions_per_token: 2.
	for i, want := range []int{200, 200, 503} {
		req, _ := http.NewRequest("POST", p.url+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", "Bearer tok")
		req.Host = "mcp.example.com" // allowed_hosts
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("session %d: %d, want %d", i+1, resp.StatusCode, want)
		}
	}
	for key, val := range map[string]string{"max_connections": "-1", "body_timeout": "-5", "max_calls": "-1", "anonymous_threads": "forever", "max_sessions_per_token": "-2"} {
		bad := filepath.Join(dir, key+".yaml")
		os.WriteFile(bad, []byte("http: {"+key+": "+val+"}\n"), 0o644)
		_, stderr, code := runBinary(t, "--config", bad, "--http", "127.0.0.1:0", "--state-dir", dir)
		if code != 2 || !strings.Contains(stderr, "http."+key) {
			t.Errorf("http.%s: %s: code %d stderr %q", key, val, code, stderr)
		}
	}
}
