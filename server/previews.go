package server

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/tools"
)

// Previews (expose_port, SPEC §17): a port listening inside a thread's
// sandbox is reached at <server>/preview/<capability>/, proxied to the
// port through the sandbox's supervisor (sandbox.Ports) — over HTTP on the
// server's own listener, over stdio on a loopback listener of its own.
//
// The capability is the credential: 256 random bits, looked up whole in a
// map, never logged. It is bound to the thread (its key, namespaced by
// token) and to the box that ran the sandbox when it was made; it ends
// with expose_port close, with that box (DialPort's ErrBoxGone) or with
// the server.
//
// A page served from the sandbox comes from the server's own origin, where
// /mcp is: every preview response carries a CSP sandbox without
// allow-same-origin, so the page's origin is opaque, its requests carry
// `Origin: null`, and the guard refuses that origin whatever
// http.allowed_origins says. Its cookies are its own: the ones it sets are
// renamed and scoped to its path, and it is sent no others (a browser
// sends every cookie of a host to every port and path of it: another
// preview's, another local app's).

const (
	previewPrefix = "/preview/"
	// previewsPerThread caps a thread's exposed ports (a tool error past
	// it); previewsPerTenant a token's, in all its threads: past it the
	// token's least recently used preview ends, so that threads no one
	// names again do not keep theirs for ever.
	previewsPerThread = 16
	previewsPerTenant = 256
	// loopbackConns caps the connections of the stdio loopback listener.
	loopbackConns = 256
	// previewCSP: scripts, forms, popups (sandboxed too), dialogs and
	// downloads work; never allow-same-origin.
	previewCSP = "sandbox allow-scripts allow-forms allow-popups allow-modals allow-downloads"
)

// capBytes is the capability's randomness; capLen its length in a URL.
const capBytes = 32

var capLen = base64.RawURLEncoding.EncodedLen(capBytes)

// previews are the server's exposed ports, every thread's.
type previews struct {
	logger *slog.Logger
	stop   context.Context // cancelled by close: every preview request ends
	end    context.CancelFunc

	mu      sync.RWMutex
	byCap   map[string]*preview
	byPort  map[previewKey]*preview
	threads map[string]int // previews by thread key
	tenants map[string]int // previews by tenant
	closed  bool

	loopMu   sync.Mutex
	loop     *http.Server // the stdio loopback listener, once started
	loopDone chan struct{}
	loopBase string
}

type previewKey struct {
	thread string // key
	port   int
}

// preview is one exposed port.
type preview struct {
	p      *previews
	cap    string
	key    previewKey
	tenant string
	box    string
	ports  sandbox.Ports
	ctx    context.Context // cancelled when it ends: its requests and connections end
	cancel context.CancelFunc
	used   atomic.Int64 // when it was last opened or asked (unix ns)
	tr     *http.Transport
	proxy  *httputil.ReverseProxy
}

func newPreviews(logger *slog.Logger) *previews {
	p := &previews{
		logger:  logger,
		byCap:   map[string]*preview{},
		byPort:  map[previewKey]*preview{},
		threads: map[string]int{},
		tenants: map[string]int{},
	}
	p.stop, p.end = context.WithCancel(context.Background())
	return p
}

// previewScope is Previews (tools) for one call: its thread and sandbox,
// and where its transport serves previews (base: the HTTP server's URL;
// "": stdio's loopback listener).
type previewScope struct {
	p      *previews
	thread ThreadRef
	sb     sandbox.Sandbox
	base   string
}

var _ tools.Previews = previewScope{}

func (s previewScope) Open(ctx context.Context, port int) (string, error) {
	return s.p.open(ctx, s.thread, s.sb, port, s.base)
}

func (s previewScope) Close(_ context.Context, port int) error {
	return s.p.close(previewKey{s.thread.Key, port})
}

func (s previewScope) List(context.Context) ([]tools.ExposedPort, error) {
	return s.p.list(s.thread.Key, s.base), nil
}

// list answers the thread's exposed ports, by port, with their URLs under
// base ("": the loopback listener's).
func (p *previews) list(thread, base string) []tools.ExposedPort {
	if base == "" {
		p.loopMu.Lock()
		base = p.loopBase
		p.loopMu.Unlock()
	}
	p.mu.RLock()
	var out []tools.ExposedPort
	for k, e := range p.byPort {
		if k.thread == thread && e.ctx.Err() == nil {
			out = append(out, tools.ExposedPort{Port: k.port, URL: base + previewPrefix + e.cap + "/"})
		}
	}
	p.mu.RUnlock()
	slices.SortFunc(out, func(a, b tools.ExposedPort) int { return a.Port - b.Port })
	return out
}

// previewBaseKey holds, in the context of an HTTP request carrying a tool
// call, the URL its previews are served under (previewSite.base).
type previewBaseKey struct{}

// errNoPorts: the sandbox cannot reach its ports.
var errNoPorts = errors.New("expose_port is not available with this provider")

// open answers the URL of the thread's port: the one it has while the box
// is the same, else a new capability.
func (p *previews) open(ctx context.Context, t ThreadRef, sb sandbox.Sandbox, port int, base string) (string, error) {
	ports, ok := sb.(sandbox.Ports)
	if !ok {
		return "", errNoPorts
	}
	if t.Key == "" {
		return "", errors.New("no thread")
	}
	box, err := ports.Box(ctx)
	if err != nil {
		return "", fmt.Errorf("the sandbox: %w", err)
	}
	if base == "" {
		if base, err = p.loopback(); err != nil {
			return "", err
		}
	}
	k := previewKey{t.Key, port}
	var ended []*preview
	defer func() {
		for _, e := range ended {
			e.close()
		}
	}()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return "", errors.New("the server is stopping")
	}
	if e := p.byPort[k]; e != nil {
		if e.box == box && e.ctx.Err() == nil {
			e.touch()
			return base + previewPrefix + e.cap + "/", nil
		}
		ended = append(ended, p.removeLocked(e)...) // its box ended: a new one
	}
	if p.threads[t.Key] >= previewsPerThread {
		return "", fmt.Errorf("%w: this thread has %d, the most it may have; end one with expose_port close: true", tools.ErrTooManyPorts, previewsPerThread)
	}
	if p.tenants[t.Tenant] >= previewsPerTenant {
		if old := p.leastUsedLocked(t.Tenant); old != nil {
			p.logger.Info("a preview ended: its token has too many", "thread", old.key.thread, "port", old.key.port, "max", previewsPerTenant)
			ended = append(ended, p.removeLocked(old)...)
		}
	}
	c, err := newCapability()
	if err != nil {
		return "", err
	}
	e := p.newPreview(c, k, t.Tenant, box, ports)
	p.byCap[c], p.byPort[k] = e, e
	p.threads[k.thread]++
	p.tenants[t.Tenant]++
	return base + previewPrefix + c + "/", nil
}

// close ends the thread's port's preview.
func (p *previews) close(k previewKey) error {
	p.mu.Lock()
	e := p.byPort[k]
	var ended []*preview
	if e != nil {
		ended = p.removeLocked(e)
	}
	p.mu.Unlock()
	if e == nil {
		return tools.ErrNotExposed
	}
	for _, e := range ended {
		e.close()
	}
	return nil
}

// dropThread ends every preview of a thread that is gone for good (an
// anonymous thread, removed with its session).
func (p *previews) dropThread(key string) {
	p.mu.Lock()
	var ended []*preview
	for k, e := range p.byPort {
		if k.thread == key {
			ended = append(ended, p.removeLocked(e)...)
		}
	}
	p.mu.Unlock()
	for _, e := range ended {
		e.close()
	}
}

// remove ends e, unless it ended already.
func (p *previews) remove(e *preview) {
	p.mu.Lock()
	ended := p.removeLocked(e)
	p.mu.Unlock()
	for _, e := range ended {
		e.close()
	}
}

// removeLocked takes e out of the tables and returns it to be closed (nil
// when it was not there). p.mu is held.
func (p *previews) removeLocked(e *preview) []*preview {
	if p.byCap[e.cap] != e {
		return nil
	}
	delete(p.byCap, e.cap)
	if p.byPort[e.key] == e {
		delete(p.byPort, e.key)
	}
	if p.threads[e.key.thread]--; p.threads[e.key.thread] <= 0 {
		delete(p.threads, e.key.thread)
	}
	if p.tenants[e.tenant]--; p.tenants[e.tenant] <= 0 {
		delete(p.tenants, e.tenant)
	}
	e.cancel() // no request of it goes on, none starts
	return []*preview{e}
}

// leastUsedLocked is the tenant's preview used longest ago. p.mu is held.
func (p *previews) leastUsedLocked(tenant string) *preview {
	var old *preview
	for _, e := range p.byCap {
		if e.tenant == tenant && (old == nil || e.used.Load() < old.used.Load()) {
			old = e
		}
	}
	return old
}

// lookup is the preview of a capability, or nil. The capability is looked
// up whole (a map, not a prefix compare): nothing tells a guess that was
// close.
func (p *previews) lookup(c string) *preview {
	if len(c) != capLen {
		return nil
	}
	p.mu.RLock()
	e := p.byCap[c]
	p.mu.RUnlock()
	if e == nil || e.ctx.Err() != nil {
		return nil
	}
	return e
}

// closeAll ends every preview and the loopback listener: the server stops.
func (p *previews) closeAll() {
	p.mu.Lock()
	p.closed = true
	var ended []*preview
	for _, e := range p.byCap {
		ended = append(ended, p.removeLocked(e)...)
	}
	p.mu.Unlock()
	p.end()
	for _, e := range ended {
		e.close()
	}
	p.loopMu.Lock()
	defer p.loopMu.Unlock()
	if p.loop != nil {
		p.loop.Close()
		<-p.loopDone
	}
	p.loopBase = "closed"
}

func newCapability() (string, error) {
	b := make([]byte, capBytes)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("no randomness for a capability: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// newPreview makes the preview's proxy: a transport of its own (its
// connections pooled apart from every other preview's), dialing the port
// in its box.
func (p *previews) newPreview(c string, k previewKey, tenant, box string, ports sandbox.Ports) *preview {
	e := &preview{p: p, cap: c, key: k, tenant: tenant, box: box, ports: ports}
	e.ctx, e.cancel = context.WithCancel(p.stop)
	e.touch()
	e.tr = &http.Transport{
		DialContext:            e.dial,
		MaxIdleConns:           8,
		MaxIdleConnsPerHost:    8,
		IdleConnTimeout:        30 * time.Second,
		ExpectContinueTimeout:  time.Second,
		MaxResponseHeaderBytes: 1 << 20,
		DisableCompression:     true, // the app's encoding passes as it is
	}
	e.proxy = &httputil.ReverseProxy{
		Transport:      e.tr,
		Rewrite:        e.rewrite,
		ModifyResponse: e.modifyResponse,
		ErrorHandler:   e.proxyError,
		// Its errors name no URL; logged at debug all the same.
		ErrorLog: log.New(debugWriter{p.logger}, "", 0),
	}
	return e
}

func (e *preview) touch() { e.used.Store(time.Now().UnixNano()) }

// close ends what is left of a preview taken out of the tables: its
// pooled connections (requests in flight end with its context).
func (e *preview) close() {
	e.cancel()
	e.tr.CloseIdleConnections()
}

// dial connects to the port in the preview's box; a box that has ended
// ends the preview.
func (e *preview) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(e.ctx, cancel)()
	conn, err := e.ports.DialPort(ctx, e.box, e.key.port)
	if errors.Is(err, sandbox.ErrBoxGone) {
		e.p.remove(e)
	}
	return conn, err
}

// previewSite is how a client reaches the server: what the app is told
// (X-Forwarded-*) of where it is served.
type previewSite struct {
	proto, host string
	path        string // the path the server is under ("" or "/prefix")
}

// base is the URL previews are under.
func (s previewSite) base() string { return s.proto + "://" + s.host + s.path }

// publicSite is the site http.public_url names; nil: none (or one that
// does not parse, which Validate refuses).
func publicSite(public string) *previewSite {
	u, err := url.Parse(public)
	if public == "" || err != nil {
		return nil
	}
	return &previewSite{proto: u.Scheme, host: u.Host, path: strings.TrimRight(u.Path, "/")}
}

// siteOf is how the request reached the server: public (http.public_url)
// when set, else its own Host.
func siteOf(r *http.Request, public *previewSite) previewSite {
	if public != nil {
		return *public
	}
	proto := "http"
	if r.TLS != nil {
		proto = "https"
	}
	return previewSite{proto: proto, host: r.Host}
}

// previewReq is what the proxy needs of a request beyond itself.
type previewReq struct {
	path, rawPath string // the path below the capability
	site          previewSite
	appAuth       []string // its Authorization values but the server's own tokens: the app's
}

type previewReqKey struct{}

// find is the preview a request's path names, and the rest of the path
// (escaped, from its "/"). ok false: no such preview (404); the path names
// only the capability: rest is "" (a redirect to its "/").
func (p *previews) find(r *http.Request) (e *preview, rest string) {
	after, ok := strings.CutPrefix(r.URL.EscapedPath(), previewPrefix)
	if !ok {
		return nil, ""
	}
	c, tail, slash := strings.Cut(after, "/")
	if e = p.lookup(c); e == nil {
		return nil, ""
	}
	if !slash {
		return e, ""
	}
	return e, "/" + tail
}

// serve proxies a request to its preview e (rest: its path below the
// capability). The request ends with the preview, with the server (p.stop)
// and with stop, if given (an HTTP server's shutdown).
func (p *previews) serve(w http.ResponseWriter, r *http.Request, e *preview, rest string, site previewSite, appAuth []string, stop context.Context) {
	securityHeaders(w.Header())
	if rest == "" {
		loc := e.cap + "/"
		if r.URL.RawQuery != "" {
			loc += "?" + r.URL.RawQuery
		}
		// Relative, so that a reverse proxy's prefix stays (http.Redirect
		// would make it absolute).
		w.Header().Set("Location", loc)
		w.WriteHeader(http.StatusPermanentRedirect)
		return
	}
	path, err := url.PathUnescape(rest)
	if err != nil {
		previewError(w, http.StatusBadRequest, "bad path")
		return
	}
	e.touch()
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	defer context.AfterFunc(e.ctx, cancel)()
	if stop != nil {
		defer context.AfterFunc(stop, cancel)()
	}
	ctx = context.WithValue(ctx, previewReqKey{}, &previewReq{path: path, rawPath: rest, site: site, appAuth: appAuth})
	e.proxy.ServeHTTP(w, r.WithContext(ctx))
}

// rewrite makes the request the app gets: to localhost:PORT (dev servers
// check Host), the prefix stripped, told where it is served, without the
// server's token and without cookies that are not its own.
func (e *preview) rewrite(pr *httputil.ProxyRequest) {
	info := pr.In.Context().Value(previewReqKey{}).(*previewReq)
	out := pr.Out
	host := "localhost:" + strconv.Itoa(e.key.port)
	out.URL.Scheme, out.URL.Host, out.URL.Opaque, out.URL.User = "http", host, "", nil
	out.URL.Path, out.URL.RawPath = info.path, info.rawPath
	out.Host = host
	out.Header.Set("X-Forwarded-Host", info.site.host)
	out.Header.Set("X-Forwarded-Proto", info.site.proto)
	out.Header.Set("X-Forwarded-Prefix", info.site.path+previewPrefix+e.cap)
	out.Header.Del("Authorization")
	for _, v := range info.appAuth {
		out.Header.Add("Authorization", v)
	}
	if c := ownCookies(out.Header.Values("Cookie"), e.cookieTag()); c != "" {
		out.Header.Set("Cookie", c)
	} else {
		out.Header.Del("Cookie")
	}
}

// modifyResponse keeps the app's response to itself: sandboxed (CSP), its
// cookies its own, nothing that acts on the whole origin.
func (e *preview) modifyResponse(res *http.Response) error {
	h := res.Header
	securityHeaders(h)
	h.Del("Clear-Site-Data") // would clear every preview's cookies, the origin's storage
	h.Del("Alt-Svc")         // would send the whole origin's requests elsewhere
	if sc := h.Values("Set-Cookie"); len(sc) > 0 {
		h.Del("Set-Cookie")
		prefix := previewPrefix + e.cap
		if info, ok := res.Request.Context().Value(previewReqKey{}).(*previewReq); ok {
			prefix = info.site.path + prefix
		}
		for _, c := range sc {
			if c = scopeCookie(c, e.cookieTag(), prefix); c != "" {
				h.Add("Set-Cookie", c)
			}
		}
	}
	// The page's requests to its own app come from an opaque origin
	// (Origin: null): let it read the answers, as it could at its own
	// origin, unless the app says otherwise. Only what holds the URL can
	// ask, and that can read it anyway.
	if res.Request.Header.Get("Origin") == "null" && h.Get("Access-Control-Allow-Origin") == "" {
		h.Set("Access-Control-Allow-Origin", "null")
		h.Add("Vary", "Origin")
	}
	return nil
}

// proxyError answers a request the app could not: 404 once the box has
// ended (the preview with it), 502 while nothing listens. The answer never
// carries the error's text (it may name what the app must not tell).
func (e *preview) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	var tooLarge *http.MaxBytesError
	switch {
	case errors.Is(err, sandbox.ErrBoxGone):
		e.p.remove(e)
		previewNotFound(w)
	case errors.As(err, &tooLarge):
		previewError(w, http.StatusRequestEntityTooLarge, "request body too large")
	case errors.Is(err, sandbox.ErrPortRefused):
		previewError(w, http.StatusBadGateway, fmt.Sprintf("nothing listens on port %d in the sandbox", e.key.port))
	case e.ctx.Err() != nil:
		previewNotFound(w) // closed meanwhile
	default:
		if r.Context().Err() == nil {
			e.p.logger.Debug("preview: port not reached", "thread", e.key.thread, "port", e.key.port, "err", err)
		}
		previewError(w, http.StatusBadGateway, fmt.Sprintf("port %d in the sandbox cannot be reached", e.key.port))
	}
}

// securityHeaders go on every answer of a preview route, the app's and
// ours: its page runs sandboxed, at an opaque origin.
func securityHeaders(h http.Header) {
	h.Add("Content-Security-Policy", previewCSP)
}

func previewError(w http.ResponseWriter, code int, msg string) {
	securityHeaders(w.Header())
	w.Header().Set("Cache-Control", "no-store")
	http.Error(w, msg, code)
}

func previewNotFound(w http.ResponseWriter) {
	previewError(w, http.StatusNotFound, "no such preview: closed, its sandbox ended, or never made")
}

// cookieTag prefixes the names of the preview's cookies in the browser. It
// is derived from the capability and does not give it away.
func (e *preview) cookieTag() string {
	sum := sha256.Sum256([]byte("cookie:" + e.cap))
	return "sbx" + hex.EncodeToString(sum[:6]) + "_"
}

// ownCookies are the preview's cookies of Cookie headers, under their own
// names; the others (another preview's, another app's of the host) are
// dropped.
func ownCookies(headers []string, tag string) string {
	var own []string
	for _, h := range headers {
		for c := range strings.SplitSeq(h, ";") {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(c), tag); ok && rest != "" && rest[0] != '=' {
				own = append(own, rest)
			}
		}
	}
	return strings.Join(own, "; ")
}

// scopeCookie makes a Set-Cookie of the app the preview's: its name
// tagged, its path under the preview's (prefix), no Domain (the host's
// only). "" drops it (no name).
func scopeCookie(setCookie, tag, prefix string) string {
	parts := strings.Split(setCookie, ";")
	name, value, ok := strings.Cut(strings.TrimSpace(parts[0]), "=")
	if !ok || strings.TrimSpace(name) == "" {
		return ""
	}
	out := []string{tag + strings.TrimSpace(name) + "=" + value}
	path := false
	for _, a := range parts[1:] {
		a = strings.TrimSpace(a)
		k, v, _ := strings.Cut(a, "=")
		switch strings.ToLower(strings.TrimSpace(k)) {
		case "domain", "":
			continue
		case "path":
			v = strings.TrimSpace(v)
			if !strings.HasPrefix(v, "/") {
				v = "/"
			}
			a, path = "Path="+prefix+v, true
		}
		out = append(out, a)
	}
	if !path {
		out = append(out, "Path="+prefix+"/")
	}
	return strings.Join(out, "; ")
}

// loopback is the base URL of the stdio transport's previews: a listener
// on 127.0.0.1 of its own, started on the first expose.
func (p *previews) loopback() (string, error) {
	p.loopMu.Lock()
	defer p.loopMu.Unlock()
	switch p.loopBase {
	case "":
	case "closed":
		return "", errors.New("the server is stopping")
	default:
		return p.loopBase, nil
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("no loopback listener for previews: %w", err)
	}
	p.loop = &http.Server{
		Handler:           http.HandlerFunc(p.serveLoopback),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       30 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ConnContext:       connContext,
		ErrorLog:          log.New(debugWriter{p.logger}, "", 0),
	}
	p.loopDone = make(chan struct{})
	go func() {
		defer close(p.loopDone)
		p.loop.Serve(newLimitListener(ln, loopbackConns, 0, nil))
	}()
	p.loopBase = "http://" + ln.Addr().String()
	p.logger.Info("previews served on a loopback listener", "addr", ln.Addr().String())
	return p.loopBase, nil
}

// serveLoopback serves the loopback listener: /preview/ only.
func (p *previews) serveLoopback(w http.ResponseWriter, r *http.Request) {
	if r.Context().Value(reserveKey{}) != nil {
		w.Header().Set("Connection", "close")
		previewError(w, http.StatusServiceUnavailable, "too many connections")
		return
	}
	if !hostAllowed(r, nil) {
		previewError(w, http.StatusForbidden, fmt.Sprintf("Host %q not allowed", r.Host))
		return
	}
	e, rest := p.find(r)
	if e == nil {
		previewNotFound(w)
		return
	}
	p.serve(w, r, e, rest, siteOf(r, nil), r.Header.Values("Authorization"), nil)
}

// debugWriter logs what net/http and the proxy would print, at debug.
type debugWriter struct{ l *slog.Logger }

func (d debugWriter) Write(b []byte) (int, error) {
	d.l.Debug("previews: " + strings.TrimSpace(string(b)))
	return len(b), nil
}
