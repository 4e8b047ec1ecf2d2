package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/internal/testkit"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/server"
)

const previewCSP = "sandbox allow-scripts allow-forms allow-popups allow-modals allow-downloads"

// portsProvider hands out the local provider's sandboxes as sandboxes that
// reach their ports (sandbox.Ports): a thread's port is a real listener of
// the test (serve), and its box ends when the test says (endBox).
type portsProvider struct {
	sandbox.Provider
	mu    sync.Mutex
	boxes map[string]int    // thread key → its box's generation
	apps  map[portAt]string // (thread key, port) → the listener's address
	conns map[string][]net.Conn
}

type portAt struct {
	thread string
	port   int
}

func withPorts(pp *portsProvider) func(sandbox.Provider) sandbox.Provider {
	return func(p sandbox.Provider) sandbox.Provider {
		pp.Provider, pp.boxes, pp.apps, pp.conns = p, map[string]int{}, map[portAt]string{}, map[string][]net.Conn{}
		return pp
	}
}

func (p *portsProvider) Acquire(ctx context.Context, thread string) (sandbox.Sandbox, error) {
	sb, err := p.Provider.Acquire(ctx, thread)
	if err != nil {
		return nil, err
	}
	return portsSandbox{Sandbox: sb, p: p, key: thread}, nil
}

// serve makes h listen as the thread's port.
func (p *portsProvider) serve(t *testing.T, thread string, port int, h http.Handler) {
	t.Helper()
	app := httptest.NewServer(h)
	t.Cleanup(app.Close)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.apps[portAt{thread, port}] = app.Listener.Addr().String()
}

// endBox ends the thread's box, and the connections into it: the next
// box is another.
func (p *portsProvider) endBox(thread string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.boxes[thread]++
	for _, c := range p.conns[thread] {
		c.Close()
	}
	delete(p.conns, thread)
}

type portsSandbox struct {
	sandbox.Sandbox
	p   *portsProvider
	key string
}

func (s portsSandbox) Box(context.Context) (string, error) {
	s.p.mu.Lock()
	defer s.p.mu.Unlock()
	return fmt.Sprintf("box-%d", s.p.boxes[s.key]), nil
}

func (s portsSandbox) DialPort(ctx context.Context, box string, port int) (net.Conn, error) {
	s.p.mu.Lock()
	current := fmt.Sprintf("box-%d", s.p.boxes[s.key])
	addr, ok := s.p.apps[portAt{s.key, port}]
	s.p.mu.Unlock()
	if box != current {
		return nil, sandbox.ErrBoxGone
	}
	if !ok {
		return nil, sandbox.ErrPortRefused
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err == nil {
		s.p.mu.Lock()
		s.p.conns[s.key] = append(s.p.conns[s.key], c)
		s.p.mu.Unlock()
	}
	return c, err
}

// app is a web app in a sandbox: it tells what it was asked, sets a
// cookie, sends headers that act on a whole origin, and echoes a
// websocket's bytes (a hand-made upgrade: the proxy only passes bytes).
func app(name string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ws":
			if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
				http.Error(w, "not an upgrade", http.StatusBadRequest)
				return
			}
			conn, brw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			defer conn.Close()
			brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
			brw.Flush()
			io.Copy(conn, brw)
			return
		case "/setcookie":
			w.Header().Add("Set-Cookie", "sid=abc; Path=/; Domain=localhost; HttpOnly")
			w.Header().Add("Set-Cookie", "pref=dark; Path=/settings")
			w.Header().Set("Clear-Site-Data", `"cookies", "storage"`)
			w.Header().Set("Alt-Svc", `h3=":4433"`)
			w.Header().Set("Content-Security-Policy", "sandbox allow-same-origin allow-scripts")
		case "/upload":
			b, err := io.ReadAll(r.Body)
			fmt.Fprintf(w, "%s got %d bytes, %v", name, len(b), err)
			return
		}
		fmt.Fprintf(w, "%s path=%s raw=%s query=%s host=%s xfh=%s xfp=%s prefix=%s cookie=%q auth=%q",
			name, r.URL.Path, r.URL.RawPath, r.URL.RawQuery, r.Host,
			r.Header.Get("X-Forwarded-Host"), r.Header.Get("X-Forwarded-Proto"), r.Header.Get("X-Forwarded-Prefix"),
			r.Header.Get("Cookie"), r.Header.Get("Authorization"))
	})
}

// expose calls expose_port and returns its text, whether it failed, and
// its structured content.
func expose(t *testing.T, cs *sdk.ClientSession, args map[string]any) (string, bool, map[string]any) {
	t.Helper()
	res, err := cs.CallTool(t.Context(), &sdk.CallToolParams{Name: "expose_port", Arguments: args})
	if err != nil {
		t.Fatalf("expose_port %v: %v", args, err)
	}
	text := res.Content[0].(*sdk.TextContent).Text
	facts, _ := res.StructuredContent.(map[string]any)
	return text, res.IsError, facts
}

// exposeURL exposes the port and returns its URL, checked against the
// text and the facts.
func exposeURL(t *testing.T, cs *sdk.ClientSession, port int) string {
	t.Helper()
	text, isErr, facts := expose(t, cs, map[string]any{"port": port})
	prefix := fmt.Sprintf("Port %d of the sandbox is at ", port)
	if isErr || !strings.HasPrefix(text, prefix) {
		t.Fatalf("expose_port %d = %q", port, text)
	}
	u := strings.TrimPrefix(text, prefix)
	if facts["url"] != u || facts["port"] != float64(port) || facts["exposed"] != true {
		t.Errorf("expose_port %d: facts %v, text %q", port, facts, text)
	}
	return u
}

// noRedirects is a client without a token that shows redirects as they
// are.
var noRedirects = &http.Client{
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	Timeout:       20 * time.Second,
}

func get(t *testing.T, u string, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := noRedirects.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// wsDial opens a websocket to u by hand and returns the connection once
// the server has switched protocols.
func wsDial(t *testing.T, u string) (net.Conn, *bufio.Reader) {
	t.Helper()
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", pu.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n"+
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nOrigin: null\r\n\r\n", pu.RequestURI(), pu.Host)
	br := bufio.NewReader(c)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("websocket %s: %v", u, err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("websocket %s: %s %s", u, resp.Status, b)
	}
	c.SetReadDeadline(time.Time{})
	return c, br
}

// echo sends a line on a websocket and reads it back.
func echo(t *testing.T, c net.Conn, br *bufio.Reader, line string) {
	t.Helper()
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := br.ReadString('\n')
	if err != nil || got != line+"\n" {
		t.Fatalf("websocket echo: %q, %v", got, err)
	}
}

// closedWithin: the server closes c within d.
func closedWithin(c net.Conn, br *bufio.Reader, d time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(d))
	_, err := io.ReadAll(br)
	ne, ok := err.(net.Error)
	return !ok || !ne.Timeout()
}

func hasValue(vals []string, v string) bool { return slices.Contains(vals, v) }

// TestPreviewHTTP: a port of the sandbox at <server>/preview/<capability>/,
// through the real server: no token needed, the prefix stripped, Host
// localhost:PORT, sandboxed by CSP, cookies its own, websockets echoed,
// closed and box-ended previews 404, every wrong capability 404.
func TestPreviewHTTP(t *testing.T) {
	t.Parallel()
	pp := &portsProvider{}
	h := startHTTPOn(t, server.HTTPConfig{AuthTokens: []string{"tok"}}, false, withPorts(pp))
	cs := connect(t, h, "streamable", map[string]string{"Authorization": "Bearer tok", "X-Thread-ID": "web"})
	pp.serve(t, "web", 3000, app("web"))

	u := exposeURL(t, cs, 3000)
	c, ok := strings.CutPrefix(u, h.url+"/preview/")
	c, slash := strings.CutSuffix(c, "/")
	if !ok || !slash || len(c) < 43 || strings.ContainsAny(c, "/?#") {
		t.Fatalf("URL %q: want %s/preview/<capability of 256 bits>/", u, h.url)
	}
	if again := exposeURL(t, cs, 3000); again != u {
		t.Errorf("exposed again: %s, want the same %s", again, u)
	}
	// Over SSE too (the URL is the server's, whichever transport asked).
	sse := connect(t, h, "sse", map[string]string{"Authorization": "Bearer tok", "X-Thread-ID": "web"})
	if viaSSE := exposeURL(t, sse, 3000); viaSSE != u {
		t.Errorf("over SSE: %s, want %s", viaSSE, u)
	}

	t.Run("proxied", func(t *testing.T) {
		resp, body := get(t, u+"a/b%2Fc?x=1&y=2", map[string]string{"Authorization": "Bearer tok"})
		want := fmt.Sprintf("web path=/a/b/c raw=/a/b%%2Fc query=x=1&y=2 host=localhost:3000 xfh=%s xfp=http prefix=/preview/%s cookie=\"\" auth=\"\"",
			strings.TrimPrefix(h.url, "http://"), c)
		if resp.StatusCode != 200 || body != want {
			t.Errorf("GET: %d %q\nwant %q", resp.StatusCode, body, want)
		}
		if !hasValue(resp.Header.Values("Content-Security-Policy"), previewCSP) {
			t.Errorf("CSP %q, want %q among them", resp.Header.Values("Content-Security-Policy"), previewCSP)
		}
		// A header the app's own: it passes (only the server's token does not).
		if _, body := get(t, u, map[string]string{"Authorization": "Basic dTpw"}); !strings.Contains(body, `auth="Basic dTpw"`) {
			t.Errorf("the app's own Authorization: %q", body)
		}
		// Only the capability: redirected to its "/", relatively (a
		// proxy's prefix stays).
		resp, _ = get(t, strings.TrimSuffix(u, "/")+"?q=1", nil)
		if resp.StatusCode != http.StatusPermanentRedirect || resp.Header.Get("Location") != c+"/?q=1" {
			t.Errorf("without its /: %d Location %q", resp.StatusCode, resp.Header.Get("Location"))
		}
	})

	t.Run("cookies and origin-wide headers", func(t *testing.T) {
		resp, _ := get(t, u+"setcookie", nil)
		set := resp.Header.Values("Set-Cookie")
		if len(set) != 2 {
			t.Fatalf("Set-Cookie %q", set)
		}
		for i, want := range []string{"/preview/" + c + "/", "/preview/" + c + "/settings"} {
			if !strings.Contains(set[i], "Path="+want) || strings.Contains(strings.ToLower(set[i]), "domain") || strings.HasPrefix(set[i], "sid=") || strings.HasPrefix(set[i], "pref=") {
				t.Errorf("Set-Cookie %q: want a name of its own, Path=%s, no Domain", set[i], want)
			}
		}
		if resp.Header.Get("Clear-Site-Data") != "" || resp.Header.Get("Alt-Svc") != "" {
			t.Errorf("origin-wide headers passed: Clear-Site-Data %q, Alt-Svc %q", resp.Header.Get("Clear-Site-Data"), resp.Header.Get("Alt-Svc"))
		}
		csp := resp.Header.Values("Content-Security-Policy")
		if !hasValue(csp, previewCSP) || !hasValue(csp, "sandbox allow-same-origin allow-scripts") {
			t.Errorf("CSP %q: want the app's and the server's (both apply)", csp)
		}
		// The browser sends it back with every cookie of the host: the app
		// gets its own, under its own name, and no other.
		own, _, _ := strings.Cut(set[0], ";")
		_, body := get(t, u, map[string]string{"Cookie": "jupyter-token=secret; " + own + "; other=1"})
		if !strings.Contains(body, `cookie="sid=abc"`) {
			t.Errorf("cookies the app got: %q, want only sid=abc", body)
		}
	})

	t.Run("websocket", func(t *testing.T) {
		ws, br := wsDial(t, u+"ws")
		echo(t, ws, br, "hello")
		echo(t, ws, br, strings.Repeat("x", 100000))
	})

	t.Run("upload", func(t *testing.T) {
		resp, err := http.Post(u+"upload", "application/octet-stream", strings.NewReader(strings.Repeat("u", 1<<20)))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "web got 1048576 bytes, <nil>" {
			t.Errorf("upload: %d %q", resp.StatusCode, b)
		}
	})

	t.Run("not listening", func(t *testing.T) {
		u4 := exposeURL(t, cs, 4000)
		resp, body := get(t, u4, nil)
		if resp.StatusCode != http.StatusBadGateway || body != "nothing listens on port 4000 in the sandbox\n" {
			t.Errorf("nothing on 4000: %d %q", resp.StatusCode, body)
		}
		pp.serve(t, "web", 4000, app("late"))
		if _, body := get(t, u4+"x", nil); !strings.HasPrefix(body, "late path=/x ") {
			t.Errorf("once listening: %q", body)
		}
	})

	t.Run("wrong capabilities", func(t *testing.T) {
		flip := c[:len(c)-1] + "A"
		if c[len(c)-1] == 'A' {
			flip = c[:len(c)-1] + "B"
		}
		for _, bad := range []string{
			h.url + "/preview/" + flip + "/",
			h.url + "/preview/" + c[:20] + "/",
			h.url + "/preview/" + c + "x/",
			h.url + "/preview/x" + c + "/",
			h.url + "/preview/%" + fmt.Sprintf("%02X", c[0]) + c[1:] + "/",
			h.url + "/preview//",
			h.url + "/preview/",
			h.url + "/preview/../mcp",
			h.url + "/preview/" + strings.ToUpper(c) + "/",
		} {
			if bad == u {
				continue
			}
			resp, body := get(t, bad, nil)
			if resp.StatusCode != http.StatusNotFound || strings.Contains(body, "web path=") {
				t.Errorf("GET %s: %d %q, want 404", bad, resp.StatusCode, body)
			}
		}
	})

	t.Run("mcp stays closed", func(t *testing.T) {
		// What a preview's page sends (Origin: null), and no token: /mcp
		// and /sse refuse it.
		init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
		for _, tc := range []struct {
			method, path string
			hdr          map[string]string
			want         int
		}{
			{"POST", "/mcp", map[string]string{"Origin": "null"}, 403},
			{"POST", "/mcp", map[string]string{"Origin": "null", "Authorization": "Bearer tok"}, 403},
			{"GET", "/sse", map[string]string{"Origin": "null", "Authorization": "Bearer tok"}, 403},
			{"POST", "/mcp", nil, 401},
		} {
			req, _ := http.NewRequestWithContext(t.Context(), tc.method, h.url+tc.path, strings.NewReader(init))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			for k, v := range tc.hdr {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("%s %s %v: %d, want %d", tc.method, tc.path, tc.hdr, resp.StatusCode, tc.want)
			}
		}
	})

	t.Run("close", func(t *testing.T) {
		pp.serve(t, "web", 5000, app("five"))
		u5 := exposeURL(t, cs, 5000)
		ws, br := wsDial(t, u5+"ws")
		echo(t, ws, br, "before")
		if text, isErr, facts := expose(t, cs, map[string]any{"port": 5000, "close": true}); isErr || text != "Port 5000 is no longer exposed" || facts["exposed"] != false {
			t.Fatalf("close: %q %v", text, facts)
		}
		if resp, _ := get(t, u5, nil); resp.StatusCode != http.StatusNotFound {
			t.Errorf("closed: %d, want 404", resp.StatusCode)
		}
		if !closedWithin(ws, br, 10*time.Second) {
			t.Error("a websocket of a closed preview stays open")
		}
		if text, isErr, _ := expose(t, cs, map[string]any{"port": 5000, "close": true}); !isErr || text != "Error: port 5000 is not exposed" {
			t.Errorf("close again: %q", text)
		}
		if again := exposeURL(t, cs, 5000); again == u5 {
			t.Error("exposed after close: the old capability again")
		}
	})

	t.Run("box ended", func(t *testing.T) {
		pp.serve(t, "web", 6000, app("six"))
		u6 := exposeURL(t, cs, 6000)
		if resp, _ := get(t, u6, nil); resp.StatusCode != 200 {
			t.Fatalf("before: %d", resp.StatusCode)
		}
		pp.endBox("web")
		for range 2 { // the first finds the box gone, the second no preview
			if resp, body := get(t, u6, nil); resp.StatusCode != http.StatusNotFound {
				t.Errorf("box ended: %d %q, want 404", resp.StatusCode, body)
			}
		}
		// The entry went: closing it is an error, exposing makes a new one.
		if text, isErr, _ := expose(t, cs, map[string]any{"port": 6000, "close": true}); !isErr || !strings.Contains(text, "port 6000 is not exposed") {
			t.Errorf("close after the box ended: %q", text)
		}
		u6b := exposeURL(t, cs, 6000)
		if u6b == u6 {
			t.Error("the new box's preview has the old capability")
		}
		if resp, body := get(t, u6b, nil); resp.StatusCode != 200 || !strings.HasPrefix(body, "six ") {
			t.Errorf("in the new box: %d %q", resp.StatusCode, body)
		}
	})
}

// Previews are a thread's: the same port of two threads, or of the same
// thread id under two tokens, are two apps at two URLs.
func TestPreviewThreadsApart(t *testing.T) {
	t.Parallel()
	pp := &portsProvider{}
	h := startHTTPOn(t, server.HTTPConfig{AuthTokens: []string{"one", "two"}}, false, withPorts(pp))
	a := connect(t, h, "streamable", map[string]string{"Authorization": "Bearer one", "X-Thread-ID": "a"})
	b := connect(t, h, "streamable", map[string]string{"Authorization": "Bearer one", "X-Thread-ID": "b"})
	a2 := connect(t, h, "streamable", map[string]string{"Authorization": "Bearer two", "X-Thread-ID": "a"})
	pp.serve(t, "a", 3000, app("a"))
	pp.serve(t, "b", 3000, app("b"))
	ua, ub, ua2 := exposeURL(t, a, 3000), exposeURL(t, b, 3000), exposeURL(t, a2, 3000)
	if ua == ub || ua == ua2 || ub == ua2 {
		t.Fatalf("URLs %s %s %s: want three", ua, ub, ua2)
	}
	for range 3 { // kept-alive connections too
		for u, want := range map[string]string{ua: "a path=/", ub: "b path=/"} {
			if _, body := get(t, u, nil); !strings.HasPrefix(body, want) {
				t.Errorf("GET %s: %q, want %q…", u, body, want)
			}
		}
	}
	// Token two's thread a is not token one's: nothing listens there.
	if resp, body := get(t, ua2, nil); resp.StatusCode != http.StatusBadGateway {
		t.Errorf("token two's thread a: %d %q, want 502", resp.StatusCode, body)
	}
	// Closing is the thread's own: b cannot close a's.
	if text, isErr, _ := expose(t, b, map[string]any{"port": 3000, "close": true}); isErr {
		t.Fatalf("b closes its own: %q", text)
	}
	if _, body := get(t, ua, nil); !strings.HasPrefix(body, "a path=/") {
		t.Errorf("a's preview after b closed its own: %q", body)
	}
}

// An anonymous thread's previews go with it (its session's end).
func TestPreviewAnonymousThreadEnds(t *testing.T) {
	t.Parallel()
	pp := &portsProvider{}
	h := startHTTPOn(t, server.HTTPConfig{}, false, withPorts(pp))
	cs := connect(t, h, "streamable", nil)
	pp.serve(t, cs.ID(), 3000, app("anon"))
	u := exposeURL(t, cs, 3000)
	if _, body := get(t, u, nil); !strings.HasPrefix(body, "anon ") {
		t.Fatalf("before: %q", body)
	}
	cs.Close()
	if !testkit.Poll(20*time.Second, 50*time.Millisecond, func() bool {
		resp, _ := get(t, u, nil)
		return resp.StatusCode == http.StatusNotFound
	}) {
		t.Error("the preview of an ended anonymous thread still answers")
	}
}

// http.public_url names the previews' URL, and what the app is told.
func TestPreviewPublicURL(t *testing.T) {
	t.Parallel()
	pp := &portsProvider{}
	cfg := server.HTTPConfig{PublicURL: "https://sandbox.example/tools/"}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	h := startHTTPOn(t, cfg, false, withPorts(pp))
	cs := connect(t, h, "streamable", map[string]string{"X-Thread-ID": "pub"})
	pp.serve(t, "pub", 8000, app("pub"))
	u := exposeURL(t, cs, 8000)
	c, ok := strings.CutPrefix(u, "https://sandbox.example/tools/preview/")
	if !ok {
		t.Fatalf("URL %s, want it under https://sandbox.example/tools/preview/", u)
	}
	c = strings.TrimSuffix(c, "/")
	_, body := get(t, h.url+"/preview/"+c+"/", nil)
	if !strings.Contains(body, "xfh=sandbox.example xfp=https prefix=/tools/preview/"+c+" ") {
		t.Errorf("the app was told %q", body)
	}
	resp, _ := get(t, h.url+"/preview/"+c+"/setcookie", nil)
	if set := resp.Header.Get("Set-Cookie"); !strings.Contains(set, "Path=/tools/preview/"+c+"/") {
		t.Errorf("Set-Cookie %q: want the path as the browser sees it", set)
	}
}

// Origin: null (a preview page's) never reaches /mcp or /sse, even where
// http.allowed_origins allows every origin.
func TestPreviewOriginNullRefusedWithWildcard(t *testing.T) {
	t.Parallel()
	h := startHTTP(t, server.HTTPConfig{AllowedOrigins: []string{"*"}})
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	for _, tc := range []struct {
		method, path, origin string
		want                 int
	}{
		{"POST", "/mcp", "null", 403},
		{"POST", "/mcp", "NULL", 403},
		{"GET", "/sse", "null", 403},
		{"POST", "/mcp", "http://elsewhere.example", 200},
	} {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second) // an SSE stream let in would stay open
		req, _ := http.NewRequestWithContext(ctx, tc.method, h.url+tc.path, strings.NewReader(init))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Origin", tc.origin)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		resp.Body.Close()
		cancel()
		if resp.StatusCode != tc.want {
			t.Errorf("%s %s Origin %s: %d, want %d", tc.method, tc.path, tc.origin, resp.StatusCode, tc.want)
		}
	}
}

// A sandbox that cannot reach its ports: a tool error that says so.
func TestPreviewNotAvailable(t *testing.T) {
	t.Parallel()
	h := startHTTPOn(t, server.HTTPConfig{}, false, func(p sandbox.Provider) sandbox.Provider { return noPorts{p} })
	cs := connect(t, h, "streamable", map[string]string{"X-Thread-ID": "np"})
	if text, isErr, _ := expose(t, cs, map[string]any{"port": 3000}); !isErr || text != "Error: expose_port is not available with this provider" {
		t.Errorf("expose_port = %q", text)
	}
}

// noPorts hands out sandboxes that have nothing but sandbox.Sandbox.
type noPorts struct{ sandbox.Provider }

func (p noPorts) Acquire(ctx context.Context, thread string) (sandbox.Sandbox, error) {
	sb, err := p.Provider.Acquire(ctx, thread)
	if err != nil {
		return nil, err
	}
	return struct{ sandbox.Sandbox }{sb}, nil
}

// The server's end ends its previews: a websocket open then is closed.
func TestPreviewEndsWithHTTPServer(t *testing.T) {
	t.Parallel()
	pp := &portsProvider{}
	h := startHTTPOn(t, server.HTTPConfig{DrainTimeout: time.Second}, false, withPorts(pp))
	cs := connect(t, h, "streamable", map[string]string{"X-Thread-ID": "bye"})
	pp.serve(t, "bye", 3000, app("bye"))
	ws, br := wsDial(t, exposeURL(t, cs, 3000)+"ws")
	echo(t, ws, br, "hi")
	cs.Close()
	h.stop()
	if !closedWithin(ws, br, 15*time.Second) {
		t.Error("a preview's websocket outlived the server")
	}
}

// Over stdio: a loopback listener of the server's serves the previews,
// and stops with it.
func TestPreviewStdio(t *testing.T) {
	t.Parallel()
	pp := &portsProvider{}
	r, srv := startRawStdioOn(t, withPorts(pp))
	pp.serve(t, "default", 3000, app("stdio"))
	m := r.call(1, "expose_port", `{"port":3000}`)
	res, _ := m["result"].(map[string]any)
	raw, _ := json.Marshal(res)
	var got struct {
		IsError           bool `json:"isError"`
		Content           []struct{ Text string }
		StructuredContent struct{ URL string }
	}
	json.Unmarshal(raw, &got)
	if got.IsError || len(got.Content) != 1 {
		t.Fatalf("expose_port: %s", raw)
	}
	u := got.StructuredContent.URL
	pu, err := url.Parse(u)
	if err != nil || pu.Scheme != "http" || pu.Hostname() != "127.0.0.1" || pu.Port() == "" || !strings.HasPrefix(pu.Path, "/preview/") ||
		got.Content[0].Text != "Port 3000 of the sandbox is at "+u {
		t.Fatalf("expose_port: %s", raw)
	}
	resp, body := get(t, u+"p?q=1", nil)
	if resp.StatusCode != 200 || !strings.HasPrefix(body, "stdio path=/p raw= query=q=1 host=localhost:3000 xfh="+pu.Host+" xfp=http prefix="+strings.TrimSuffix(pu.Path, "/")+" ") {
		t.Errorf("GET: %d %q", resp.StatusCode, body)
	}
	if !hasValue(resp.Header.Values("Content-Security-Policy"), previewCSP) {
		t.Errorf("CSP %q", resp.Header.Values("Content-Security-Policy"))
	}
	ws, br := wsDial(t, u+"ws")
	echo(t, ws, br, "over stdio")
	// The listener serves previews only.
	if resp, _ := get(t, "http://"+pu.Host+"/mcp", nil); resp.StatusCode != http.StatusNotFound {
		t.Errorf("/mcp on the loopback listener: %d", resp.StatusCode)
	}
	// One listener: a second port is on it too.
	pp.serve(t, "default", 3001, app("second"))
	m = r.call(2, "expose_port", `{"port":3001}`)
	if text := fmt.Sprint(m["result"]); !strings.Contains(text, "http://"+pu.Host+"/preview/") {
		t.Errorf("second port: %s", text)
	}
	srv.Close()
	if !closedWithin(ws, br, 10*time.Second) {
		t.Error("a websocket outlived the server")
	}
	if c, err := net.DialTimeout("tcp", pu.Host, time.Second); err == nil {
		c.Close()
		t.Error("the loopback listener outlived the server")
	}
}

// A stateless (2026-07-28) call exposes its thread's port as a session's
// does: the preview outlives the request, and is the same at the next.
func TestPreviewStateless(t *testing.T) {
	t.Parallel()
	pp := &portsProvider{}
	h := startHTTPOn(t, server.HTTPConfig{}, true, withPorts(pp))
	cs := connectModern(t, h, map[string]string{"X-Thread-ID": "modern"}, nil)
	if cs.ID() != "" {
		t.Fatalf("session %q: want a stateless connection", cs.ID())
	}
	pp.serve(t, "modern", 3000, app("modern"))
	u := exposeURL(t, cs, 3000)
	if !strings.HasPrefix(u, h.url+"/preview/") {
		t.Fatalf("URL %s", u)
	}
	if _, body := get(t, u, nil); !strings.HasPrefix(body, "modern path=/ ") {
		t.Errorf("GET: %q", body)
	}
	if again := exposeURL(t, connectModern(t, h, map[string]string{"X-Thread-ID": "modern"}, nil), 3000); again != u {
		t.Errorf("another request: %s, want %s", again, u)
	}
}
