package egress

// Tests of the red team's attacks on the egress proxy (SPEC §17): each
// names what it now guards and, in its comment, what the attack was; the
// ones marked "Held" were held from the start and are kept as regression
// tests where no other test covers them.

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/audit"
	"github.com/sandbox-mcp/sandbox-mcp/internal/testkit"
)

// countSink counts the audit lines recorded and the bytes they take.
type countSink struct {
	lines, bytes atomic.Int64
}

func (s *countSink) Begin(e audit.Event) (audit.Event, error) { return e, nil }
func (s *countSink) Record(e audit.Event) error {
	var b bytes.Buffer
	w := audit.NewWriter(&b)
	w.Record(e)
	s.lines.Add(1)
	s.bytes.Add(int64(b.Len()))
	return nil
}
func (s *countSink) Close() error { return nil }

// TestRefusalsBoundTheAuditLog: code in the sandbox cannot write the
// server's audit log as fast as it can send bytes. (Red team: a refused
// plain request was answered 403 on a kept-alive connection, so one
// connection pipelined thousands of refusals, each a line of ~400 bytes;
// the log is every tenant's, and once its disk is full every call is
// refused.) Now a refusal closes the connection, and a thread's refusals
// are lines only within a budget (burst, then a rate); beyond it they are
// refused all the same, and counted in one line per interval.
func TestRefusalsBoundTheAuditLog(t *testing.T) {
	t.Parallel()
	sink := &countSink{}
	p, err := New(Config{Mode: ModeAllowlist, Allow: []string{"example.com"}},
		Options{StateDir: t.TempDir(), Audit: sink, lookup: noNames})
	if err != nil {
		t.Fatal(err)
	}
	addr := start(t, p, Who{Thread: "flood"})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const n = 5000
	var req bytes.Buffer
	for i := range n {
		fmt.Fprintf(&req, "GET http://refused-%d.test/ HTTP/1.1\r\nHost: refused-%d.test\r\n\r\n", i, i)
	}
	start := time.Now()
	go c.Write(req.Bytes())
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	br := bufio.NewReader(c)
	answered := 0
	for answered < n {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			break
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		answered++
	}
	took := time.Since(start)
	lines, size := sink.lines.Load(), sink.bytes.Load()
	t.Logf("one connection, %v: %d refused requests answered, %d audit lines, %d bytes (%.0f MB/min)",
		took.Round(time.Millisecond), answered, lines, size, float64(size)/took.Minutes()/1e6)
	// One connection's refusals should cost a bounded number of lines.
	if lines > 100 {
		t.Errorf("one connection wrote %d audit lines (%d bytes) in %v: a sandbox floods the shared audit log at will", lines, size, took.Round(time.Millisecond))
	}
	if answered != 1 {
		t.Errorf("one connection had %d refusals answered, want 1: the connection is closed after a refusal", answered)
	}
}

// eventSink keeps the lines recorded.
type eventSink struct {
	mu     sync.Mutex
	events []audit.Event
}

func (s *eventSink) Begin(e audit.Event) (audit.Event, error) { return e, nil }
func (s *eventSink) Record(e audit.Event) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, e)
	return nil
}
func (s *eventSink) Close() error { return nil }

func (s *eventSink) lines() []audit.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.events)
}

// Many connections, each refused: a thread's refusals are lines up to its
// burst, and the rest are counted in a summary line; every one is still
// refused. Another thread's refusals and an allowed request are lines
// all the same.
func TestRefusalsRateLimitedPerThread(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, false, nil)
	sink := &eventSink{}
	p, err := New(Config{Mode: ModeAllowlist, Allow: []string{"127.0.0.1:" + up.port()}},
		Options{Audit: sink, lookup: noNames, limits: limits{refusalBurst: 20, refusalRate: 0.01, refusalSummary: 300 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	flood := start(t, p, Who{Session: "s", Thread: "flood"})
	other := start(t, p, Who{Session: "s", Thread: "other"})
	const n = 200
	for i := range n {
		req := fmt.Sprintf("GET http://refused-%d.test/ HTTP/1.1\r\nHost: x\r\n\r\n", i)
		if i%2 == 1 {
			req = fmt.Sprintf("CONNECT refused-%d.test:443 HTTP/1.1\r\nHost: x\r\n\r\n", i)
		}
		if code, _ := rawRequest(t, flood, req); code != "403" {
			t.Fatalf("refusal %d: %s, want 403", i, code)
		}
	}
	if code, _ := rawRequest(t, other, "GET http://refused.test/ HTTP/1.1\r\nHost: x\r\n\r\n"); code != "403" {
		t.Fatalf("another thread: %s", code)
	}
	if code, _ := rawRequest(t, flood, "GET http://127.0.0.1:"+up.port()+"/ HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"); code != "200" {
		t.Fatalf("an allowed request: %s", code)
	}
	var logged, notLogged, summaries, otherLines, allowed int
	testkit.Poll(5*time.Second, 20*time.Millisecond, func() bool {
		logged, notLogged, summaries, otherLines, allowed = 0, 0, 0, 0, 0
		for _, e := range sink.lines() {
			switch {
			case e.Thread == "other":
				otherLines++
			case e.Args["refusals_not_logged"] != nil:
				summaries++
				notLogged += e.Args["refusals_not_logged"].(int)
				if !strings.Contains(e.Error, "refusals not logged") || e.Outcome != audit.Denied {
					t.Errorf("summary line: %s %q", e.Outcome, e.Error)
				}
			case e.Outcome == audit.OK:
				allowed++
			default:
				logged++
			}
		}
		return logged+notLogged == n
	})
	t.Logf("%d refusals: %d lines, %d counted in %d summary lines", n, logged, notLogged, summaries)
	if logged+notLogged != n || logged > 25 || summaries < 1 {
		t.Errorf("%d refusals: %d lines, %d counted in %d summary lines; want about 20 lines and the rest counted", n, logged, notLogged, summaries)
	}
	if otherLines != 1 || allowed != 1 {
		t.Errorf("another thread's refusal: %d lines; an allowed request: %d; want 1 each", otherLines, allowed)
	}
	for _, e := range sink.lines() {
		if e.Outcome == audit.Denied && e.Args["bytes_down"] != int64(0) {
			t.Errorf("a refusal reports bytes_down %v: the proxy's own 403 is not the upstream's", e.Args["bytes_down"])
		}
	}
}

// TestInjectedSecretNeverReachesSandbox: the inject host echoing what it
// was sent hands the sandbox nothing of the secret, by any way a response
// has — TRACE (HTTP's echo, RFC 9110 §9.3.8, in any case), a 103 Early
// Hints, trailers, header values and names, a body (an httpbin-like
// /headers, an error page quoting the credential it refused), split
// across reads or written slowly — and a body it still compresses is
// refused, not passed unseen. (Red team: TRACE, 103 and trailers carried
// it; the masker, matching the literal value only, was the last guard.)
func TestInjectedSecretNeverReachesSandbox(t *testing.T) {
	t.Parallel()
	var acceptEncoding atomic.Value
	in := newInjecting(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		acceptEncoding.Store(r.Header.Get("Accept-Encoding"))
		auth := r.Header.Get("Authorization")
		switch {
		case strings.EqualFold(r.Method, "TRACE"), strings.EqualFold(r.Method, "TRACK"):
			// What Apache's TraceEnable On does: the request, echoed.
			w.Header().Set("Content-Type", "message/http")
			r.Write(w)
		case r.URL.Path == "/hints":
			w.Header().Set("Link", "</x>; rel=preload; token="+auth)
			w.WriteHeader(http.StatusEarlyHints)
			w.Header().Del("Link")
			io.WriteString(w, "hello")
		case r.URL.Path == "/trailer":
			w.Header().Set("Trailer", "X-Seen")
			io.WriteString(w, "hello")
			w.Header().Set("X-Seen", auth)
		case r.URL.Path == "/headers":
			// httpbin's /headers, with a length, and a header named
			// after the token.
			w.Header().Set("X-"+strings.Fields(auth)[1], "1")
			w.Header().Set("X-Echo", "token "+strings.Fields(auth)[1])
			b, _ := json.Marshal(map[string]any{"headers": r.Header})
			w.Header().Set("Content-Length", fmt.Sprint(len(b)))
			w.Write(b)
		case r.URL.Path == "/slow":
			// The secret a byte at a time, each flushed.
			w.Header().Set("Content-Type", "text/event-stream")
			for _, c := range []byte("data: " + auth + "\n\n") {
				w.Write([]byte{c})
				w.(http.Flusher).Flush()
			}
		case r.URL.Path == "/gzip":
			// A server that compresses whatever it was asked.
			w.Header().Set("Content-Encoding", "gzip")
			zw := gzip.NewWriter(w)
			io.WriteString(zw, auth)
			zw.Close()
		case r.URL.Path == "/big":
			// The secret among megabytes, at a read's edge somewhere.
			for i := range 3000 {
				fmt.Fprintf(w, "%s%d ", strings.Repeat("x", i%97), i)
				if i%500 == 0 {
					io.WriteString(w, auth)
				}
			}
		default:
			io.WriteString(w, "hello")
		}
	}))
	tlsConf := &tls.Config{RootCAs: in.caPool, ServerName: "example.com"}
	noSecret := func(t *testing.T, what, text string) {
		t.Helper()
		for _, s := range []string{"s3cret-t0ken", "S3cret-T0ken", "k3y-Bearer"} {
			if strings.Contains(text, s) {
				t.Errorf("%s carried the secret to the sandbox: %q", what, text)
			}
		}
	}

	for _, method := range []string{"TRACE", "TRACK", "trace"} {
		t.Run(method, func(t *testing.T) {
			tc := dialThrough(t, in.addr, "example.com:"+in.tlsUp.port(), tlsConf)
			fmt.Fprintf(tc, "%s / HTTP/1.1\r\nHost: example.com\r\n\r\n", method)
			resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			noSecret(t, method+"'s body", string(b))
			if resp.StatusCode != http.StatusMethodNotAllowed {
				t.Errorf("%s: %d %q, want 405", method, resp.StatusCode, b)
			}
		})
	}

	t.Run("103 Early Hints", func(t *testing.T) {
		var hints []string
		ctx := httptrace.WithClientTrace(t.Context(), &httptrace.ClientTrace{
			Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
				hints = append(hints, h["Link"]...)
				return nil
			},
		})
		req, _ := http.NewRequestWithContext(ctx, "GET", in.url("/hints"), nil)
		resp, err := proxyClient(in.addr, in.caPool).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if len(hints) == 0 {
			t.Fatal("the 103 did not reach the sandbox")
		}
		noSecret(t, "a 103 Early Hints header", strings.Join(hints, "\n"))
	})

	t.Run("trailer", func(t *testing.T) {
		resp, err := proxyClient(in.addr, in.caPool).Get(in.url("/trailer"))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		noSecret(t, "a trailer", fmt.Sprint(resp.Trailer))
	})

	for _, path := range []string{"/headers", "/slow", "/big"} {
		t.Run("body "+path, func(t *testing.T) {
			req, _ := http.NewRequest("GET", in.url(path), nil)
			req.Header.Set("Accept-Encoding", "gzip, br") // not passed on: the body comes as it is
			resp, err := proxyClient(in.addr, in.caPool).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("%d %v", resp.StatusCode, err)
			}
			noSecret(t, "the body", string(b))
			noSecret(t, "the headers", fmt.Sprint(resp.Header))
			if !strings.Contains(string(b), hiddenMark) {
				t.Errorf("the body does not say where a secret was hidden: %.300q", b)
			}
			if got := acceptEncoding.Load(); got != "identity" {
				t.Errorf("the upstream got Accept-Encoding %q, want identity", got)
			}
		})
	}

	t.Run("a compressed body is refused", func(t *testing.T) {
		resp, err := proxyClient(in.addr, in.caPool).Get(in.url("/gzip"))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadGateway || !strings.Contains(string(b), "example.com:"+in.tlsUp.port()) || !strings.Contains(string(b), "Content-Encoding gzip") {
			t.Errorf("%d %q, want a 502 naming the host and the encoding", resp.StatusCode, b)
		}
	})
}

// TestPlainUpgradeIdles: a plain-HTTP request that the upstream upgrades
// (101: a websocket to a listed host) passes, both ways, and is then held
// to a tunnel's idle time: kept while bytes pass, closed once none has for
// tunnelIdle. (Red team: httputil.ReverseProxy copied it with no idle
// limit, an idle slot held for the sandbox's whole life.)
func TestPlainUpgradeIdles(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, false, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
		for {
			line, err := brw.ReadString('\n')
			if err != nil {
				return
			}
			io.WriteString(c, strings.ToUpper(line))
		}
	}))
	const idle = 300 * time.Millisecond
	p, err := New(Config{Mode: ModeAllowlist, Allow: []string{"127.0.0.1:" + up.port()}},
		Options{limits: limits{tunnelIdle: idle}})
	if err != nil {
		t.Fatal(err)
	}
	addr := start(t, p, Who{Thread: "t"})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET http://127.0.0.1:%s/ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n", up.port())
	br := bufio.NewReader(c)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	// Busy for 3× the idle time: kept.
	for i := range 10 {
		time.Sleep(idle / 3)
		fmt.Fprintf(c, "ping %d\n", i)
		if got, err := br.ReadString('\n'); err != nil || got != fmt.Sprintf("PING %d\n", i) {
			t.Fatalf("a busy upgraded connection, message %d: %q %v", i, got, err)
		}
	}
	// Then silent: closed.
	c.SetReadDeadline(time.Now().Add(10 * idle))
	if _, err = br.ReadByte(); err != io.EOF {
		t.Errorf("an upgraded plain-HTTP connection idle for 10× tunnelIdle: read %v, want it closed", err)
	}
}

// Held: inside a terminated tunnel to the inject host, nothing sends the
// secret anywhere else — not an absolute-form request naming another
// host, not a second request on the same kept-alive connection with
// another Host, not a pipelined pair. Every request reaches the inject
// host's server as that host, with the header. (TestInject covers a
// changed Host on one request; this adds absolute-form and pipelining on
// one connection.)
func TestRedTeamMitmNoRetarget(t *testing.T) {
	t.Parallel()
	other := newUpstream(t, true, nil) // "evil.test": must never be reached
	var seen atomic.Int64
	in := newInjecting(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Add(1)
		io.WriteString(w, "hello from upstream")
	}))
	tc := dialThrough(t, in.addr, "example.com:"+in.tlsUp.port(), &tls.Config{RootCAs: in.caPool, ServerName: "example.com"})
	reqs := fmt.Sprintf("GET https://127.0.0.1:%s/abs HTTP/1.1\r\nHost: 127.0.0.1:%s\r\n\r\n", other.port(), other.port()) +
		fmt.Sprintf("GET http://evil.test:%s/abs2 HTTP/1.1\r\nHost: evil.test\r\n\r\n", other.port()) +
		"GET /rel HTTP/1.1\r\nHost: evil.test\r\n\r\n" +
		"GET /last HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n\r\n"
	io.WriteString(tc, reqs)
	br := bufio.NewReader(tc)
	for i := range 4 {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != "hello from upstream" {
			t.Errorf("response %d: %d %q", i, resp.StatusCode, b)
		}
	}
	if len(other.requests()) != 0 {
		t.Errorf("a request inside the terminated tunnel reached another server: %v", other.requests()[0].URL)
	}
	if !testkit.Poll(5*time.Second, 10*time.Millisecond, func() bool { return seen.Load() == 4 }) {
		t.Fatalf("the inject host got %d requests, want 4", seen.Load())
	}
	for _, r := range in.tlsUp.requests() {
		if r.Header.Get("Authorization") != secret || r.Host != "example.com:"+in.tlsUp.port() {
			t.Errorf("request %s: Host %q Authorization %q", r.URL.Path, r.Host, r.Header.Get("Authorization"))
		}
	}
}

// Held: spellings of a host that name the inject host (case, trailing
// dot) get the header only over the terminated tunnel to that host;
// spellings that name another target (its IP, another port, userinfo in
// a plain URL) never carry it.
func TestRedTeamInjectHostSpellings(t *testing.T) {
	t.Parallel()
	in := newInjecting(t, nil)
	tp := in.tlsUp.port()
	// Case and a trailing dot: the same target, the header injected, the
	// certificate of the proxy's CA.
	for _, target := range []string{"EXAMPLE.com:" + tp, "example.com.:" + tp} {
		tc := dialThrough(t, in.addr, target, &tls.Config{RootCAs: in.caPool, ServerName: "example.com"})
		fmt.Fprintf(tc, "GET /spelled HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", target)
		resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
		if err != nil {
			t.Fatalf("%s: %v", target, err)
		}
		resp.Body.Close()
		if got := in.tlsUp.last(t).Header.Get("Authorization"); got != secret {
			t.Errorf("%s: upstream got Authorization %q", target, got)
		}
	}
	// Its IP: a plain tunnel, the upstream's own certificate, no header.
	n := len(in.tlsUp.requests())
	c := proxyClient(in.addr, in.tlsUp.roots())
	resp, err := c.Get("https://127.0.0.1:" + tp + "/by-ip")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if rs := in.tlsUp.requests(); len(rs) != n+1 || rs[n].Header.Get("Authorization") != "" {
		t.Errorf("by IP: the upstream got Authorization %q", rs[len(rs)-1].Header.Get("Authorization"))
	}
	// Userinfo naming the inject host, plain HTTP: the target is the URL's
	// host, and no header is injected over plain HTTP anyway.
	pp := in.plainUp.port()
	cn, err := net.Dial("tcp", in.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer cn.Close()
	fmt.Fprintf(cn, "GET http://example.com:%s@127.0.0.1:%s/userinfo HTTP/1.1\r\nHost: example.com:%s\r\nConnection: close\r\n\r\n", tp, pp, tp)
	out, _ := io.ReadAll(cn)
	if !bytes.HasPrefix(out, []byte("HTTP/1.1 403")) && !bytes.HasPrefix(out, []byte("HTTP/1.1 400")) {
		// 127.0.0.1:pp is listed; if it passed, it must carry no secret.
		if r := in.plainUp.last(t); r.Header.Get("Authorization") != "" && strings.Contains(r.Header.Get("Authorization"), "s3cret") {
			t.Errorf("userinfo: the plain upstream got the secret")
		}
	}
}
