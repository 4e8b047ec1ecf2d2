package server_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	mcpgo "github.com/mark3labs/mcp-go/mcp"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/internal/testkit"
	"github.com/sandbox-mcp/sandbox-mcp/server"
)

const (
	modernVersion = "2026-07-28"
	legacyVersion = "2025-11-25" // the newest revision with sessions
)

// connectModern connects go-sdk's client as it comes: 2026-07-28 first.
func connectModern(t *testing.T, h *httpServer, hdr map[string]string, opts *sdk.ClientOptions) *sdk.ClientSession {
	t.Helper()
	tr := &sdk.StreamableClientTransport{Endpoint: h.url + "/mcp", HTTPClient: client(hdr), MaxRetries: -1}
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, opts).Connect(t.Context(), tr, nil)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// connectMCPGo connects mcp-go's client as it comes: 2026-07-28 first.
func connectMCPGo(t *testing.T, h *httpServer, hdr map[string]string) *mcpclient.Client {
	t.Helper()
	c, err := mcpclient.NewStreamableHttpClient(h.url+"/mcp", transport.WithHTTPHeaders(hdr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	req := mcpgo.InitializeRequest{}
	req.Params.ClientInfo = mcpgo.Implementation{Name: "test", Version: "1"}
	if _, err := c.Initialize(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	return c
}

// With http.stateless, a modern client that names no thread negotiates a
// session and works in its anonymous thread, as before (SPEC §10); one that
// names its thread speaks 2026-07-28. Both independent clients, each
// modern-first by default.
func TestHTTPStatelessRouting(t *testing.T) {
	t.Parallel()
	h := startHTTPWith(t, server.HTTPConfig{}, true)
	const file = "/mnt/user-data/workspace/mine"
	named := map[string]string{"X-Thread-ID": "routed"}

	t.Run("mcp-go", func(t *testing.T) {
		anon := connectMCPGo(t, h, nil)
		if v := anon.ProtocolVersion(); v != legacyVersion {
			t.Errorf("without a thread: negotiated %q, want %s", v, legacyVersion)
		}
		if out, isErr := testkit.CallText(t, t.Context(), anon, "write_file", map[string]any{"path": file, "content": "mcp-go anon"}); isErr {
			t.Fatalf("anonymous thread: %q", out)
		}
		if out, _ := testkit.CallText(t, t.Context(), anon, "read_file", map[string]any{"path": file}); !strings.Contains(out, "mcp-go anon") {
			t.Errorf("anonymous thread across calls: %q", out)
		}
		other := connectMCPGo(t, h, nil)
		if out, _ := testkit.CallText(t, t.Context(), other, "read_file", map[string]any{"path": file}); strings.Contains(out, "mcp-go anon") {
			t.Errorf("another anonymous session sees the first's file: %q", out)
		}
		c := connectMCPGo(t, h, named)
		if v := c.ProtocolVersion(); v != modernVersion {
			t.Errorf("naming a thread: negotiated %q, want %s", v, modernVersion)
		}
		if out, isErr := testkit.CallText(t, t.Context(), c, "write_file", map[string]any{"path": file, "content": "named"}); isErr {
			t.Fatalf("named thread: %q", out)
		}
	})
	t.Run("go-sdk", func(t *testing.T) {
		anon := connectModern(t, h, nil, nil)
		if v := anon.InitializeResult().ProtocolVersion; v != legacyVersion {
			t.Errorf("without a thread: negotiated %q, want %s", v, legacyVersion)
		}
		if anon.ID() == "" {
			t.Error("without a thread: no session id")
		}
		if out, isErr := call(t, anon, "write_file", map[string]any{"path": file, "content": "go-sdk anon"}); isErr {
			t.Fatalf("anonymous thread: %q", out)
		}
		if out, _ := call(t, anon, "read_file", map[string]any{"path": file}); !strings.Contains(out, "go-sdk anon") {
			t.Errorf("anonymous thread across calls: %q", out)
		}
		c := connectModern(t, h, named, nil)
		if v := c.InitializeResult().ProtocolVersion; v != modernVersion {
			t.Errorf("naming a thread: negotiated %q, want %s", v, modernVersion)
		}
		if out, _ := call(t, c, "read_file", map[string]any{"path": file}); !strings.Contains(out, "named") {
			t.Errorf("the named thread: %q", out)
		}
	})
}

// A modern client gets a thread's notifications/resources/list_changed on
// its subscriptions/listen stream (go-sdk opens one for a
// ResourceListChangedHandler), routed by the thread the listen request
// names: never another thread's, nor the same thread id's of another token.
func TestHTTPStatelessListChanged(t *testing.T) {
	t.Parallel()
	h := startHTTPWith(t, server.HTTPConfig{AuthTokens: []string{"tok1", "tok2"}}, true)
	hdr := func(token, thread string) map[string]string {
		return map[string]string{"Authorization": "Bearer " + token, "X-Thread-ID": thread}
	}
	listen := func(token, thread string) <-chan struct{} {
		ch := make(chan struct{}, 16)
		cs := connectModern(t, h, hdr(token, thread), &sdk.ClientOptions{
			ResourceListChangedHandler: func(context.Context, *sdk.ResourceListChangedRequest) { ch <- struct{}{} },
		})
		if v := cs.InitializeResult().ProtocolVersion; v != modernVersion {
			t.Fatalf("listener %s/%s negotiated %q", token, thread, v)
		}
		return ch
	}
	a, b, otherToken := listen("tok1", "a"), listen("tok1", "b"), listen("tok2", "a")
	got := func(ch <-chan struct{}, what string) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(5 * time.Second):
			t.Fatalf("no list_changed for %s", what)
		}
	}
	none := func(what string) {
		t.Helper()
		time.Sleep(300 * time.Millisecond)
		for name, ch := range map[string]<-chan struct{}{"thread a": a, "thread b": b, "tok2's thread a": otherToken} {
			select {
			case <-ch:
				t.Errorf("%s got list_changed for %s", name, what)
			default:
			}
		}
	}

	writer := connectModern(t, h, hdr("tok1", "a"), nil)
	if out, isErr := call(t, writer, "write_file", map[string]any{"path": "/mnt/user-data/outputs/r.txt", "content": "x"}); isErr {
		t.Fatal(out)
	}
	got(a, "a stateless write to a's outputs")
	none("a write to tok1's thread a")

	if out, isErr := call(t, writer, "write_file", map[string]any{"path": "/mnt/user-data/workspace/w.txt", "content": "x"}); isErr {
		t.Fatal(out)
	}
	none("a write outside outputs")

	// A session of the thread writing: its listeners hear of it too.
	legacy := connect(t, h, "streamable", hdr("tok1", "a"))
	if out, isErr := call(t, legacy, "write_file", map[string]any{"path": "/mnt/user-data/outputs/s.txt", "content": "x"}); isErr {
		t.Fatal(out)
	}
	got(a, "a session's write to a's outputs")
	none("a session's write to tok1's thread a")

	other := connectModern(t, h, hdr("tok2", "a"), nil)
	if out, isErr := call(t, other, "write_file", map[string]any{"path": "/mnt/user-data/outputs/t.txt", "content": "x"}); isErr {
		t.Fatal(out)
	}
	got(otherToken, "tok2's write to its thread a")
	none("tok2's write to its thread a")
}

// An open subscriptions/listen stream carries no call: shutdown neither
// waits for it nor leaves it open.
func TestHTTPStatelessShutdownWithListener(t *testing.T) {
	t.Parallel()
	h := startHTTPWith(t, server.HTTPConfig{}, true)
	connectModern(t, h, map[string]string{"X-Thread-ID": "l"}, &sdk.ClientOptions{
		ResourceListChangedHandler: func(context.Context, *sdk.ResourceListChangedRequest) {},
	})
	start := time.Now()
	h.stop()
	select {
	case <-h.done:
	case <-time.After(20 * time.Second):
		t.Fatal("server did not stop")
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("shutdown took %v with a listen stream open", d)
	}
	h.done <- nil // for the cleanup
}

// A modern client naming its thread gets progress during a call, on the
// call's own stream.
func TestHTTPStatelessProgress(t *testing.T) {
	t.Parallel()
	h := startHTTPWith(t, server.HTTPConfig{}, true)
	var mu sync.Mutex
	var progress []string
	cs := connectModern(t, h, map[string]string{"X-Thread-ID": "progress"}, &sdk.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *sdk.ProgressNotificationClientRequest) {
			mu.Lock()
			progress = append(progress, r.Params.Message)
			mu.Unlock()
		},
	})
	if v := cs.InitializeResult().ProtocolVersion; v != modernVersion {
		t.Fatalf("negotiated %q", v)
	}
	params := &sdk.CallToolParams{Name: "bash", Arguments: map[string]any{"command": "for i in 1 2 3; do echo step$i; sleep 1; done"}}
	params.SetProgressToken("p1")
	if _, err := cs.CallTool(t.Context(), params); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(progress) == 0 || !strings.HasPrefix(progress[len(progress)-1], "step") {
		t.Errorf("progress notifications: %q", progress)
	}
}

// Cancelling a modern client's call (its context) ends the command, with
// both clients: the call's HTTP request ends, and with it the call.
func TestHTTPStatelessCancel(t *testing.T) {
	t.Parallel()
	h := startHTTPWith(t, server.HTTPConfig{}, true)
	hdr := map[string]string{"X-Thread-ID": "cancel"}
	sdkc := connectModern(t, h, hdr, nil)
	mcpc := connectMCPGo(t, h, hdr)
	if v := mcpc.ProtocolVersion(); v != modernVersion {
		t.Fatalf("mcp-go negotiated %q", v)
	}
	for name, run := range map[string]func(ctx context.Context, cmd string) error{
		"go-sdk": func(ctx context.Context, cmd string) error {
			_, err := sdkc.CallTool(ctx, &sdk.CallToolParams{Name: "bash", Arguments: map[string]any{"command": cmd}})
			return err
		},
		"mcp-go": func(ctx context.Context, cmd string) error {
			req := mcpgo.CallToolRequest{}
			req.Params.Name, req.Params.Arguments = "bash", map[string]any{"command": cmd}
			_, err := mcpc.CallTool(ctx, req)
			return err
		},
	} {
		t.Run(name, func(t *testing.T) {
			marker := fmt.Sprintf("STATELESS_SLEEPER=%d-%d", os.Getpid(), time.Now().UnixNano())
			t.Cleanup(func() {
				for _, pid := range testkit.Marked(marker) {
					syscall.Kill(pid, syscall.SIGKILL)
				}
			})
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error, 1)
			go func() { done <- run(ctx, "export "+marker+"; sleep 300") }()
			if !testkit.Poll(30*time.Second, 20*time.Millisecond, func() bool { return len(testkit.Marked(marker)) > 0 }) {
				cancel()
				t.Fatal("the command never showed up")
			}
			cancel()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("the cancelled call did not return")
			}
			if !testkit.Poll(10*time.Second, 50*time.Millisecond, func() bool { return len(testkit.Marked(marker)) == 0 }) {
				t.Fatalf("the command still runs 10s after its call was cancelled: %v", testkit.Marked(marker))
			}
		})
	}
}

// Another client's notifications/cancelled naming a listen request's id
// does not end that stream (mcp-go keys stateless requests by id alone; on
// 2026-07-28 HTTP a request ends with its stream).
func TestHTTPStatelessListenNotCancelledByOthers(t *testing.T) {
	t.Parallel()
	h := startHTTPWith(t, server.HTTPConfig{}, true)
	ch := make(chan struct{}, 16)
	hdr := map[string]string{"X-Thread-ID": "victim"}
	connectModern(t, h, hdr, &sdk.ClientOptions{
		ResourceListChangedHandler: func(context.Context, *sdk.ResourceListChangedRequest) { ch <- struct{}{} },
	})
	// The cancel says what it is in its header, in none, or in a false
	// one (mcp-go checks Mcp-Method against the body for requests only);
	// its id is absent, null, or a null "Id" (encoding/json's keys match
	// in any case, and mcp-go decides a notification by them).
	meta := `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}`
	for _, header := range []string{"notifications/cancelled", "", "ping", "tools/call"} {
		for _, idField := range []string{``, `"id":null,`, `"Id":null,`} {
			for id := range 6 {
				body := fmt.Sprintf(`{"jsonrpc":"2.0",%s"method":"notifications/cancelled","params":{"requestId":%d,%s}}`, idField, id, meta)
				req, _ := http.NewRequest("POST", h.url+"/mcp", strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Accept", "application/json, text/event-stream")
				req.Header.Set("Mcp-Protocol-Version", modernVersion)
				if header != "" {
					req.Header.Set("Mcp-Method", header)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusAccepted {
					t.Errorf("notifications/cancelled (header %q, %s): %s", header, idField, resp.Status)
				}
			}
		}
	}
	// A batch is no 2026-07-28 message.
	req, _ := http.NewRequest("POST", h.url+"/mcp", strings.NewReader(`[{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1,`+meta+`}}]`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", modernVersion)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusBadRequest {
		t.Errorf("a batch: %v %v, want 400", resp, err)
	} else {
		resp.Body.Close()
	}
	if out, isErr := call(t, connectModern(t, h, hdr, nil), "write_file", map[string]any{"path": "/mnt/user-data/outputs/x", "content": "x"}); isErr {
		t.Fatal(out)
	}
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("the listen stream got no list_changed after others' cancels")
	}
}

// A subscriptions/listen stream holds a connection for as long as its
// client likes, as a session's stream does: it counts as a session
// against MaxSessions while it is open, so that a client cannot open
// them without bound.
func TestHTTPStatelessListenStreamsCapped(t *testing.T) {
	t.Parallel()
	h := startHTTPWith(t, server.HTTPConfig{MaxSessions: 2}, true)
	listen := func(id int) (*http.Response, error) {
		body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"subscriptions/listen","params":{"notifications":{"resourcesListChanged":true},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`, id)
		req, _ := http.NewRequestWithContext(t.Context(), "POST", h.url+"/mcp", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Protocol-Version", modernVersion)
		req.Header.Set("Mcp-Method", "subscriptions/listen")
		req.Header.Set("X-Thread-ID", "capped")
		return http.DefaultClient.Do(req)
	}
	var open []*http.Response
	defer func() {
		for _, r := range open {
			r.Body.Close()
		}
	}()
	for id := 1; id <= 2; id++ {
		resp, err := listen(id)
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, resp)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("listen stream %d: %s", id, resp.Status)
		}
	}
	resp, err := listen(3)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("a third listen stream with MaxSessions 2: %s, want 503", resp.Status)
	}
	// One ends: its place is free again.
	open[0].Body.Close()
	open = open[1:]
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := listen(4)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode == http.StatusOK {
			open = append(open, resp)
			break
		}
		resp.Body.Close()
		if time.Now().After(deadline) {
			t.Fatalf("a listen stream after one ended: %s", resp.Status)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// A call is not a stream: it is not refused by the open listens.
	if out, isErr := call(t, connectModern(t, h, map[string]string{"X-Thread-ID": "capped"}, nil), "bash", map[string]any{"command": "true"}); isErr {
		t.Fatal(out)
	}
}

// The thread argument is listed for 2026-07-28 requests only: in a
// session it could only repeat the session's own thread, and an agent
// shown it would make one up. Both lists are in the fixed offer order.
func TestHTTPThreadArgumentListedForStatelessOnly(t *testing.T) {
	t.Parallel()
	h := startHTTPWith(t, server.HTTPConfig{}, true)
	hdr := map[string]string{"X-Thread-ID": "lists"}
	for _, c := range []struct {
		name string
		cs   *sdk.ClientSession
		want bool
	}{{"session", connect(t, h, "streamable", hdr), false}, {"stateless", connectModern(t, h, hdr, nil), true}, {"sse", connect(t, h, "sse", hdr), false}} {
		res, err := c.cs.ListTools(t.Context(), nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Tools) == 0 || res.Tools[0].Name != "bash" {
			t.Errorf("%s: tools not in the offer order", c.name)
		}
		for _, tool := range res.Tools {
			props, _ := tool.InputSchema.(map[string]any)["properties"].(map[string]any)
			if _, has := props["thread"]; has != c.want {
				t.Errorf("%s: %s lists thread = %v, want %v", c.name, tool.Name, has, c.want)
			}
		}
	}
	// Listing for a session changed nothing for the next stateless list.
	res, err := connectModern(t, h, hdr, nil).ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if props, _ := res.Tools[0].InputSchema.(map[string]any)["properties"].(map[string]any); props["thread"] == nil {
		t.Error("the thread argument is gone from the server's own definition")
	}
}
