package main

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	mcpgo "github.com/mark3labs/mcp-go/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/internal/testkit"
)

// modernClient connects mcp-go's client, which negotiates 2026-07-28 when
// the server offers it, with the given headers on every request.
func modernClient(t *testing.T, url string, headers map[string]string) *mcpclient.Client {
	t.Helper()
	c, err := mcpclient.NewStreamableHttpClient(url+"/mcp", transport.WithHTTPHeaders(headers))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	req := mcpgo.InitializeRequest{}
	req.Params.ClientInfo = mcpgo.Implementation{Name: "e2e-modern", Version: "1"}
	if _, err := c.Initialize(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	return c
}

func TestE2EHTTPModernProtocol(t *testing.T) {
	t.Parallel()
	p := startStateless(t)
	a := modernClient(t, p.url, map[string]string{"X-Thread-ID": "modern-a"})
	if v := a.ProtocolVersion(); v != mcpgo.ProtocolVersion20260728 {
		t.Fatalf("negotiated %q, want %s", v, mcpgo.ProtocolVersion20260728)
	}
	out, isErr := testkit.CallText(t, t.Context(), a, "bash", map[string]any{"command": "echo from-a > /mnt/user-data/workspace/who; cat /mnt/user-data/workspace/who"})
	if isErr || !strings.Contains(out, "from-a") {
		t.Fatalf("bash in thread a: %q (error %v)\n%s", out, isErr, p.stderr)
	}
	// Another thread does not see a's file.
	b := modernClient(t, p.url, map[string]string{"X-Thread-ID": "modern-b"})
	out, _ = testkit.CallText(t, t.Context(), b, "bash", map[string]any{"command": "cat /mnt/user-data/workspace/who 2>&1; true"})
	if strings.Contains(out, "from-a") {
		t.Fatalf("thread b sees thread a's file: %q", out)
	}
	// A second client naming thread a does.
	a2 := modernClient(t, p.url, map[string]string{"X-Thread-ID": "modern-a"})
	out, _ = testkit.CallText(t, t.Context(), a2, "read_file", map[string]any{"path": "/mnt/user-data/workspace/who"})
	if !strings.Contains(out, "from-a") {
		t.Fatalf("thread a again: %q", out)
	}
	// A client naming no thread is offered the session-bearing revisions
	// only, and works in its anonymous thread (SPEC §10).
	n := modernClient(t, p.url, nil)
	if v := n.ProtocolVersion(); mcpgo.IsModernProtocol(v) {
		t.Fatalf("without a thread: negotiated %s", v)
	}
	out, isErr = testkit.CallText(t, t.Context(), n, "bash", map[string]any{"command": "cat /mnt/user-data/workspace/who 2>&1; echo anon"})
	if isErr || strings.Contains(out, "from-a") || !strings.Contains(out, "anon") {
		t.Fatalf("no thread: %q (error %v)", out, isErr)
	}
	// A 2026-07-28 call naming none all the same: a tool error that says
	// how to name one.
	body := rawModern(t, p.url, "tools/call", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"bash","arguments":{"command":"true"},`+modernMeta+`}}`,
		map[string]string{"Mcp-Name": "bash"})
	if !strings.Contains(body, `"isError":true`) || !strings.Contains(body, "X-Thread-ID") {
		t.Fatalf("no thread on 2026-07-28: %s", body)
	}
}

// modernMeta is the _meta of a 2026-07-28 request.
const modernMeta = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}`

// rawModern posts a 2026-07-28 request and returns the response's body.
func rawModern(t *testing.T, url, method, body string, hdr map[string]string) string {
	t.Helper()
	resp, err := postModern(url, method, body, hdr)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func postModern(url, method, body string, hdr map[string]string) (*http.Response, error) {
	req, err := http.NewRequest("POST", url+"/mcp", strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", method)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	return http.DefaultClient.Do(req)
}

func TestE2EHTTPModernThreadArgument(t *testing.T) {
	t.Parallel()
	p := startStateless(t)
	// A client naming no thread in its headers negotiates a session (its
	// discover named none): the argument alone names the thread of a
	// 2026-07-28 request sent as such, mirrored into Mcp-Param-Thread.
	out := rawModern(t, p.url, "tools/call", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"bash","arguments":{"command":"echo arg > /mnt/user-data/workspace/f; cat /mnt/user-data/workspace/f","thread":"by-arg"},`+modernMeta+`}}`,
		map[string]string{"Mcp-Name": "bash", "Mcp-Param-Thread": "by-arg"})
	if strings.Contains(out, `"isError":true`) || !strings.Contains(out, `arg\n`) {
		t.Fatalf("bash with thread argument: %s\n%s", out, p.stderr)
	}
	h := modernClient(t, p.url, map[string]string{"X-Thread-ID": "by-arg"})
	if v := h.ProtocolVersion(); v != mcpgo.ProtocolVersion20260728 {
		t.Fatalf("naming a thread: negotiated %q", v)
	}
	out, _ = testkit.CallText(t, t.Context(), h, "read_file", map[string]any{"path": "/mnt/user-data/workspace/f"})
	if !strings.Contains(out, "arg") {
		t.Fatalf("same thread by header: %q", out)
	}
	// Unlisted, the client sends no Mcp-Param-Thread: mcp-go's server
	// answers -32020 (HTTP 400), and mcp-go's client does not list and retry.
	req := mcpgo.CallToolRequest{}
	req.Params.Name = "read_file"
	req.Params.Arguments = map[string]any{"path": "/mnt/user-data/workspace/f", "thread": "other"}
	if _, err := h.CallTool(t.Context(), req); err == nil || !strings.Contains(err.Error(), "Mcp-Param-Thread") {
		t.Fatalf("unlisted tool with a thread argument: %v", err)
	}
	if _, err := h.ListTools(t.Context(), mcpgo.ListToolsRequest{}); err != nil {
		t.Fatal(err)
	}
	out, isErr := testkit.CallText(t, t.Context(), h, "read_file", map[string]any{"path": "/mnt/user-data/workspace/f", "thread": "other"})
	if !isErr || !strings.Contains(out, "different threads") {
		t.Fatalf("header and argument disagree: %q (error %v)", out, isErr)
	}
}

func TestE2EHTTPModernJobsAndShellAcrossRequests(t *testing.T) {
	t.Parallel()
	p := startStateless(t)
	c := modernClient(t, p.url, map[string]string{"X-Thread-ID": "modern-jobs"})
	out, isErr := testkit.CallText(t, t.Context(), c, "bash", map[string]any{"command": "cd /tmp && for i in 1 2 3 4 5 6; do echo tick$i; sleep 0.5; done", "run_in_background": true})
	if isErr || !strings.Contains(out, "job") {
		t.Fatalf("start job: %q (error %v)", out, isErr)
	}
	testkit.CallText(t, t.Context(), c, "bash", map[string]any{"command": "cd /mnt/user-data/outputs"})
	out, _ = testkit.CallText(t, t.Context(), c, "bash", map[string]any{"command": "pwd"})
	if !strings.Contains(out, "/mnt/user-data/outputs") {
		t.Errorf("shell state across stateless requests: pwd %q", out)
	}
	time.Sleep(3500 * time.Millisecond)
	out, _ = testkit.CallText(t, t.Context(), c, "bash_output", map[string]any{"job": "j1"})
	if !strings.Contains(out, "tick6") {
		t.Errorf("job across stateless requests: %q\n%s", out, p.stderr)
	}
}

// TestE2EHTTPEraLatency measures sequential small calls in both eras (one
// client each, a thread each): the modern one acquires and releases the
// thread's sandbox on every request.
func TestE2EHTTPEraLatency(t *testing.T) {
	if os.Getenv("SANDBOX_MCP_BENCH") == "" {
		t.Skip("set SANDBOX_MCP_BENCH=1")
	}
	p := startStateless(t)
	hdr := map[string]string{"X-Thread-ID": "lat"}
	// Its own thread: no session holds it between its requests.
	modern := modernClient(t, p.url, map[string]string{"X-Thread-ID": "lat-modern"})
	tr, err := transport.NewStreamableHTTP(p.url+"/mcp", transport.WithHTTPHeaders(hdr))
	if err != nil {
		t.Fatal(err)
	}
	legacy := mcpclient.NewClient(tr, mcpclient.WithLegacyProtocolOnly())
	t.Cleanup(func() { legacy.Close() })
	if err := legacy.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	ir := mcpgo.InitializeRequest{}
	ir.Params.ClientInfo = mcpgo.Implementation{Name: "legacy", Version: "1"}
	if _, err := legacy.Initialize(t.Context(), ir); err != nil {
		t.Fatal(err)
	}
	if v := legacy.ProtocolVersion(); mcpgo.IsModernProtocol(v) {
		t.Fatalf("legacy client negotiated %s", v)
	}
	testkit.CallText(t, t.Context(), modern, "write_file", map[string]any{"path": "/mnt/user-data/workspace/x", "content": "x"})
	testkit.CallText(t, t.Context(), legacy, "write_file", map[string]any{"path": "/mnt/user-data/workspace/x", "content": "x"})
	for _, tool := range []struct {
		name string
		args map[string]any
	}{
		{"read_file", map[string]any{"path": "/mnt/user-data/workspace/x"}},
		{"bash", map[string]any{"command": "true"}},
	} {
		for _, era := range []struct {
			name string
			c    *mcpclient.Client
		}{{"legacy", legacy}, {"modern", modern}, {"legacy", legacy}, {"modern", modern}} {
			const n = 200
			start := time.Now()
			for range n {
				if out, isErr := testkit.CallText(t, t.Context(), era.c, tool.name, tool.args); isErr {
					t.Fatal(out)
				}
			}
			t.Logf("%s %s: %v per call", era.name, tool.name, time.Since(start)/n)
		}
	}
}

// TestE2EHTTPModernCancelIsPerClient: a notifications/cancelled naming
// another client's request id does not stop that request (mcp-go keys
// stateless requests by id alone).
func TestE2EHTTPModernCancelIsPerClient(t *testing.T) {
	t.Parallel()
	p := startStateless(t)
	meta := modernMeta
	post := func(method, body string, hdr map[string]string) (*http.Response, error) {
		return postModern(p.url, method, body, hdr)
	}
	type answer struct {
		body string
		err  error
	}
	done := make(chan answer, 1)
	go func() {
		resp, err := post("tools/call", `{"jsonrpc":"2.0","id":77,"method":"tools/call","params":{"name":"bash","arguments":{"command":"sleep 2; echo finished"},`+meta+`}}`,
			map[string]string{"Mcp-Name": "bash", "X-Thread-ID": "victim"})
		if err != nil {
			done <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		done <- answer{string(b), err}
	}()
	time.Sleep(700 * time.Millisecond)
	resp, err := post("notifications/cancelled", `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":77,`+meta+`}}`, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	a := <-done
	if a.err != nil || !strings.Contains(a.body, "finished") {
		t.Fatalf("another client's cancel stopped the call: %q %v", a.body, a.err)
	}
}

// startStateless is the binary over HTTP with http.stateless: true written
// out (the default too).
func startStateless(t *testing.T, args ...string) *httpProc {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfg, []byte("http:\n  stateless: true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return startHTTPBinary(t, append([]string{"--config", cfg}, args...)...)
}

// By default a modern client naming its thread speaks 2026-07-28, and one
// naming none negotiates a session (its anonymous thread).
func TestE2EHTTPStatelessByDefault(t *testing.T) {
	t.Parallel()
	p := startHTTPBinary(t)
	if v := modernClient(t, p.url, map[string]string{"X-Thread-ID": "plain"}).ProtocolVersion(); v != mcpgo.ProtocolVersion20260728 {
		t.Errorf("naming a thread: negotiated %q, want %s", v, mcpgo.ProtocolVersion20260728)
	}
	if v := modernClient(t, p.url, nil).ProtocolVersion(); mcpgo.IsModernProtocol(v) {
		t.Errorf("naming no thread: negotiated %s", v)
	}
}

// With http.stateless: false, a modern client negotiates a session-bearing
// revision, and the tools take no thread argument.
func TestE2EHTTPStatelessOff(t *testing.T) {
	t.Parallel()
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfg, []byte("http:\n  stateless: false\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startHTTPBinary(t, "--config", cfg)
	c := modernClient(t, p.url, map[string]string{"X-Thread-ID": "plain"})
	if v := c.ProtocolVersion(); v == mcpgo.ProtocolVersion20260728 {
		t.Fatalf("negotiated %s with http.stateless: false", v)
	}
	out, isErr := testkit.CallText(t, t.Context(), c, "read_file", map[string]any{"path": "x", "thread": "other"})
	if !isErr || !strings.Contains(out, "thread") {
		t.Fatalf("a thread argument with http.stateless: false: %q (error %v)", out, isErr)
	}
}

// With http.stateless, a session (a legacy client) keeps the thread it
// started with: a thread argument naming another is an error, never
// silently ignored.
func TestE2EHTTPStatelessSessionKeepsItsThread(t *testing.T) {
	t.Parallel()
	p := startStateless(t)
	for _, hdr := range []map[string]string{nil, {"X-Thread-ID": "mine"}} {
		c, err := mcpclient.NewStreamableHttpClient(p.url+"/mcp", transport.WithHTTPHeaders(hdr))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		legacy := mcpclient.NewClient(c.GetTransport(), mcpclient.WithLegacyProtocolOnly())
		if err := legacy.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		req := mcpgo.InitializeRequest{}
		req.Params.ClientInfo = mcpgo.Implementation{Name: "e2e-legacy", Version: "1"}
		req.Params.ProtocolVersion = "2025-11-25"
		if _, err := legacy.Initialize(t.Context(), req); err != nil {
			t.Fatal(err)
		}
		out, isErr := testkit.CallText(t, t.Context(), legacy, "ls", map[string]any{"thread": "someone-else"})
		if !isErr || !strings.Contains(out, "this session's thread was fixed") && !strings.Contains(out, "name different threads") {
			t.Errorf("session %v with another thread's argument: %q (error %v)", hdr, out, isErr)
		}
		if hdr != nil {
			if out, isErr := testkit.CallText(t, t.Context(), legacy, "ls", map[string]any{"thread": "mine"}); isErr {
				t.Errorf("the session's own thread as an argument: %q", out)
			}
		}
	}
}
