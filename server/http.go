package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// drainGrace is how long a shutdown waits, after the last call in flight
// answered, before it closes the sessions' streams.
const drainGrace = 500 * time.Millisecond

// ThreadHeader names the thread of an HTTP session.
const ThreadHeader = "X-Thread-ID"

// ServeHTTP serves Streamable HTTP at /mcp, SSE at /sse and /message,
// /healthz and expose_port's previews (/preview/), on ln, with the
// settings the server was made with (Config.HTTP), until ctx is
// cancelled; then it stops taking new sessions, lets calls in flight
// finish (up to DrainTimeout, then cancels them), ends the previews'
// streams, closes every session and returns.
func (s *Server) ServeHTTP(ctx context.Context, ln net.Listener) error {
	h := s.http
	if h == nil {
		return errors.New("server: ServeHTTP needs Config.HTTP")
	}
	t := s.newTransports()
	defer t.endListens()
	if s.stateless {
		// Stateless requests' leases end after the sessions' idle time.
		go s.leases.sweep(ctx, h.SessionIdleTTL, s.sessions.End)
	}
	g := s.newGuard()
	defer g.endPreviews()
	ll := newLimitListener(ln, h.MaxConnections, h.MaxUnauthenticatedConnections, g.validToken)
	ll.shareAmong(len(h.tokens))
	srv := &http.Server{
		Handler:           g.admit(ll, s.routes(g, t)),
		ReadHeaderTimeout: h.HeaderTimeout,
		IdleTimeout:       h.IdleTimeout,
		MaxHeaderBytes:    64 << 10,
		ConnContext:       connContext,
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ll) }()
	s.cfg.Logger.Info("serving MCP over HTTP", "addr", ln.Addr().String(), "streamable", "/mcp", "sse", "/sse", "auth", len(h.tokens) > 0)
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	s.drain(g, t, srv)
	return nil
}

// transports are mcp-go's handlers that the HTTP server routes to.
type transports struct {
	streamable *mcpserver.StreamableHTTPServer
	// pinned is the session-bearing revisions alone (stateless only): it
	// answers the discovery of a modern client that names no thread.
	pinned *mcpserver.StreamableHTTPServer
	sse    *mcpserver.SSEServer
	// listens ends the stateless listen streams, at shutdown once the
	// calls are done.
	listens    context.Context
	endListens context.CancelFunc
	srv        *Server // serves the tasks extension's requests (tasks.go)
}

func (s *Server) newTransports() *transports {
	t := &transports{srv: s}
	t.listens, t.endListens = context.WithCancel(context.Background())
	opts := []mcpserver.StreamableHTTPOption{
		mcpserver.WithEndpointPath("/mcp"),
		mcpserver.WithStateful(true),
		mcpserver.WithSessionIdleTTL(s.http.SessionIdleTTL),
		mcpserver.WithHeartbeatInterval(30 * time.Second),
		mcpserver.WithDisableLocalhostProtection(true), // the guard checks Host, with AllowedHosts
		mcpserver.WithHTTPContextFunc(func(ctx context.Context, r *http.Request) context.Context {
			return context.WithValue(ctx, httpRequestCtxKey{}, r.Context())
		}),
	}
	if !s.stateless {
		// Only the session-bearing revisions: a modern client negotiates
		// one. The stateless revision has no session: each request names
		// its thread (leases.go), or gets a tool error.
		opts = append(opts, mcpserver.WithStreamableHTTPProtocolVersions(mcp.LegacyProtocolVersions()...))
	}
	t.streamable = mcpserver.NewStreamableHTTPServer(s.mcp, opts...)
	if s.stateless {
		t.pinned = mcpserver.NewStreamableHTTPServer(s.mcp,
			mcpserver.WithEndpointPath("/mcp"),
			mcpserver.WithDisableLocalhostProtection(true),
			mcpserver.WithStreamableHTTPProtocolVersions(mcp.LegacyProtocolVersions()...),
		)
	}
	t.sse = mcpserver.NewSSEServer(s.mcp,
		mcpserver.WithSSEEndpoint("/sse"),
		mcpserver.WithMessageEndpoint("/message"),
		mcpserver.WithKeepAlive(true),
		mcpserver.WithKeepAliveInterval(30*time.Second),
		mcpserver.WithSSEDisableLocalhostProtection(true),
	)
	return t
}

// mcp is the handler of /mcp: with the stateless revision served, each
// request goes where its revision is served (routeByEra).
func (t *transports) mcp() http.Handler {
	if t.pinned == nil {
		return t.streamable
	}
	return http.HandlerFunc(t.routeByEra)
}

// routeByEra routes a request of /mcp by the revision it speaks. A modern
// client that names no thread is told, by the pinned transport, that only
// the session-bearing revisions are served: it falls back to initialize
// and gets a session with its anonymous thread (SPEC §10), where the
// stateless revision would leave it no thread at all. Only its discover
// goes there, refused before any session is made; everything else, legacy
// sessions included, lives in the first.
func (t *transports) routeByEra(w http.ResponseWriter, r *http.Request) {
	if threadlessDiscover(r) {
		t.pinned.ServeHTTP(w, r)
		return
	}
	if modernPost(r) {
		// Every 2026-07-28 notification is taken and dropped, as its body
		// says (mcp-go checks Mcp-Method against the body for requests
		// only). mcp-go keys a stateless request by its JSON-RPC id alone,
		// so a notifications/cancelled would end any client's request of
		// that id (a listen stream; calls ignore it, see handler); a
		// client needs to send none: on 2026-07-28 HTTP a request ends
		// when its stream closes.
		notification, err := notificationBody(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if notification {
			w.WriteHeader(http.StatusAccepted)
			return
		}
		// The tasks extension (tasks.go), before mcp-go: its requests are
		// ours, and a tools/call's answer may be a task.
		switch method := r.Header.Get(mcp.HeaderMethod); {
		case isTaskMethod(method):
			t.srv.serveTaskHTTP(w, r)
			return
		case method == string(mcp.MethodToolsCall):
			ctx, ans := withTaskAnswer(r.Context())
			r, w = r.WithContext(ctx), &taskWriter{ResponseWriter: w, ans: ans}
		}
	}
	if listenPost(r) {
		// A subscriptions/listen stream lasts until its client goes, or
		// the server does.
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		defer context.AfterFunc(t.listens, cancel)()
		r = r.WithContext(ctx)
	}
	t.streamable.ServeHTTP(w, r)
}

// routes are the server's paths: /healthz, and the transports behind the
// guard, each saying which of its requests may make a session.
func (s *Server) routes(g *httpGuard, t *transports) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", g.healthz)
	mux.Handle("/mcp", g.wrap(t.mcp(), func(r *http.Request) bool {
		// A stateless request makes no session: the calls' caps bound it.
		// A stateless listen stream is held open as a session's stream is:
		// it counts as one while it lasts.
		return r.Method == http.MethodPost && r.Header.Get(mcpserver.HeaderKeySessionID) == "" && (!modernPost(r) || listenPost(r))
	}, false))
	mux.Handle("/sse", g.wrap(t.sse.SSEHandler(), func(r *http.Request) bool { return r.Method == http.MethodGet }, false))
	mux.Handle("/message", g.wrap(t.sse.MessageHandler(), func(*http.Request) bool { return false }, true))
	return mux
}

// drain shuts the HTTP server down: no new sessions, the calls in flight
// finish (up to DrainTimeout, then they are cancelled), their clients get
// a moment to take the last results in, then every session's stream and
// the server close.
func (s *Server) drain(g *httpGuard, t *transports, srv *http.Server) {
	s.cfg.Logger.Info("shutting down: no new sessions, waiting for calls in flight", "calls", s.inflight.Load())
	g.draining.Store(true)
	// A call is done when its response is written, not when its handler
	// returns: wait for the requests that carry calls (POSTs) too.
	busy := func() bool { return s.inflight.Load() > 0 || g.posts.Load() > 0 }
	hadCalls := busy()
	waitWhile(busy, s.http.DrainTimeout)
	if busy() {
		s.cfg.Logger.Warn("cancelling calls still running", "calls", s.inflight.Load())
		s.stopAll()
		waitWhile(busy, 5*time.Second)
	}
	if hadCalls {
		// The last results are written; give their clients a moment to
		// take them in before their sessions' streams close under them.
		time.Sleep(drainGrace)
	}
	g.endPreviews() // their streams (websockets) are the server's no more
	t.sse.CloseSessions()
	t.endListens()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	t.streamable.Shutdown(ctx)
	if err := srv.Shutdown(ctx); err != nil {
		srv.Close()
	}
}

// waitWhile polls cond until it is false or d has passed.
func waitWhile(cond func() bool, d time.Duration) {
	for end := time.Now().Add(d); cond() && time.Now().Before(end); {
		time.Sleep(20 * time.Millisecond)
	}
}

// tokenNamespace is the directory that keeps the threads of one token
// apart from the same thread ids of another token (see sandbox.ValidThreadKey).
func tokenNamespace(token string) string {
	sum := sha256.Sum256([]byte(token))
	return "@" + hex.EncodeToString(sum[:8])
}

// credentialKey marks a request's context with the credential it came
// with, so the session it creates is bound to it.
type credentialKey struct{}

// credential names the tenant of a request (SPEC §16): its token's hash
// when tokens are configured (the token was checked), else "" (one tenant).
func credential(h http.Header, tokens bool) string {
	if !tokens {
		return ""
	}
	sum := sha256.Sum256([]byte(bearer(h)))
	return hex.EncodeToString(sum[:])
}

// bearer is the token of an "Authorization: Bearer" header.
func bearer(h http.Header) string {
	v := h.Get("Authorization")
	if len(v) > 7 && strings.EqualFold(v[:7], "bearer ") {
		return strings.TrimSpace(v[7:])
	}
	return ""
}

// httpGuard is what stands before the MCP handlers: the connection caps
// and the token (admit), the Origin, Host and thread header checks, the
// session caps and the body's bounds (wrap), and no new sessions while
// draining.
type httpGuard struct {
	*httpSettings
	srv      *Server
	draining atomic.Bool
	posts    atomic.Int64 // POST requests being served (they carry the calls)
	bodies   *fairBudget  // bytes of request bodies in flight
	// previews ends, when cancelled (shutdown), the preview requests this
	// server serves: a websocket is hijacked, and no Shutdown waits for it
	// or closes it.
	previews    context.Context
	endPreviews context.CancelFunc
	public      *previewSite // http.public_url, if set
}

func (s *Server) newGuard() *httpGuard {
	g := &httpGuard{httpSettings: s.http, srv: s, bodies: newFairBudget(s.http.MaxBodyBytesInFlight, len(s.http.tokens))}
	g.previews, g.endPreviews = context.WithCancel(context.Background())
	g.public = publicSite(s.http.PublicURL)
	return g
}

// healthz answers ok while the server serves.
func (g *httpGuard) healthz(w http.ResponseWriter, r *http.Request) {
	if g.draining.Load() {
		http.Error(w, "shutting down", http.StatusServiceUnavailable)
		return
	}
	io.WriteString(w, "ok\n")
}

// admit is every request's first handler: a connection past the cap gets
// /healthz only; with tokens, the request's token is checked once
// (authenticate); a body must come within BodyTimeout.
func (g *httpGuard) admit(ll *limitListener, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Context().Value(reserveKey{}) != nil {
			// A connection beyond the cap: the health check only.
			w.Header().Set("Connection", "close")
			if r.URL.Path == "/healthz" {
				g.healthz(w, r)
				return
			}
			refuse(w, r, http.StatusServiceUnavailable, "too many connections")
			return
		}
		if strings.HasPrefix(r.URL.Path, previewPrefix) {
			g.preview(w, r, ll)
			return
		}
		if len(g.tokens) > 0 {
			var ok bool
			if r, ok = g.authenticate(w, r, ll); !ok {
				return
			}
		}
		if r.ContentLength != 0 {
			// The body comes within BodyTimeout or the connection goes
			// (the guard lifts the deadline once it has the body). No
			// ReadTimeout: it would cut long responses, SSE streams and
			// long calls, which read nothing while they write.
			http.NewResponseController(w).SetReadDeadline(time.Now().Add(g.BodyTimeout))
		}
		next.ServeHTTP(w, r)
	})
}

// authenticate checks the request's token, once: the answer rides its
// context to the guard (checkedAuthorized). A connection whose request
// shows a valid token leaves the unauthenticated share and takes its
// token's (or is refused when that share is full); one whose request does
// not is answered and closed (no keep-alive holds a slot).
func (g *httpGuard) authenticate(w http.ResponseWriter, r *http.Request, ll *limitListener) (_ *http.Request, ok bool) {
	valid := g.authorized(r)
	r = r.WithContext(context.WithValue(r.Context(), authKey{}, valid))
	if !valid {
		w.Header().Set("Connection", "close")
		return r, true
	}
	if lc, isLimited := r.Context().Value(connKey{}).(*limitedConn); isLimited {
		lc.authenticated()
		if ll.perToken != nil && !ll.perToken.claim(lc, credential(r.Header, true)) {
			// One token holds its share of the connections: this one
			// goes, the others' slots stay theirs.
			w.Header().Set("Connection", "close")
			refuse(w, r, http.StatusServiceUnavailable, "too many connections for this token")
			return r, false
		}
	}
	return r, true
}

// thread is the thread of a session's request (threadResolver). A thread
// id is the first configured token's own, at its plain place
// (threads/<id>); any other token gets the same id in a directory level of
// its own, which no thread id can name. The order of the configuration,
// not of first use, decides: it is the same on every replica, with no
// state to share. With one token (the usual case) every thread is where
// SPEC's layout puts it. The token was checked before this is called.
func (g *httpGuard) thread(session string, header http.Header) ThreadRef {
	id := strings.TrimSpace(header.Get(ThreadHeader))
	anonymous := id == ""
	if anonymous {
		id = session
	}
	ref := ThreadRef{ID: id, Key: id, Anonymous: anonymous, Tenant: credential(header, len(g.tokens) > 0)}
	if len(g.tokens) > 1 && sha256.Sum256([]byte(bearer(header))) != g.tokens[0] {
		ref.Key = tokenNamespace(bearer(header)) + "/" + id
	}
	return ref
}

// wrap guards a transport's handler. newSession says which requests may
// make a session; detached that the handler answers before the call it
// carries is done (SSE's message endpoint answers 202 and runs the call
// on).
func (g *httpGuard) wrap(next http.Handler, newSession func(*http.Request) bool, detached bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !g.check(w, r) {
			return
		}
		// A session belongs to the credential that made it: another token
		// naming its id finds nothing.
		cred := credential(r.Header, len(g.tokens) > 0)
		if newSession(r) {
			res := g.reserveSession(w, r, cred)
			if res == nil {
				return
			}
			defer res.release()
			r = r.WithContext(context.WithValue(r.Context(), reservationKey{}, res))
		}
		if !g.ownsSession(r, cred) {
			refuse(w, r, http.StatusNotFound, "session not found")
			return
		}
		ctx := context.WithValue(r.Context(), credentialKey{}, cred)
		ctx = context.WithValue(ctx, previewBaseKey{}, siteOf(r, g.public).base())
		r = r.WithContext(withThreads(ctx, g.thread))
		if r.Method == http.MethodPost && !listenPost(r) {
			// A listen stream carries no call: shutdown does not wait for it.
			g.posts.Add(1)
			defer g.posts.Add(-1)
		}
		if r.Body != nil && r.Method == http.MethodPost {
			var release func()
			if r, release = g.holdBody(w, r, cred, detached); release == nil {
				return
			}
			defer release()
		}
		next.ServeHTTP(w, r)
	})
}

// preview serves a request of /preview/ (previews.go): no bearer token, the
// capability in its path is the credential (a browser opens it), within
// the connection caps — a connection that names a live preview counts as
// the preview's token's, like one that shows that token; any other, as one
// without a token. Its body is bounded as a call's is.
func (g *httpGuard) preview(w http.ResponseWriter, r *http.Request, ll *limitListener) {
	p := g.srv.previews
	e, rest := p.find(r)
	if len(g.tokens) > 0 {
		lc, _ := r.Context().Value(connKey{}).(*limitedConn)
		if e == nil || lc == nil {
			w.Header().Set("Connection", "close")
		} else {
			lc.authenticated()
			if ll.perToken != nil && !ll.perToken.claim(lc, e.tenant) {
				w.Header().Set("Connection", "close")
				refuse(w, r, http.StatusServiceUnavailable, "too many connections for this token")
				return
			}
		}
	}
	if !hostAllowed(r, g.AllowedHosts) {
		refuse(w, r, http.StatusForbidden, fmt.Sprintf("Host %q not allowed: add it to http.allowed_hosts", r.Host))
		return
	}
	if e == nil {
		previewNotFound(w)
		return
	}
	if r.ContentLength > g.MaxBodyBytes {
		securityHeaders(w.Header())
		refuse(w, r, http.StatusRequestEntityTooLarge, "request body too large")
		return
	}
	if r.Body != nil && r.ContentLength != 0 {
		// As for a call: the body within BodyTimeout, then no deadline.
		rc := http.NewResponseController(w)
		rc.SetReadDeadline(time.Now().Add(g.BodyTimeout))
		r.Body = &deadlineBody{ReadCloser: http.MaxBytesReader(w, r.Body, g.MaxBodyBytes), rc: rc}
	}
	p.serve(w, r, e, rest, siteOf(r, g.public), g.appAuthorization(r.Header), g.previews)
}

// check refuses a request from an Origin or to a Host not allowed, without
// a valid token, or naming an invalid thread.
func (g *httpGuard) check(w http.ResponseWriter, r *http.Request) bool {
	if origin := r.Header.Get("Origin"); origin != "" && !originAllowed(origin, g.AllowedOrigins) {
		msg := fmt.Sprintf("Origin %q not allowed: add it to http.allowed_origins", origin)
		if origin == "null" {
			// A sandboxed page (every preview's) or a file: never one.
			msg = `Origin "null" (a sandboxed page, such as a preview's) is never allowed`
		}
		refuse(w, r, http.StatusForbidden, msg)
		return false
	}
	if !hostAllowed(r, g.AllowedHosts) {
		refuse(w, r, http.StatusForbidden, fmt.Sprintf("Host %q not allowed: add it to http.allowed_hosts", r.Host))
		return false
	}
	if len(g.tokens) > 0 && !g.checkedAuthorized(r) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="sandbox-mcp"`)
		refuse(w, r, http.StatusUnauthorized, "unauthorized")
		return false
	}
	if id := r.Header.Get(ThreadHeader); id != "" && !validThreadHeader(id) {
		refuse(w, r, http.StatusBadRequest, "invalid "+ThreadHeader+": want [A-Za-z0-9][A-Za-z0-9._-]{0,127}")
		return false
	}
	return true
}

// reserveSession takes a place for the session the request may make,
// within the caps (in all, and the credential's); nil: refused.
func (g *httpGuard) reserveSession(w http.ResponseWriter, r *http.Request, cred string) *reservation {
	if g.draining.Load() {
		refuse(w, r, http.StatusServiceUnavailable, "shutting down")
		return nil
	}
	res, full := g.srv.sessionN.reserve(cred, g.MaxSessions, g.MaxSessionsPerToken)
	if res == nil {
		refuse(w, r, http.StatusServiceUnavailable, full)
	}
	return res
}

// ownsSession: the session the request names, if any, is the
// credential's.
func (g *httpGuard) ownsSession(r *http.Request, cred string) bool {
	id := r.Header.Get(mcpserver.HeaderKeySessionID)
	if id == "" {
		id = r.URL.Query().Get("sessionId")
	}
	owner, ok := g.srv.owners.Load(id)
	return !ok || id == "" || owner.(string) == cred
}

// holdBody bounds a POST's body: refused past MaxBodyBytes (413), counted
// in the credential's share of the bytes in flight until its call answers
// (503 when there is no room), and read within its deadline. It returns
// the request to serve and what gives the share back; a nil release: the
// request was answered.
func (g *httpGuard) holdBody(w http.ResponseWriter, r *http.Request, cred string, detached bool) (*http.Request, func()) {
	if r.ContentLength > g.MaxBodyBytes {
		refuse(w, r, http.StatusRequestEntityTooLarge, "request body too large")
		return r, nil
	}
	// The body's bytes, and what decoding makes of them, stay in memory
	// until the call answers: the server holds so many at once, and a
	// request waits briefly for room or is turned away.
	weight := r.ContentLength
	if weight < 0 {
		weight = g.MaxBodyBytes // chunked: its size is known once read
	}
	weight = max(weight, 512) // a request costs more than its body
	if !g.bodies.acquire(r.Context(), cred, weight) {
		refuse(w, r, http.StatusServiceUnavailable, "server busy: too many request bytes in flight")
		return r, nil
	}
	hold := &bodyHold{b: g.bodies, cred: cred, n: weight, refs: 1}
	release := hold.unref
	if detached {
		release = func() { time.AfterFunc(sseCallGrace, hold.unref) }
	}
	r = r.WithContext(context.WithValue(r.Context(), bodyHoldKey{}, hold))
	rc := http.NewResponseController(w)
	if r.ContentLength >= 0 {
		// With a length (net/http reads no more), the body goes to the
		// handler as it comes: no copy of ours. Its deadline is lifted
		// once it is read, before the call runs, or the server's watch for
		// a client gone would cut the call.
		r.Body = &deadlineBody{ReadCloser: r.Body, rc: rc}
		return r, release
	}
	// Without a length, read it here to answer 413 past the cap.
	body, err := io.ReadAll(io.LimitReader(r.Body, g.MaxBodyBytes+1))
	if err != nil {
		release()
		refuse(w, r, http.StatusBadRequest, "cannot read body")
		return r, nil
	}
	if int64(len(body)) > g.MaxBodyBytes {
		release()
		refuse(w, r, http.StatusRequestEntityTooLarge, "request body too large")
		return r, nil
	}
	r.Body.Close()
	rc.SetReadDeadline(time.Time{})
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	return r, release
}

// authorized compares the request's token with every configured token in
// constant time (hashes, so lengths do not leak either).
func (g *httpGuard) authorized(r *http.Request) bool { return g.validToken(r.Header) }

// authKey holds, in a request's context, whether its token was found valid
// (admit checks it for the connection caps).
type authKey struct{}

// checkedAuthorized is authorized, from the request's context when the
// token was checked already.
func (g *httpGuard) checkedAuthorized(r *http.Request) bool {
	if ok, checked := r.Context().Value(authKey{}).(bool); checked {
		return ok
	}
	return g.authorized(r)
}

// validToken: the header's bearer token is a configured one.
func (g *httpGuard) validToken(h http.Header) bool {
	tok := bearer(h)
	if tok == "" {
		return false
	}
	sum := sha256.Sum256([]byte(tok))
	ok := 0
	for _, t := range g.tokens {
		ok |= subtle.ConstantTimeCompare(sum[:], t[:])
	}
	return ok == 1
}

// appAuthorization is what a preview's app gets of the request's
// Authorization: every value but the server's own tokens, wherever they
// stand (a client may send its own first and the server's after it).
func (g *httpGuard) appAuthorization(h http.Header) []string {
	var out []string
	for _, v := range h.Values("Authorization") {
		if !g.validToken(http.Header{"Authorization": {v}}) {
			out = append(out, v)
		}
	}
	return out
}

func validThreadHeader(id string) bool {
	return sandbox.ValidThreadID(id) == nil
}

// originAllowed: localhost origins (any port, http or https) and the
// configured ones pass. "null" and malformed origins do not. "null" never
// does, whatever is configured ("*" included): it is the origin of every
// preview's pages (their CSP sandbox), served from this server's own
// origin, which must not reach /mcp with the browser's credentials.
func originAllowed(origin string, allowed []string) bool {
	norm := strings.TrimSuffix(strings.ToLower(origin), "/")
	if strings.TrimSpace(norm) == "null" {
		return false
	}
	for _, a := range allowed {
		if a == "*" || strings.TrimSuffix(strings.ToLower(a), "/") == norm {
			return true
		}
	}
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return false
	}
	switch h := u.Hostname(); h {
	case "localhost", "127.0.0.1", "::1":
		return true
	default:
		ip := net.ParseIP(h)
		return ip != nil && ip.IsLoopback()
	}
}

// hostAllowed protects against DNS rebinding: a request that came to a
// loopback address must name a localhost Host or an allowed one. (A page on
// evil.example whose name now points at 127.0.0.1 sends Host: evil.example.)
// Requests to other addresses are not checked: rebinding reaches loopback.
func hostAllowed(r *http.Request, allowed []string) bool {
	local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok || !isLoopbackHost(local.String()) || isLoopbackHost(r.Host) {
		return true
	}
	host := strings.ToLower(r.Host)
	name := host
	if h, _, err := net.SplitHostPort(host); err == nil {
		name = h
	}
	for _, a := range allowed {
		if a = strings.ToLower(a); a == host || a == name {
			return true
		}
	}
	return false
}

// isLoopbackHost: localhost, or a loopback IP, with or without a port.
func isLoopbackHost(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = strings.Trim(addr, "[]")
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// IsLoopback reports whether addr (host:port) binds loopback only; ":port"
// binds every interface.
func IsLoopback(addr string) (bool, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false, fmt.Errorf("address %q: %w", addr, err)
	}
	if host == "localhost" {
		return true, nil
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback(), nil
}

// modernPost: a POST of the stateless revision (2026-07-28 or later), as
// its Mcp-Protocol-Version header says (mcp-go refuses one whose body's
// _meta says otherwise).
func modernPost(r *http.Request) bool {
	return r.Method == http.MethodPost && mcp.IsModernProtocol(r.Header.Get(mcp.HeaderProtocolVersion))
}

// threadParamHeader is the thread argument mirrored into a header
// (x-mcp-header: Thread).
const threadParamHeader = "Mcp-Param-Thread"

// threadlessDiscover: a modern client's server/discover that names no
// thread, as its headers say (a client that lies about them is only told
// the legacy revisions).
func threadlessDiscover(r *http.Request) bool {
	return modernPost(r) && r.Header.Get(mcp.HeaderMethod) == string(mcp.MethodServerDiscover) &&
		strings.TrimSpace(r.Header.Get(ThreadHeader)) == "" && strings.TrimSpace(r.Header.Get(threadParamHeader)) == ""
}

// listenPost: a stateless subscriptions/listen request, as its headers say
// (mcp-go refuses one whose body says otherwise), whose stream stays open.
func listenPost(r *http.Request) bool {
	return modernPost(r) && r.Header.Get(mcp.HeaderMethod) == string(mcp.MethodSubscriptionsListen)
}

// notificationBody reads r's body (the guard has bounded it) and says
// whether it is a notification, decided as mcp-go decides it (no id, or
// a null one, with encoding/json's rules: any case of "id", the last one
// given); r's body is then the same bytes again, which it lets go once
// read. A batch is refused: 2026-07-28 has none.
func notificationBody(r *http.Request) (bool, error) {
	body, err := io.ReadAll(r.Body)
	r.Body.Close()
	if err != nil {
		return false, errors.New("cannot read body")
	}
	r.Body = &drainedBody{b: body}
	var m struct {
		ID any `json:"id"`
	}
	if err := json.Unmarshal(body, &m); err != nil {
		if t := bytes.TrimLeft(body, " \t\r\n"); len(t) > 0 && t[0] == '[' {
			return false, errors.New("a JSON-RPC batch: MCP 2026-07-28 takes one message a request")
		}
		return false, nil // mcp-go answers the parse error
	}
	return m.ID == nil, nil
}

// drainedBody reads b once, and drops it when read.
type drainedBody struct{ b []byte }

func (d *drainedBody) Read(p []byte) (int, error) {
	if len(d.b) == 0 {
		d.b = nil
		return 0, io.EOF
	}
	n := copy(p, d.b)
	d.b = d.b[n:]
	return n, nil
}

func (d *drainedBody) Close() error { d.b = nil; return nil }
