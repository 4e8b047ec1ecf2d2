package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/audit"
)

// tunnel carries bytes both ways between the sandbox and up until both
// sides have finished, either breaks, it idles or ctx is done. A side
// that finishes sending (a half close) is passed on as one.
func (s *session) tunnel(ctx context.Context, cc *countConn, up net.Conn, a *attempt) {
	closeBoth := func() { cc.Close(); up.Close() }
	defer closeBoth()
	defer context.AfterFunc(ctx, closeBoth)()
	defer watchIdle(cc, s.p.lim.tunnelIdle, closeBoth)()
	var wg sync.WaitGroup
	pipe := func(dst, src net.Conn) {
		defer wg.Done()
		if _, err := io.Copy(dst, src); err != nil || closeWrite(dst) != nil {
			closeBoth()
		}
	}
	wg.Add(2)
	go pipe(up, cc)
	pipe(cc, up)
	wg.Wait()
}

// closeWrite half-closes c: it has no more to send.
func closeWrite(c net.Conn) error {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}

// mitm answers the TLS the sandbox speaks to t with a certificate of the
// proxy's CA, and sends each request it makes on to t over TLS, verified,
// with the inject headers set. The requests go to t whatever their Host
// says: a secret for t reaches t's servers as t, not another site they
// host.
func (s *session) mitm(ctx context.Context, cc *countConn, up net.Conn, t target, headers []header, a *attempt) {
	defer cc.Close()
	leaf, err := s.p.ca.leaf(t.host())
	if err != nil {
		a.fail(audit.Error, "no certificate for "+t.host()+": "+err.Error())
		return
	}
	tc := tls.Server(cc, &tls.Config{
		Certificates: []tls.Certificate{*leaf},
		NextProtos:   []string{"http/1.1"},
		MinVersion:   tls.VersionTLS12,
	})
	cc.SetDeadline(time.Now().Add(s.p.lim.headerTimeout))
	if err := tc.HandshakeContext(ctx); err != nil {
		a.fail(audit.Error, "the sandbox's TLS handshake failed (does it trust the proxy's CA?)")
		return
	}
	cc.SetDeadline(time.Time{})

	var first atomic.Pointer[net.Conn] // the connection made for the CONNECT, used by the first request
	first.Store(&up)
	tr := s.p.transport(func(ctx context.Context, _ string) (net.Conn, error) {
		if c := first.Swap(nil); c != nil {
			return *c, nil
		}
		return s.p.dial(ctx, t)
	}, &tls.Config{ServerName: t.host(), RootCAs: s.p.roots, MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}})
	defer tr.CloseIdleConnections()
	authority := t.String()
	if t.port == 443 {
		authority = t.host()
		if t.ip.Is6() {
			authority = "[" + authority + "]"
		}
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = "https"
			pr.Out.URL.Host = t.String()
			pr.Out.Host = authority
			stripProxyHeaders(pr.Out.Header)
			for _, h := range headers {
				pr.Out.Header.Set(h.name, h.value) // replaces the sandbox's own
			}
			// A body is scrubbed of the secrets as it passes: it must
			// come as the bytes it is, not compressed.
			pr.Out.Header.Set("Accept-Encoding", "identity")
		},
		ModifyResponse: func(resp *http.Response) error { return s.p.scrubResponse(t, resp) },
		Transport:      tr,
		FlushInterval:  0, // as for plain HTTP: streams are flushed as they come
		ErrorLog:       s.p.errLog,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			a.answerError(w, err, false)
		},
	}
	defer watchIdle(cc, s.p.lim.tunnelIdle, func() { cc.Close() })()
	s.p.serveHTTP(ctx, tc, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodConnect:
			refuse(w, http.StatusMethodNotAllowed, "sandbox-mcp: CONNECT inside a tunnel", true)
			return
		case strings.EqualFold(r.Method, "TRACE"), strings.EqualFold(r.Method, "TRACK"):
			// HTTP's echo: its answer is the request as the server got
			// it, secrets included.
			refuse(w, http.StatusMethodNotAllowed, "sandbox-mcp: "+strings.ToUpper(r.Method)+" to "+t.String()+" is refused: it echoes the request, injected headers included", false)
			return
		case r.Header.Get("Upgrade") != "":
			// An upgraded connection (a websocket) is frames the proxy
			// cannot scrub of the secrets.
			refuse(w, http.StatusForbidden, "sandbox-mcp: "+t.String()+" gets headers from network.inject: its connections are not upgraded (no websocket), since the proxy cannot scrub the secret from their frames", false)
			return
		}
		defer func() {
			if v := recover(); v != nil {
				a.fail(audit.Error, "the upstream connection broke off")
				panic(v)
			}
		}()
		rp.ServeHTTP(scrubWriter{w, s.p.forms}, r)
		// Trailers are sent once the handler returns, from w's header.
		scrubHeader(w.Header(), s.p.forms)
	}))
	if c := first.Swap(nil); c != nil {
		(*c).Close()
	}
}

// scrubResponse keeps the secrets out of a response of t (a server
// echoing what it was sent): its headers are scrubbed, its body is
// scrubbed as it passes, and a body still encoded despite the request's
// Accept-Encoding: identity is refused, since the secret cannot be seen
// in it (gzip, deflate and br alike: nothing is decoded).
func (p *Proxy) scrubResponse(t target, resp *http.Response) error {
	scrubHeader(resp.Header, p.forms)
	if resp.StatusCode == http.StatusSwitchingProtocols {
		return &upstreamError{"sandbox-mcp: " + t.String() + " switched protocols, which the proxy does not pass to a host it injects headers for"}
	}
	if resp.Request.Method == http.MethodHead || resp.StatusCode == http.StatusNoContent || resp.StatusCode == http.StatusNotModified || resp.ContentLength == 0 {
		return nil // no body
	}
	for _, v := range resp.Header.Values("Content-Encoding") {
		for _, e := range strings.Split(v, ",") {
			if e = strings.TrimSpace(e); e != "" && !strings.EqualFold(e, "identity") {
				return &upstreamError{"sandbox-mcp: " + t.String() + " sent a body with Content-Encoding " + cut(e) + ", though asked for identity; the proxy passes only bodies it can scrub of the injected secret"}
			}
		}
	}
	resp.Body = newScrubber(resp.Body, p.forms, hiddenMark)
	// The length changes when a secret is replaced. resp.ContentLength
	// is left as it was: the reverse proxy flushes each read of a body of
	// unknown length (-1, a stream) and buffers one whose length it knew.
	resp.Header.Del("Content-Length")
	return nil
}

// stripProxyHeaders removes what was meant for the proxy (Proxy-Authorization
// and the like): it never goes further.
func stripProxyHeaders(h http.Header) {
	for k := range h {
		if strings.HasPrefix(k, "Proxy-") {
			delete(h, k)
		}
	}
}

// countConn is the sandbox's side of a tunnel: it counts the bytes each
// way and notes when the last one passed.
type countConn struct {
	net.Conn
	pre      []byte // read already, before the tunnel began
	up, down *atomic.Int64
	last     atomic.Int64 // unix nanoseconds of the last byte either way
}

func (c *countConn) touch() { c.last.Store(time.Now().UnixNano()) }

func (c *countConn) Read(b []byte) (int, error) {
	var n int
	var err error
	if len(c.pre) > 0 {
		n = copy(b, c.pre)
		c.pre = c.pre[n:]
	} else {
		n, err = c.Conn.Read(b)
	}
	if n > 0 {
		c.up.Add(int64(n))
		c.touch()
	}
	return n, err
}

func (c *countConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	if n > 0 {
		c.down.Add(int64(n))
		c.touch()
	}
	return n, err
}

func (c *countConn) CloseWrite() error { return closeWrite(c.Conn) }

// watchIdle calls idle once when c has passed no byte for d. It returns
// what stops watching.
func watchIdle(c *countConn, d time.Duration, idle func()) (stop func()) {
	done := make(chan struct{})
	tick := time.NewTicker(max(d/8, 10*time.Millisecond))
	go func() {
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				if time.Since(time.Unix(0, c.last.Load())) > d {
					idle()
					return
				}
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(done) }) }
}

// countBody counts the bytes of a plain request's body.
type countBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b countBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

// countWriter counts the bytes of a plain response's body, and those of
// a connection it upgrades (a websocket), both ways. An upgraded
// connection idle for idle is closed, as a tunnel is.
type countWriter struct {
	http.ResponseWriter
	up, down *atomic.Int64
	idle     time.Duration
}

func (w countWriter) Write(b []byte) (int, error) {
	n, err := w.ResponseWriter.Write(b)
	w.down.Add(int64(n))
	return n, err
}

func (w countWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w countWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	cc := &countConn{Conn: c, up: w.up, down: w.down}
	cc.touch()
	return &watchedConn{cc, watchIdle(cc, w.idle, func() { cc.Close() })}, brw, nil
}

// watchedConn is a connection watched for idleness until it is closed.
type watchedConn struct {
	*countConn
	stop func()
}

func (c *watchedConn) Close() error {
	c.stop()
	return c.countConn.Close()
}
