package egress

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/audit"
)

// Options are what the server hands the proxy besides its config.
type Options struct {
	// StateDir holds the CA, in <StateDir>/network/ (ca.pem 0644, the
	// certificate; ca-key.pem 0600, the key and the certificate). Needed
	// only when network.inject has entries.
	StateDir string
	Audit    audit.Sink   // nil: audit.Discard
	Logger   *slog.Logger // nil: nothing is logged
	// RootCAs are the roots the proxy trusts when it speaks TLS to a host
	// it injects headers for; nil: the system's. Tests set it.
	RootCAs *x509.CertPool

	// lookup resolves a host name; nil: net.DefaultResolver. Tests map
	// names to loopback addresses with it.
	lookup func(ctx context.Context, host string) ([]netip.Addr, error)
	// interfaceAddrs lists the host's addresses; nil: net.InterfaceAddrs.
	// Tests give the host an address of their own with it.
	interfaceAddrs func() ([]net.Addr, error)
	// limits left zero take their defaults; tests shorten them.
	limits limits
}

// limits bound what one sandbox can hold of the server.
type limits struct {
	dialTimeout    time.Duration // resolving and connecting to a target
	tunnelIdle     time.Duration // a tunnel with no byte either way is closed
	keepAliveIdle  time.Duration // a connection between requests
	headerTimeout  time.Duration // reading a request's headers, a TLS handshake
	maxHeaderBytes int           // a request's headers
	connsPerThread int           // connections of one thread served at once
	refusalBurst   int           // refusal lines a thread may write at once,
	refusalRate    float64       // and then a second;
	refusalSummary time.Duration // beyond them, one line per this counts those not written
}

func (l *limits) setDefaults() {
	def := limits{
		dialTimeout:    10 * time.Second,
		tunnelIdle:     10 * time.Minute,
		keepAliveIdle:  2 * time.Minute,
		headerTimeout:  30 * time.Second,
		maxHeaderBytes: 64 << 10,
		connsPerThread: 64,
		refusalBurst:   20,
		refusalRate:    5,
		refusalSummary: 10 * time.Second,
	}
	orDefault(&l.dialTimeout, def.dialTimeout)
	orDefault(&l.tunnelIdle, def.tunnelIdle)
	orDefault(&l.keepAliveIdle, def.keepAliveIdle)
	orDefault(&l.headerTimeout, def.headerTimeout)
	orDefault(&l.maxHeaderBytes, def.maxHeaderBytes)
	orDefault(&l.connsPerThread, def.connsPerThread)
	orDefault(&l.refusalBurst, def.refusalBurst)
	orDefault(&l.refusalRate, def.refusalRate)
	orDefault(&l.refusalSummary, def.refusalSummary)
}

// orDefault sets *v to def unless a test gave it a positive value.
func orDefault[T int | float64 | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

// Proxy serves the connections a sandbox makes to its egress proxy.
type Proxy struct {
	mode    string
	allow   []pattern
	inject  map[string][]header // by target, host:port
	secrets []string
	forms   []string // of secrets, scrubbed from what an inject host sends back
	ca      *ca      // nil without inject entries
	audit   audit.Sink
	log     *slog.Logger
	errLog  *log.Logger // net/http's complaints (netHTTPLog)
	roots   *x509.CertPool
	lookup  func(ctx context.Context, host string) ([]netip.Addr, error)
	host    *hostAddrs // the server's own addresses, refused like loopback
	lim     limits

	mu     sync.Mutex
	conns  map[string]int           // connections served, by thread
	quotas map[string]*refusalQuota // refusal lines, by thread
}

// New returns the proxy of cfg, which it validates. The CA is made (or
// loaded) only when cfg injects headers.
func New(cfg Config, opts Options) (*Proxy, error) {
	allow, inject, err := cfg.parse()
	if err != nil {
		return nil, err
	}
	p := &Proxy{
		mode:   cfg.mode(),
		allow:  allow,
		inject: inject,
		audit:  opts.Audit,
		log:    opts.Logger,
		roots:  opts.RootCAs,
		lookup: opts.lookup,
		host:   thisHost,
		lim:    opts.limits,
		conns:  map[string]int{},
		quotas: map[string]*refusalQuota{},
	}
	p.lim.setDefaults()
	if opts.interfaceAddrs != nil {
		p.host = &hostAddrs{list: opts.interfaceAddrs}
	}
	if p.audit == nil {
		p.audit = audit.Discard{}
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	p.errLog = log.New(netHTTPLog{p.log}, "", 0)
	if p.lookup == nil {
		p.lookup = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
	for _, hs := range inject {
		for _, h := range hs {
			if !slices.Contains(p.secrets, h.value) {
				p.secrets = append(p.secrets, h.value)
			}
		}
	}
	p.forms = secretForms(p.secrets)
	if len(inject) > 0 {
		if p.ca, err = loadOrMakeCA(opts.StateDir); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// Mode is network.mode: none, allowlist or open.
func (p *Proxy) Mode() string { return p.mode }

// Secrets are the inject values, for the server's masker; none of a nil
// Proxy (no allowlist).
func (p *Proxy) Secrets() []string {
	if p == nil {
		return nil
	}
	return slices.Clone(p.secrets)
}

// CA is the PEM of the CA certificate the sandbox must trust; nil when
// nothing is injected (no TLS is terminated then).
func (p *Proxy) CA() []byte {
	if p.ca == nil {
		return nil
	}
	return slices.Clone(p.ca.certPEM)
}

// Env is what a command's environment gets for the proxy at addr (as
// "127.0.0.1:41234"), with caFile the bundle it trusts ("" for none: the
// system's roots plus the CA, written by the supervisor). Both cases are
// given, since tools read one or the other. NO_PROXY keeps the sandbox's
// own loopback direct: its dev servers are not on the internet. With
// mode none, or no addr, there is nothing to add.
func (p *Proxy) Env(addr, caFile string) []string {
	if p.mode == ModeNone || addr == "" {
		return nil
	}
	url := "http://" + addr
	var env []string
	for _, kv := range [][2]string{
		{"HTTP_PROXY", url}, {"HTTPS_PROXY", url}, {"ALL_PROXY", url},
		{"NO_PROXY", "localhost,127.0.0.1,::1"},
	} {
		env = append(env, kv[0]+"="+kv[1], strings.ToLower(kv[0])+"="+kv[1])
	}
	// Node's own fetch and http read the proxy variables only when told
	// to (Node 24 and later; older ones ignore it, and npm reads them
	// anyway).
	env = append(env, "NODE_USE_ENV_PROXY=1")
	if caFile != "" {
		for _, k := range []string{
			"SSL_CERT_FILE",       // OpenSSL, Go, Python's ssl, Ruby
			"REQUESTS_CA_BUNDLE",  // Python requests
			"CURL_CA_BUNDLE",      // curl
			"NODE_EXTRA_CA_CERTS", // Node.js, npm
			"GIT_SSL_CAINFO",      // git
			"PIP_CERT",            // pip
			"CARGO_HTTP_CAINFO",   // cargo
			"AWS_CA_BUNDLE",       // AWS CLI and SDKs
		} {
			env = append(env, k+"="+caFile)
		}
	}
	return env
}

// Who names the sandbox a connection comes from, for its audit lines.
type Who struct {
	Session, Thread, Sandbox, Provider string
}

// ServeConn serves one connection a sandbox made to its proxy until it
// ends or ctx is done (the connection is closed then). It returns when
// everything it started for the connection has ended.
func (p *Proxy) ServeConn(ctx context.Context, conn net.Conn, who Who) {
	defer conn.Close()
	if !p.acquire(who.Thread) {
		// No request is read: the limit is on what the thread holds. It
		// is no audit line, and its log line counts against the thread's
		// refusals (refusalLogged): neither log is the sandbox's to fill.
		if p.refusalLogged(who) {
			p.log.Warn("egress: a thread has too many proxy connections; one refused", "thread", who.Thread, "max", p.lim.connsPerThread)
		}
		conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(conn, rawResponse(http.StatusServiceUnavailable,
			fmt.Sprintf("sandbox-mcp: this sandbox has %d connections open through its proxy, the most it may", p.lim.connsPerThread)))
		return
	}
	defer p.release(who.Thread)
	s := p.newSession(ctx, who)
	defer s.tr.CloseIdleConnections()
	p.serveHTTP(ctx, conn, s)
}

func (p *Proxy) acquire(thread string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns[thread] >= p.lim.connsPerThread {
		return false
	}
	p.conns[thread]++
	return true
}

func (p *Proxy) release(thread string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns[thread]--; p.conns[thread] <= 0 {
		delete(p.conns, thread)
	}
}

// rawResponse is a whole HTTP/1.1 response that closes the connection,
// for where no http.Server speaks.
func rawResponse(code int, text string) string {
	return fmt.Sprintf("HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s\n",
		code, http.StatusText(code), len(text)+1, text)
}

// serveHTTP serves HTTP/1.1 on conn with h until conn is closed (by
// either side, or because ctx is done) and every handler has returned,
// hijacking ones included. An http.Server does the reading: its limits on
// headers and its handling of bad requests are those of every Go server.
func (p *Proxy) serveHTTP(ctx context.Context, conn net.Conn, h http.Handler) {
	defer conn.Close()
	defer context.AfterFunc(ctx, func() { conn.Close() })()
	var handlers sync.WaitGroup
	left := make(chan struct{}) // the server is done with conn
	var once sync.Once
	l := &oneConnListener{conn: conn, addr: conn.LocalAddr(), closed: make(chan struct{})}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			handlers.Add(1) // before StateHijacked or StateClosed can be seen
			defer handlers.Done()
			h.ServeHTTP(w, r)
		}),
		ReadHeaderTimeout: p.lim.headerTimeout,
		IdleTimeout:       p.lim.keepAliveIdle,
		MaxHeaderBytes:    p.lim.maxHeaderBytes,
		ErrorLog:          p.errLog,
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ConnState: func(_ net.Conn, st http.ConnState) {
			if st == http.StateClosed || st == http.StateHijacked {
				once.Do(func() { close(left) })
			}
		},
		// HTTP/1.1 only, inside terminated TLS too: what is forwarded is
		// then what the sandbox sent, upgrades included.
		TLSNextProto: map[string]func(*http.Server, *tls.Conn, http.Handler){},
	}
	served := make(chan struct{})
	go func() {
		srv.Serve(l)
		close(served)
	}()
	<-left
	handlers.Wait()
	l.Close()
	<-served
}

// oneConnListener is a listener of one connection, for an http.Server
// serving a connection the proxy was handed.
type oneConnListener struct {
	mu     sync.Mutex
	conn   net.Conn
	addr   net.Addr
	closed chan struct{}
	once   sync.Once
}

func (l *oneConnListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	c := l.conn
	l.conn = nil
	l.mu.Unlock()
	if c != nil {
		return c, nil
	}
	<-l.closed
	return nil, net.ErrClosed
}

func (l *oneConnListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *oneConnListener) Addr() net.Addr { return l.addr }

// netHTTPLog is where net/http writes its complaints about a connection.
// A sandbox's bad TLS handshake or broken request is its own business
// (debug); a handler's panic is a bug of ours (error).
type netHTTPLog struct{ log *slog.Logger }

func (w netHTTPLog) Write(b []byte) (int, error) {
	msg := strings.TrimSpace(string(b))
	level := slog.LevelDebug
	if strings.Contains(msg, "panic") {
		level = slog.LevelError
	}
	w.log.Log(context.Background(), level, "egress: net/http: "+msg)
	return len(b), nil
}
