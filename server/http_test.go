package server_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/audit"
	"github.com/sandbox-mcp/sandbox-mcp/internal/testkit"
	"github.com/sandbox-mcp/sandbox-mcp/providers/local"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/server"
	"github.com/sandbox-mcp/sandbox-mcp/tools"
)

// httpServer runs a real server on a loopback port until the test ends.
type httpServer struct {
	url, state string
	stop       context.CancelFunc
	done       chan error
}

func startHTTP(t *testing.T, cfg server.HTTPConfig) *httpServer {
	t.Helper()
	return startHTTPWith(t, cfg, false)
}

// startHTTPWith starts the server with or without http.stateless.
func startHTTPWith(t *testing.T, cfg server.HTTPConfig, stateless bool) *httpServer {
	t.Helper()
	return startHTTPOn(t, cfg, stateless, nil)
}

// startHTTPOn starts the server on a local provider, as wrap makes it
// (nil: as it is).
func startHTTPOn(t *testing.T, cfg server.HTTPConfig, stateless bool, wrap func(sandbox.Provider) sandbox.Provider) *httpServer {
	t.Helper()
	state := t.TempDir()
	lp, err := local.New(local.Config{StateDir: state, AllowHostBash: true})
	if err != nil {
		t.Fatal(err)
	}
	var p sandbox.Provider = lp
	if wrap != nil {
		p = wrap(p)
	}
	cfg.Stateless = &stateless
	onlyFiles := 0 // limits.threads_per_token: only the open-file budget's
	srv := server.New(server.Config{Provider: p, Audit: audit.Discard{}, Limits: tools.DefaultLimits(), StateDir: state, Version: "test",
		HTTP: &cfg, Bounds: server.Bounds{ThreadsPerToken: &onlyFiles}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &httpServer{url: "http://" + ln.Addr().String(), state: state, stop: cancel, done: make(chan error, 1)}
	go func() {
		err := srv.ServeHTTP(ctx, ln)
		// Closed before the test's cleanup removes the state dir: the
		// server's background work (an automatic checkpoint) ends first.
		srv.Close()
		p.Close()
		h.done <- err
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-h.done:
		case <-time.After(30 * time.Second):
			t.Error("server did not stop")
		}
	})
	return h
}

// headers adds fixed headers to every request of a client.
type headers struct {
	h    map[string]string
	next http.RoundTripper
}

func (h headers) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h.h {
		r.Header.Set(k, v)
	}
	return h.next.RoundTrip(r)
}

func client(hdr map[string]string) *http.Client {
	return &http.Client{Transport: headers{h: hdr, next: http.DefaultTransport}}
}

func connect(t *testing.T, h *httpServer, transport string, hdr map[string]string) *sdk.ClientSession {
	t.Helper()
	var tr sdk.Transport
	switch transport {
	case "streamable":
		tr = &sdk.StreamableClientTransport{Endpoint: h.url + "/mcp", HTTPClient: client(hdr), MaxRetries: -1}
	case "sse":
		tr = &sdk.SSEClientTransport{Endpoint: h.url + "/sse", HTTPClient: client(hdr)}
	}
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).Connect(t.Context(), tr, legacyOpts)
	if err != nil {
		t.Fatalf("connect %s: %v", transport, err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func call(t *testing.T, cs *sdk.ClientSession, name string, args map[string]any) (string, bool) {
	t.Helper()
	res, err := cs.CallTool(t.Context(), &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String(), res.IsError
}

func TestHTTPThreads(t *testing.T) {
	t.Parallel()
	h := startHTTP(t, server.HTTPConfig{})
	for _, transport := range []string{"streamable", "sse"} {
		t.Run(transport, func(t *testing.T) {
			// Two anonymous sessions never share files.
			a := connect(t, h, transport, nil)
			b := connect(t, h, transport, nil)
			call(t, a, "write_file", map[string]any{"path": "mine.txt", "content": "A"})
			if out, isErr := call(t, b, "read_file", map[string]any{"path": "mine.txt"}); !isErr {
				t.Fatalf("anonymous session read another's file: %q", out)
			}
			// Sessions naming the same thread share it, across transports.
			x1 := connect(t, h, transport, map[string]string{"X-Thread-ID": "shared-" + transport})
			x1b := connect(t, h, "streamable", map[string]string{"X-Thread-ID": "shared-" + transport})
			call(t, x1, "write_file", map[string]any{"path": "s.txt", "content": "shared"})
			if out, isErr := call(t, x1b, "read_file", map[string]any{"path": "s.txt"}); isErr || out != "shared" {
				t.Fatalf("same thread not shared: %q", out)
			}
			y := connect(t, h, transport, map[string]string{"X-Thread-ID": "other-" + transport})
			if out, isErr := call(t, y, "read_file", map[string]any{"path": "s.txt"}); !isErr {
				t.Fatalf("thread other read thread shared: %q", out)
			}
			if out, _ := call(t, y, "bash", map[string]any{"command": "pwd"}); out != "/mnt/user-data/workspace\n[exit code 0]" {
				t.Fatalf("bash over %s: %q", transport, out)
			}
		})
	}
}

func TestHTTPTokensNamespaceThreads(t *testing.T) {
	t.Parallel()
	h := startHTTP(t, server.HTTPConfig{AuthTokens: []string{"token-one", "token-two"}})
	one := connect(t, h, "streamable", map[string]string{"Authorization": "Bearer token-one", "X-Thread-ID": "team"})
	two := connect(t, h, "sse", map[string]string{"Authorization": "Bearer token-two", "X-Thread-ID": "team"})
	oneAgain := connect(t, h, "sse", map[string]string{"Authorization": "Bearer token-one", "X-Thread-ID": "team"})
	call(t, one, "write_file", map[string]any{"path": "plan.md", "content": "one's plan"})
	if out, isErr := call(t, two, "read_file", map[string]any{"path": "plan.md"}); !isErr {
		t.Fatalf("token two read token one's thread: %q", out)
	}
	if out, isErr := call(t, oneAgain, "read_file", map[string]any{"path": "plan.md"}); isErr || out != "one's plan" {
		t.Fatalf("token one lost its thread: %q", out)
	}
	// The first configured token's thread is at SPEC's place; the other
	// token's is in its own directory level.
	call(t, two, "write_file", map[string]any{"path": "plan.md", "content": "two's plan"})
	if b, err := os.ReadFile(filepath.Join(local.ThreadDir(h.state, "team"), "workspace", "plan.md")); err != nil || string(b) != "one's plan" {
		t.Fatalf("threads/team holds %q, %v; want token one's file", b, err)
	}
	twos, _ := filepath.Glob(filepath.Join(h.state, "threads", "@*", "team", "user-data", "workspace", "plan.md"))
	if len(twos) != 1 {
		t.Fatalf("token two's files: %v", twos)
	}
	if b, _ := os.ReadFile(twos[0]); string(b) != "two's plan" {
		t.Fatalf("token two's plan: %q", b)
	}
}

// With one token, threads are where SPEC's layout puts them.
func TestHTTPOneTokenPlainThreads(t *testing.T) {
	t.Parallel()
	h := startHTTP(t, server.HTTPConfig{AuthTokens: []string{"only"}})
	cs := connect(t, h, "streamable", map[string]string{"Authorization": "Bearer only", "X-Thread-ID": "solo"})
	call(t, cs, "write_file", map[string]any{"path": "a.txt", "content": "a"})
	if _, err := os.Stat(filepath.Join(local.ThreadDir(h.state, "solo"), "workspace", "a.txt")); err != nil {
		t.Fatal(err)
	}
}

func TestHTTPRefusals(t *testing.T) {
	t.Parallel()
	h := startHTTP(t, server.HTTPConfig{AuthTokens: []string{"s3cret"}, AllowedOrigins: []string{"https://app.example"}, MaxBodyBytes: 1 << 16})
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	tests := []struct {
		name, path, method, body string
		hdr                      map[string]string
		want                     int
	}{
		{"no token", "/mcp", "POST", init, nil, 401},
		{"wrong token", "/mcp", "POST", init, map[string]string{"Authorization": "Bearer nope"}, 401},
		{"token prefix", "/mcp", "POST", init, map[string]string{"Authorization": "Bearer s3cre"}, 401},
		{"basic auth", "/mcp", "POST", init, map[string]string{"Authorization": "Basic czNjcmV0"}, 401},
		{"sse no token", "/sse", "GET", "", nil, 401},
		{"message no token", "/message?sessionId=x", "POST", init, nil, 401},
		{"foreign origin", "/mcp", "POST", init, map[string]string{"Authorization": "Bearer s3cret", "Origin": "http://evil.example"}, 403},
		{"null origin", "/mcp", "POST", init, map[string]string{"Authorization": "Bearer s3cret", "Origin": "null"}, 403},
		{"rebinding origin", "/sse", "GET", "", map[string]string{"Authorization": "Bearer s3cret", "Origin": "http://localhost.evil.example:8080"}, 403},
		{"bad thread", "/mcp", "POST", init, map[string]string{"Authorization": "Bearer s3cret", "X-Thread-ID": "../etc"}, 400},
		{"too large", "/mcp", "POST", `{"x":"` + strings.Repeat("a", 1<<17) + `"}`, map[string]string{"Authorization": "Bearer s3cret"}, 413},
		// Well past what socket buffers hold: the client is still sending
		// when the answer comes, and must get the answer, not a reset.
		{"far too large", "/mcp", "POST", `{"x":"` + strings.Repeat("a", 3<<20) + `"}`, map[string]string{"Authorization": "Bearer s3cret"}, 413},
		{"allowed origin", "/mcp", "POST", init, map[string]string{"Authorization": "Bearer s3cret", "Origin": "https://app.example"}, 200},
		{"localhost origin", "/mcp", "POST", init, map[string]string{"Authorization": "Bearer s3cret", "Origin": "http://localhost:3000"}, 200},
		{"no origin", "/mcp", "POST", init, map[string]string{"Authorization": "bearer s3cret"}, 200},
		{"healthz without auth", "/healthz", "GET", "", nil, 200},
	}
	for _, tt := range tests {
		req, _ := http.NewRequest(tt.method, h.url+tt.path, strings.NewReader(tt.body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		for k, v := range tt.hdr {
			req.Header.Set(k, v)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		resp, err := http.DefaultClient.Do(req.WithContext(ctx))
		if err != nil {
			cancel()
			t.Fatalf("%s: %v", tt.name, err)
		}
		if resp.StatusCode != tt.want {
			t.Errorf("%s: status %d, want %d", tt.name, resp.StatusCode, tt.want)
		}
		if tt.want == 401 && !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("%s: no WWW-Authenticate", tt.name)
		}
		resp.Body.Close()
		cancel()
	}
}

func TestHTTPConcurrentSessions(t *testing.T) {
	t.Parallel()
	h := startHTTP(t, server.HTTPConfig{})
	const sessions = 50
	var wg sync.WaitGroup
	errs := make(chan error, sessions)
	for i := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			transport := "streamable"
			if i%5 == 0 {
				transport = "sse"
			}
			cs := connect(t, h, transport, map[string]string{"X-Thread-ID": fmt.Sprintf("c%d", i)})
			for j := range 5 {
				content := fmt.Sprintf("session %d call %d", i, j)
				if _, isErr := call(t, cs, "write_file", map[string]any{"path": "f.txt", "content": content}); isErr {
					errs <- fmt.Errorf("session %d: write failed", i)
					return
				}
				if out, _ := call(t, cs, "read_file", map[string]any{"path": "f.txt"}); out != content {
					errs <- fmt.Errorf("session %d: read %q, want %q", i, out, content)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// Shutdown lets a call in flight finish, refuses new sessions meanwhile,
// and returns.
func TestHTTPGracefulShutdown(t *testing.T) {
	t.Parallel()
	h := startHTTP(t, server.HTTPConfig{DrainTimeout: 20 * time.Second})
	// A client that reconnects its standalone stream, as go-sdk does by
	// default: the drop of that stream at the end is not the call's failure.
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).Connect(t.Context(),
		&sdk.StreamableClientTransport{Endpoint: h.url + "/mcp", HTTPClient: client(nil)}, legacyOpts)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	result := make(chan string, 1)
	go func() {
		res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "bash", Arguments: map[string]any{"command": "touch started; sleep 1; echo finished"}})
		if err != nil {
			result <- "error: " + err.Error()
			return
		}
		result <- res.Content[0].(*sdk.TextContent).Text
	}()
	// Wait until the call is running.
	started := filepath.Join(local.ThreadDir(h.state, cs.ID()), "workspace", "started")
	if !testkit.Poll(20*time.Second, 10*time.Millisecond, func() bool { _, err := os.Stat(started); return err == nil }) {
		t.Fatal("the call did not start")
	}
	h.stop()
	time.Sleep(100 * time.Millisecond)
	resp, err := http.Get(h.url + "/healthz")
	if err == nil {
		if resp.StatusCode == 200 {
			t.Error("healthz still ok while draining")
		}
		resp.Body.Close()
	}
	if got := <-result; got != "finished\n[exit code 0]" {
		t.Fatalf("call in flight: %q", got)
	}
	select {
	case err := <-h.done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("server did not stop")
	}
	h.done <- nil // for the cleanup
}

func TestOriginAndLoopback(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]bool{
		"127.0.0.1:8080": true, "localhost:1": true, "[::1]:80": true, "127.1.2.3:9": true,
		":8080": false, "0.0.0.0:8080": false, "[::]:80": false, "10.0.0.1:80": false, "example.com:80": false,
	} {
		got, err := server.IsLoopback(addr)
		if err != nil || got != want {
			t.Errorf("IsLoopback(%q) = %v, %v", addr, got, err)
		}
	}
	if _, err := server.IsLoopback("nonsense"); err == nil {
		t.Error("IsLoopback accepted an address without port")
	}
}

func TestThreadIDRefusedBeforeAnyPath(t *testing.T) {
	t.Parallel()
	if sandbox.ValidThreadID("..") == nil {
		t.Fatal(".. accepted")
	}
	_ = io.Discard
}

// A session belongs to the token that made it: another valid token that
// names its id gets nothing, and cannot end it.
func TestHTTPSessionsBoundToToken(t *testing.T) {
	t.Parallel()
	h := startHTTP(t, server.HTTPConfig{AuthTokens: []string{"tok-a", "tok-b"}})
	a := connect(t, h, "streamable", map[string]string{"Authorization": "Bearer tok-a"})
	call(t, a, "write_file", map[string]any{"path": "secret.txt", "content": "A-secret"})
	body := `{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"read_file","arguments":{"path":"secret.txt"}}}`
	for _, method := range []string{"POST", "DELETE", "GET"} {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second) // a GET that got in would stream forever
		req, _ := http.NewRequestWithContext(ctx, method, h.url+"/mcp", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer tok-b")
		req.Header.Set("Mcp-Session-Id", a.ID())
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		if resp.StatusCode != http.StatusNotFound || strings.Contains(string(b), "A-secret") {
			t.Errorf("%s with another token: %d %q", method, resp.StatusCode, b)
		}
	}
	// The owner's session still works.
	if out, isErr := call(t, a, "read_file", map[string]any{"path": "secret.txt"}); isErr || out != "A-secret" {
		t.Fatalf("owner: %q", out)
	}
	// SSE: another token posting to the owner's message endpoint.
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	get, _ := http.NewRequestWithContext(ctx, "GET", h.url+"/sse", nil)
	get.Header.Set("Authorization", "Bearer tok-a")
	stream, err := http.DefaultClient.Do(get)
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Body.Close()
	buf := make([]byte, 4096)
	n, _ := stream.Body.Read(buf)
	_, endpoint, ok := strings.Cut(string(buf[:n]), "data: ")
	if !ok {
		t.Fatalf("no endpoint event: %q", buf[:n])
	}
	endpoint = strings.TrimSpace(endpoint)
	if !strings.Contains(endpoint, "sessionId=") {
		t.Fatalf("endpoint %q", endpoint)
	}
	for _, tc := range []struct {
		token string
		want  int
	}{{"tok-b", http.StatusNotFound}, {"tok-a", http.StatusAccepted}} {
		req, _ := http.NewRequest("POST", h.url+endpoint, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
		req.Header.Set("Authorization", "Bearer "+tc.token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("SSE message with %s: %d, want %d", tc.token, resp.StatusCode, tc.want)
		}
	}
}

func TestHTTPLongThreadIDWithTokens(t *testing.T) {
	t.Parallel()
	h := startHTTP(t, server.HTTPConfig{AuthTokens: []string{"tok"}})
	id := strings.Repeat("x", 128)
	cs := connect(t, h, "streamable", map[string]string{"Authorization": "Bearer tok", "X-Thread-ID": id})
	if out, isErr := call(t, cs, "write_file", map[string]any{"path": "a.txt", "content": "x"}); isErr {
		t.Fatalf("128-char thread id with a token: %q", out)
	}
}

// rawRequest opens a connection and sends head (request line and headers)
// and then body, and leaves the connection open.
func rawRequest(t *testing.T, h *httpServer, head, body string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(h.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := io.WriteString(c, head+"\r\n"+body); err != nil {
		t.Fatal(err)
	}
	return c
}

// within reads what the server sends on c until it closes the connection,
// and says whether that happened within d.
func within(c net.Conn, d time.Duration) (string, bool) {
	c.SetReadDeadline(time.Now().Add(d))
	b, err := io.ReadAll(c)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return string(b), false
	}
	return string(b), true
}

// A client that announces a body and sends a byte of it holds the server
// for seconds, not minutes: without a token it gets 401 at once, with one
// its connection goes after the body timeout.
func TestHTTPSlowBodies(t *testing.T) {
	t.Parallel()
	h := startHTTP(t, server.HTTPConfig{AuthTokens: []string{"tok"}, BodyTimeout: 2 * time.Second})
	for _, size := range []int{100_000, 10 << 20} {
		head := fmt.Sprintf("POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n", size)
		anon := rawRequest(t, h, head, "{")
		start := time.Now()
		got, closed := within(anon, 5*time.Second)
		if !strings.HasPrefix(got, "HTTP/1.1 401") || !closed {
			t.Errorf("unauthenticated slow body of %d bytes: after %v closed=%v %q", size, time.Since(start), closed, got)
		}
		authed := rawRequest(t, h, head+"Authorization: Bearer tok\r\n", "{")
		start = time.Now()
		if got, closed := within(authed, 10*time.Second); !closed {
			t.Errorf("authenticated slow body of %d bytes: still open after %v (%q)", size, time.Since(start), got)
		}
	}
	// The server still serves.
	cs := connect(t, h, "streamable", map[string]string{"Authorization": "Bearer tok"})
	if out, isErr := call(t, cs, "write_file", map[string]any{"path": "a.txt", "content": "ok"}); isErr {
		t.Fatal(out)
	}
}

// Connections beyond the cap are closed at once, except a few let in for
// the health check; /healthz answers while the cap is full.
func TestHTTPConnectionCap(t *testing.T) {
	t.Parallel()
	const max = 8
	h := startHTTP(t, server.HTTPConfig{MaxConnections: max, HeaderTimeout: time.Minute})
	var conns []net.Conn
	for range max + 16 + 10 { // the cap, the reserve, ten more
		conns = append(conns, rawRequest(t, h, "GET /healthz HTTP/1.1", "")) // never ends its headers
	}
	closed := 0
	for _, c := range conns[len(conns)-10:] {
		if _, ok := within(c, 3*time.Second); ok {
			closed++
		}
	}
	if closed != 10 {
		t.Errorf("%d of 10 connections beyond the cap and its reserve closed", closed)
	}
	// The reserve's idle connections go within seconds; then the health
	// check gets in while the cap is still full.
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := http.Get(h.url + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("healthz with the connection cap full: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Anything else on a connection beyond the cap is refused.
	req, _ := http.NewRequest("POST", h.url+"/mcp", strings.NewReader("{}"))
	resp, err := http.DefaultClient.Do(req)
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Errorf("/mcp beyond the cap: %d", resp.StatusCode)
		}
	}
	for _, c := range conns[:max] {
		if _, ok := within(c, 10*time.Millisecond); ok {
			t.Error("a connection within the cap was closed")
		}
	}
}

// initialize opens a Streamable HTTP session by hand and returns the
// status of the answer.
func initialize(t *testing.T, h *httpServer, token string) (int, http.Header) {
	t.Helper()
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	req, _ := http.NewRequest("POST", h.url+"/mcp", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return 0, nil
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header
}

// A burst of sessions from one token takes its share of the sessions, not
// all of them: another token still gets in.
func TestHTTPSessionsCappedPerToken(t *testing.T) {
	t.Parallel()
	h := startHTTP(t, server.HTTPConfig{AuthTokens: []string{"tok-a", "tok-b"}, MaxSessions: 20})
	var mu sync.Mutex
	codes := map[int]int{}
	var ids []string
	var wg sync.WaitGroup
	for range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, hdr := initialize(t, h, "tok-b")
			mu.Lock()
			codes[code]++
			if id := hdr.Get("Mcp-Session-Id"); id != "" {
				ids = append(ids, id)
			}
			mu.Unlock()
			if code == http.StatusServiceUnavailable && hdr.Get("Retry-After") == "" {
				t.Error("503 without Retry-After")
			}
		}()
	}
	wg.Wait()
	if codes[200] != 10 || codes[503] != 30 {
		t.Errorf("token b's 40 sessions at once, cap 20 shared by two tokens: %v", codes)
	}
	a := connect(t, h, "streamable", map[string]string{"Authorization": "Bearer tok-a"})
	if out, isErr := call(t, a, "write_file", map[string]any{"path": "a.txt", "content": "a"}); isErr {
		t.Fatal(out)
	}
	sse := connect(t, h, "sse", map[string]string{"Authorization": "Bearer tok-a"})
	if out, isErr := call(t, sse, "read_file", map[string]any{"path": "a.txt"}); !isErr {
		t.Fatalf("another session's thread: %q", out)
	}
	// A session that ends gives its place back.
	if code, _ := initialize(t, h, "tok-b"); code != http.StatusServiceUnavailable {
		t.Fatalf("token b beyond its share: %d", code)
	}
	req, _ := http.NewRequest("DELETE", h.url+"/mcp", nil)
	req.Header.Set("Authorization", "Bearer tok-b")
	req.Header.Set("Mcp-Session-Id", ids[0])
	if resp, err := http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	} else {
		resp.Body.Close()
	}
	if code, _ := initialize(t, h, "tok-b"); code != http.StatusOK {
		t.Fatalf("token b after one of its sessions ended: %d", code)
	}
}

// Request bytes in flight and calls running are capped: past them a
// request waits briefly, then is turned away as busy (503 with
// Retry-After; a call gets a "server busy" error).
func TestHTTPBusy(t *testing.T) {
	t.Parallel()
	h := startHTTP(t, server.HTTPConfig{MaxBodyBytes: 1 << 20, MaxBodyBytesInFlight: 1 << 20, MaxCalls: 1, BodyTimeout: time.Minute})
	// One request holds the whole budget while its body trickles in.
	slow := rawRequest(t, h, "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 1048576\r\n", "{")
	time.Sleep(200 * time.Millisecond)
	req, _ := http.NewRequest("POST", h.url+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || time.Since(start) > 20*time.Second {
		t.Errorf("a request past the body budget: %d Retry-After %q after %v", resp.StatusCode, resp.Header.Get("Retry-After"), time.Since(start))
	}
	slow.Close() // its share goes back

	cs := connect(t, h, "sse", map[string]string{"X-Thread-ID": "busy"})
	running := make(chan string, 1)
	go func() {
		res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "bash", Arguments: map[string]any{"command": "touch started; sleep 10; echo done"}})
		if err != nil {
			running <- err.Error()
			return
		}
		running <- res.Content[0].(*sdk.TextContent).Text
	}()
	started := filepath.Join(local.ThreadDir(h.state, "busy"), "workspace", "started")
	if !testkit.Poll(20*time.Second, 10*time.Millisecond, func() bool { _, err := os.Stat(started); return err == nil }) {
		t.Fatal("the call did not start")
	}
	if out, isErr := call(t, cs, "ls", map[string]any{}); !isErr || !strings.Contains(out, "server busy") {
		t.Errorf("a call past the cap: %q", out)
	}
	if got := <-running; got != "done\n[exit code 0]" {
		t.Errorf("the running call: %q", got)
	}
	if out, isErr := call(t, cs, "ls", map[string]any{}); isErr {
		t.Errorf("a call once the cap has room: %q", out)
	}
}

// hostRT sends every request with another Host header, as a reverse proxy
// on the same host that keeps the client's Host does.
type hostRT struct{ host string }

func (h hostRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Host = h.host
	return http.DefaultTransport.RoundTrip(r)
}

// On loopback, a Host that is not localhost is refused (DNS rebinding)
// unless http.allowed_hosts names it: a reverse proxy that keeps the
// client's Host works once its name is listed.
func TestHTTPAllowedHosts(t *testing.T) {
	t.Parallel()
	plain := startHTTP(t, server.HTTPConfig{})
	proxied := startHTTP(t, server.HTTPConfig{AllowedHosts: []string{"mcp.example.com"}})
	try := func(h *httpServer, host string) error {
		hc := &http.Client{Transport: hostRT{host: host}}
		for _, tr := range []sdk.Transport{
			&sdk.StreamableClientTransport{Endpoint: h.url + "/mcp", HTTPClient: hc, MaxRetries: -1},
			&sdk.SSEClientTransport{Endpoint: h.url + "/sse", HTTPClient: hc},
		} {
			cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).Connect(t.Context(), tr, legacyOpts)
			if err != nil {
				return err
			}
			_, err = cs.CallTool(t.Context(), &sdk.CallToolParams{Name: "ls", Arguments: map[string]any{}})
			cs.Close()
			if err != nil {
				return err
			}
		}
		return nil
	}
	for _, tc := range []struct {
		h    *httpServer
		host string
		ok   bool
	}{
		{plain, "mcp.example.com", false},
		{plain, "localhost:8080", true},
		{proxied, "mcp.example.com", true},
		{proxied, "MCP.example.com:443", true},
		{proxied, "evil.example", false},
		{proxied, "127.0.0.1", true},
	} {
		if err := try(tc.h, tc.host); (err == nil) != tc.ok {
			t.Errorf("Host %s (allowed %v): %v", tc.host, tc.h == proxied, err)
		}
	}
	req, _ := http.NewRequest("POST", proxied.url+"/mcp", strings.NewReader("{}"))
	req.Host = "evil.example"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(b), "http.allowed_hosts") {
		t.Errorf("a foreign Host: %d %q", resp.StatusCode, b)
	}
}

// gone waits until path does not exist.
func gone(t *testing.T, path string) bool {
	t.Helper()
	return testkit.Poll(20*time.Second, 50*time.Millisecond, func() bool { _, err := os.Lstat(path); return os.IsNotExist(err) })
}

// threadOf finds the thread directory that holds the workspace file name.
func threadWith(t *testing.T, h *httpServer, name string) string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(h.state, "threads", "*", "user-data", "workspace", name))
	m2, _ := filepath.Glob(filepath.Join(h.state, "threads", "@*", "*", "user-data", "workspace", name))
	if m = append(m, m2...); len(m) != 1 {
		t.Fatalf("threads holding %s: %v", name, m)
	}
	return filepath.Dir(filepath.Dir(filepath.Dir(m[0])))
}

// rawPost posts one JSON-RPC message of a Streamable HTTP session.
func rawPost(t *testing.T, h *httpServer, token, session, msg string) int {
	t.Helper()
	req, _ := http.NewRequest("POST", h.url+"/mcp", strings.NewReader(msg))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Mcp-Session-Id", session)
	req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// An anonymous session's thread is removed when the session ends (DELETE,
// idle TTL, SSE disconnect), after its calls stopped; a thread some
// session named is not, nor is any thread with anonymous_threads: keep.
func TestHTTPAnonymousThreadsRemoved(t *testing.T) {
	t.Parallel()
	h := startHTTP(t, server.HTTPConfig{AuthTokens: []string{"t1", "t2"}})
	for _, tc := range []struct{ transport, token string }{{"streamable", "t1"}, {"sse", "t1"}, {"streamable", "t2"}, {"sse", "t2"}} {
		name := "mark-" + tc.transport + "-" + tc.token
		cs := connect(t, h, tc.transport, map[string]string{"Authorization": "Bearer " + tc.token})
		call(t, cs, "write_file", map[string]any{"path": name, "content": "x"})
		dir := threadWith(t, h, name)
		// A call still running when the session ends stops first.
		// (go-sdk's SSE client closes its stream only when its calls are
		// answered: the timeout bounds that wait.)
		go cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "bash", Arguments: map[string]any{"command": "while :; do date >> loop.txt; sleep 0.05; done", "timeout": 4}})
		if !testkit.Poll(10*time.Second, 20*time.Millisecond, func() bool {
			_, err := os.Stat(filepath.Join(dir, "user-data", "workspace", "loop.txt"))
			return err == nil
		}) {
			t.Fatal("the loop did not start")
		}
		cs.Close() // DELETE; SSE: the stream goes
		if !gone(t, dir) {
			t.Errorf("%s %s: anonymous thread %s still there after the session ended", tc.transport, tc.token, dir)
		}
		if _, err := os.Stat(filepath.Dir(dir)); err != nil {
			t.Errorf("the threads dir went too: %v", err)
		}
	}

	// Idle TTL: a session that is never closed.
	h = startHTTP(t, server.HTTPConfig{AuthTokens: []string{"t1"}, SessionIdleTTL: 2 * time.Second})
	code, hdr := initialize(t, h, "t1")
	sid := hdr.Get("Mcp-Session-Id")
	if code != 200 || sid == "" {
		t.Fatalf("initialize: %d", code)
	}
	rawPost(t, h, "t1", sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	rawPost(t, h, "t1", sid, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"write_file","arguments":{"path":"ttl.txt","content":"x"}}}`)
	if dir := threadWith(t, h, "ttl.txt"); !gone(t, dir) {
		t.Errorf("anonymous thread %s still there after the idle TTL", dir)
	}

	// A session that names the anonymous thread of another: the thread is
	// named, and stays.
	a := connect(t, h, "streamable", map[string]string{"Authorization": "Bearer t1"})
	call(t, a, "write_file", map[string]any{"path": "shared.txt", "content": "a"})
	dir := threadWith(t, h, "shared.txt")
	b := connect(t, h, "streamable", map[string]string{"Authorization": "Bearer t1", "X-Thread-ID": filepath.Base(dir)})
	if out, isErr := call(t, b, "read_file", map[string]any{"path": "shared.txt"}); isErr || out != "a" {
		t.Fatalf("named: %q", out)
	}
	a.Close()
	b.Close()
	named := connect(t, h, "sse", map[string]string{"Authorization": "Bearer t1", "X-Thread-ID": "named"})
	call(t, named, "write_file", map[string]any{"path": "n.txt", "content": "n"})
	named.Close()
	time.Sleep(3 * time.Second)
	for _, d := range []string{dir, local.ThreadDir(h.state, "named")} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("a named thread was removed: %v", err)
		}
	}
}

func TestHTTPAnonymousThreadsKept(t *testing.T) {
	t.Parallel()
	h := startHTTP(t, server.HTTPConfig{AnonymousThreads: "keep"})
	for _, transport := range []string{"streamable", "sse"} {
		cs := connect(t, h, transport, nil)
		call(t, cs, "write_file", map[string]any{"path": "keep-" + transport, "content": "x"})
		dir := threadWith(t, h, "keep-"+transport)
		cs.Close()
		time.Sleep(time.Second)
		if _, err := os.Stat(dir); err != nil {
			t.Errorf("%s: anonymous thread removed with anonymous_threads: keep: %v", transport, err)
		}
	}
}

// With several tokens, each gets its share of the calls running at once:
// one token's long calls leave room for another's.
func TestHTTPCallsSharedPerToken(t *testing.T) {
	t.Parallel()
	h := startHTTP(t, server.HTTPConfig{AuthTokens: []string{"tok-a", "tok-b"}, MaxCalls: 2})
	a := connect(t, h, "streamable", map[string]string{"Authorization": "Bearer tok-a", "X-Thread-ID": "long"})
	go a.CallTool(context.Background(), &sdk.CallToolParams{Name: "bash", Arguments: map[string]any{"command": "touch started; sleep 12"}})
	started := filepath.Join(local.ThreadDir(h.state, "long"), "workspace", "started")
	if !testkit.Poll(20*time.Second, 10*time.Millisecond, func() bool { _, err := os.Stat(started); return err == nil }) {
		t.Fatal("the call did not start")
	}
	b := connect(t, h, "sse", map[string]string{"Authorization": "Bearer tok-b"})
	if out, isErr := call(t, b, "ls", map[string]any{}); isErr {
		t.Errorf("token b while token a fills its share: %q", out)
	}
	if out, isErr := call(t, a, "ls", map[string]any{}); !isErr || !strings.Contains(out, "server busy") {
		t.Errorf("token a beyond its share: %q", out)
	}
}

// legacyOpts keeps go-sdk on a session-bearing revision (it tries 2026-07-28 first).
var legacyOpts = &sdk.ClientSessionOptions{ProtocolVersion: "2025-11-25"}
