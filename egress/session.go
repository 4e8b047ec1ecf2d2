package egress

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/audit"
)

// session serves one connection from a sandbox: its requests one after
// another, as HTTP/1.1 does.
type session struct {
	p   *Proxy
	ctx context.Context // ServeConn's: what a tunnel lives within
	who Who
	tr  *http.Transport // plain HTTP's upstream connections, this session's own
	rp  *httputil.ReverseProxy
}

func (p *Proxy) newSession(ctx context.Context, who Who) *session {
	s := &session{p: p, ctx: ctx, who: who}
	s.tr = p.transport(func(ctx context.Context, addr string) (net.Conn, error) {
		t, err := parseTarget(addr, 80)
		if err != nil {
			return nil, &refusal{"the proxy cannot connect to " + cut(addr)}
		}
		if a := attemptOf(ctx); a != nil && a.t == t && a.addrs != nil {
			return p.connectTo(ctx, t, a.addrs) // as forward resolved them
		}
		return p.dial(ctx, t)
	}, nil)
	s.rp = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			a := attemptOf(pr.In.Context())
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = a.t.String() // the target checked, as checked
			pr.Out.Host = pr.In.URL.Host
			stripProxyHeaders(pr.Out.Header)
		},
		Transport:     s.tr,
		FlushInterval: 0, // a response without a length (a stream, server-sent events) is flushed as it comes
		ErrorLog:      p.errLog,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			attemptOf(r.Context()).answerError(w, err, false)
		},
	}
	return s
}

// transport is an HTTP/1.1 client whose every connection is made by dial
// (with tlsConf, over TLS). It takes no proxy from the server's
// environment: the policy checks the address it connects to itself.
func (p *Proxy) transport(dial func(ctx context.Context, addr string) (net.Conn, error), tlsConf *tls.Config) *http.Transport {
	return &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			return dial(ctx, addr)
		},
		TLSClientConfig:        tlsConf,
		TLSHandshakeTimeout:    p.lim.dialTimeout,
		DisableCompression:     true, // the bytes the server sent, as it sent them
		MaxIdleConnsPerHost:    4,
		IdleConnTimeout:        90 * time.Second,
		ExpectContinueTimeout:  time.Second,
		MaxResponseHeaderBytes: 1 << 20,
		TLSNextProto:           map[string]func(string, *tls.Conn) http.RoundTripper{}, // HTTP/1.1: upgrades pass
	}
}

// ServeHTTP serves one request of the sandbox to its proxy.
func (s *session) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodConnect:
		s.connect(w, r)
	case r.URL.IsAbs() && r.URL.Scheme == "http" && r.URL.Host != "":
		s.forward(w, r)
	case r.URL.IsAbs() && r.URL.Host != "":
		s.deny(w, r.URL.Host, 0, r.Method, http.StatusBadRequest,
			"sandbox-mcp: the proxy forwards http:// requests; https:// goes through CONNECT")
	default:
		refuse(w, http.StatusBadRequest, "sandbox-mcp: this is a proxy: it takes requests for http://host/... and CONNECT host:port", false)
	}
}

// forward sends a plain-HTTP request on. No header is injected: a secret
// never travels in clear.
func (s *session) forward(w http.ResponseWriter, r *http.Request) {
	t, err := parseTarget(r.URL.Host, 80)
	if err != nil {
		s.deny(w, r.URL.Host, 0, r.Method, http.StatusBadRequest, "sandbox-mcp: "+cut(r.URL.Host)+": "+err.Error())
		return
	}
	if rf := s.p.notListed(t); rf != nil {
		s.deny(w, t.host(), t.port, r.Method, http.StatusForbidden, "sandbox-mcp: "+rf.text)
		return
	}
	addrs, rerr := s.p.resolve(r.Context(), t)
	if rf := (*refusal)(nil); errors.As(rerr, &rf) {
		s.deny(w, t.host(), t.port, r.Method, http.StatusForbidden, "sandbox-mcp: "+rf.text)
		return
	}
	a, err := s.begin(t, r.Method)
	if err != nil {
		refuse(w, http.StatusBadGateway, "sandbox-mcp: the audit log cannot be written, so no connection is made", true)
		return
	}
	defer a.end()
	if rerr != nil {
		a.answerError(w, rerr, false)
		return
	}
	a.addrs = addrs
	r.Body = countBody{r.Body, &a.up}
	defer func() {
		// The reverse proxy aborts a response whose upstream broke off
		// with http.ErrAbortHandler; the line still says so.
		if v := recover(); v != nil {
			a.fail(audit.Error, "the upstream connection broke off")
			panic(v)
		}
	}()
	s.rp.ServeHTTP(countWriter{w, &a.up, &a.down, s.p.lim.tunnelIdle}, r.WithContext(context.WithValue(r.Context(), attemptKey{}, a)))
}

// connect serves a CONNECT: refused, tunnelled, or — to a host with
// inject entries — answered by the proxy itself (mitm).
func (s *session) connect(w http.ResponseWriter, r *http.Request) {
	t, err := parseTarget(r.Host, 0)
	if err == nil && t.port == 0 {
		err = errors.New("CONNECT wants host:port")
	}
	if err != nil {
		s.deny(w, r.Host, 0, r.Method, http.StatusBadRequest, "sandbox-mcp: "+cut(r.Host)+": "+err.Error())
		return
	}
	if rf := s.p.notListed(t); rf != nil {
		s.deny(w, t.host(), t.port, r.Method, http.StatusForbidden, "sandbox-mcp: "+rf.text)
		return
	}
	// Not r.Context(): net/http cancels it when the sandbox half-closes
	// its side, which a tunnel passes on instead.
	addrs, err := s.p.resolve(s.ctx, t)
	if rf := (*refusal)(nil); errors.As(err, &rf) {
		s.deny(w, t.host(), t.port, r.Method, http.StatusForbidden, "sandbox-mcp: "+rf.text)
		return
	}
	a, aerr := s.begin(t, r.Method)
	if aerr != nil {
		refuse(w, http.StatusBadGateway, "sandbox-mcp: the audit log cannot be written, so no connection is made", true)
		return
	}
	defer a.end()
	headers := s.p.inject[t.String()]
	a.injected = len(headers) > 0
	var up net.Conn
	if err == nil {
		up, err = s.p.connectTo(s.ctx, t, addrs)
	}
	if err != nil {
		a.answerError(w, err, true)
		return
	}
	defer up.Close()
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		a.fail(audit.Error, "the sandbox's connection cannot be taken over: "+err.Error())
		return
	}
	conn.SetDeadline(time.Time{})
	if _, err := io.WriteString(conn, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		conn.Close()
		a.fail(audit.Error, "the sandbox closed the connection")
		return
	}
	// What the sandbox sent after its CONNECT (a TLS hello) may be read
	// already.
	pre, _ := brw.Reader.Peek(brw.Reader.Buffered())
	cc := &countConn{Conn: conn, pre: append([]byte(nil), pre...), up: &a.up, down: &a.down}
	cc.touch()
	if a.injected {
		s.mitm(s.ctx, cc, up, t, headers, a)
	} else {
		s.tunnel(s.ctx, cc, up, a)
	}
}
