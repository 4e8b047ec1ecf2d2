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

// HTTPConfig configures the HTTP transports.
type HTTPConfig struct {
	AuthTokens     []string // bearer tokens; none: no auth (loopback only, checked by the caller)
	AllowedOrigins []string // Origins allowed besides localhost ones
	// AllowedHosts are Host headers accepted, besides localhost ones, on
	// connections to a loopback address (DNS rebinding protection): the
	// names a reverse proxy on the same host forwards with (host or
	// host:port).
	AllowedHosts   []string
	MaxBodyBytes   int64         // request body cap (default 10 MiB)
	SessionIdleTTL time.Duration // Streamable HTTP sessions idle this long end (default 30 min)
	MaxSessions    int           // sessions open at once; more get 503 (default 1000)
	// MaxSessionsPerToken caps the sessions of one token, so that one
	// token cannot take every session from another (default: MaxSessions
	// shared out evenly among the tokens). Without tokens only MaxSessions
	// applies: every client is the same one.
	MaxSessionsPerToken int
	DrainTimeout        time.Duration // on shutdown, how long calls in flight may finish (default 10 s)

	// MaxConnections caps the connections open at once (default 2048, and
	// below the open-file limit); a few more are let in for /healthz only.
	// A session's stream (SSE, or Streamable HTTP's GET) holds one while the
	// session lives, so the cap is above MaxSessions by default.
	MaxConnections int
	// MaxUnauthenticatedConnections caps, when tokens are configured, the
	// connections that have not shown a valid token (default: a sixteenth
	// of MaxConnections, at least 8): past it the oldest of them is closed,
	// and each is closed once answered (SPEC §16).
	MaxUnauthenticatedConnections int
	HeaderTimeout                 time.Duration // to read a request's headers (default 10 s)
	BodyTimeout                   time.Duration // to read a request's body (default 15 s)
	IdleTimeout                   time.Duration // a kept-alive connection without a request is closed (default 30 s)

	// MaxBodyBytesInFlight caps the request bytes held at once, from
	// reading a body until its call answers (default 64 MiB, at least
	// MaxBodyBytes); MaxCalls the tool calls running at once (default 64).
	// With several tokens each token gets an even share of both.
	// Beyond them a request waits briefly, then gets 503 with Retry-After
	// (a call over SSE, already answered 202, gets a "server busy" error).
	MaxBodyBytesInFlight int64
	MaxCalls             int

	// ThreadsPerToken caps the threads with a live sandbox per token
	// (without tokens: in all), sessions and stateless leases together
	// (limits.threads_per_token, SPEC §16); 0: only the open-file budget's
	// (ServeHTTP fits every token's cap in the open-file limit). Past it a new
	// thread's call is a tool error, once no idle lease of the token can
	// make room.
	ThreadsPerToken int

	// KeepAnonymousThreads keeps the files of a session without
	// X-Thread-ID when it ends (by default they are removed: no one can
	// name that thread again).
	KeepAnonymousThreads bool
}

// Defaults of HTTPConfig.
const (
	DefaultMaxConnections       = 2048
	DefaultHeaderTimeout        = 10 * time.Second
	DefaultBodyTimeout          = 15 * time.Second
	DefaultIdleTimeout          = 30 * time.Second
	DefaultMaxBodyBytesInFlight = 64 << 20
	DefaultMaxCalls             = 64
)

// threadFiles is what the budget of open files counts for a live thread
// (measured: about 10 on the local provider with bubblewrap; fewer on
// docker and kubernetes).
const threadFiles = 16

// drainGrace is how long a shutdown waits, after the last call in flight
// answered, before it closes the sessions' streams.
const drainGrace = 500 * time.Millisecond

// ThreadHeader names the thread of an HTTP session.
const ThreadHeader = "X-Thread-ID"

// ServeHTTP serves Streamable HTTP at /mcp, SSE at /sse and /message, and
// /healthz, on ln, until ctx is cancelled; then it stops taking new
// sessions, lets calls in flight finish (up to DrainTimeout, then cancels
// them), closes every session and returns.
func (s *Server) ServeHTTP(ctx context.Context, cfg HTTPConfig, ln net.Listener) error {
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 10 << 20
	}
	if cfg.SessionIdleTTL <= 0 {
		cfg.SessionIdleTTL = 30 * time.Minute
	}
	if cfg.DrainTimeout <= 0 {
		cfg.DrainTimeout = 10 * time.Second
	}
	if cfg.MaxSessions <= 0 {
		cfg.MaxSessions = 1000
	}
	if cfg.MaxConnections <= 0 {
		cfg.MaxConnections = DefaultMaxConnections
	}
	if cfg.HeaderTimeout <= 0 {
		cfg.HeaderTimeout = DefaultHeaderTimeout
	}
	if cfg.BodyTimeout <= 0 {
		cfg.BodyTimeout = DefaultBodyTimeout
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.MaxBodyBytesInFlight <= 0 {
		cfg.MaxBodyBytesInFlight = DefaultMaxBodyBytesInFlight
	}
	if cfg.MaxCalls <= 0 {
		cfg.MaxCalls = DefaultMaxCalls
	}
	tokens := make([][32]byte, 0, len(cfg.AuthTokens))
	for _, t := range cfg.AuthTokens {
		if t != "" {
			tokens = append(tokens, sha256.Sum256([]byte(t)))
		}
	}
	s.budgetFiles(&cfg, max(1, len(tokens)))
	// Every token's share takes a body of the largest size.
	cfg.MaxBodyBytesInFlight = max(cfg.MaxBodyBytesInFlight, cfg.MaxBodyBytes*int64(max(1, len(tokens))))
	switch {
	case len(tokens) == 0:
		cfg.MaxSessionsPerToken = 0
	case cfg.MaxSessionsPerToken <= 0:
		cfg.MaxSessionsPerToken = max(1, cfg.MaxSessions/len(tokens))
	}
	s.sessions.removeAnonymous = !cfg.KeepAnonymousThreads
	s.sessions.threadsPerTenant = cfg.ThreadsPerToken
	s.sessions.reclaim = s.reclaimLease
	threads := func(session string, header http.Header) ThreadRef {
		id := strings.TrimSpace(header.Get(ThreadHeader))
		anonymous := id == ""
		if anonymous {
			id = session
		}
		ref := ThreadRef{ID: id, Key: id, Anonymous: anonymous, Tenant: credential(header, len(tokens) > 0)}
		// A thread id is the first configured token's own, at its plain
		// place (threads/<id>); any other token gets the same id in a
		// directory level of its own, which no thread id can name. The
		// order of the configuration, not of first use, decides: it is the
		// same on every replica, with no state to share. With one token
		// (the usual case) every thread is where SPEC's layout puts it.
		// The token was checked before this is called.
		if len(tokens) > 1 && sha256.Sum256([]byte(bearer(header))) != tokens[0] {
			ref.Key = tokenNamespace(bearer(header)) + "/" + id
		}
		return ref
	}
	streamableOpts := []mcpserver.StreamableHTTPOption{
		mcpserver.WithEndpointPath("/mcp"),
		mcpserver.WithStateful(true),
		mcpserver.WithSessionIdleTTL(cfg.SessionIdleTTL),
		mcpserver.WithHeartbeatInterval(30 * time.Second),
		mcpserver.WithDisableLocalhostProtection(true), // the guard checks Host, with AllowedHosts
		mcpserver.WithHTTPContextFunc(func(ctx context.Context, r *http.Request) context.Context {
			return context.WithValue(ctx, httpRequestCtxKey{}, r.Context())
		}),
	}
	if !s.cfg.Stateless {
		// Only the session-bearing revisions: a modern client negotiates
		// one. The stateless revision has no session: each request names
		// its thread (leases.go), or gets a tool error.
		streamableOpts = append(streamableOpts, mcpserver.WithStreamableHTTPProtocolVersions(mcp.LegacyProtocolVersions()...))
	}
	streamable := mcpserver.NewStreamableHTTPServer(s.mcp, streamableOpts...)
	// Ended at shutdown, once the calls are done: the listen streams.
	listenCtx, endListens := context.WithCancel(context.Background())
	defer endListens()
	var mcpHandler http.Handler = streamable
	if s.cfg.Stateless {
		// A modern client that names no thread is told, by a second
		// transport pinned to the session-bearing revisions, that only
		// those are served: it falls back to initialize and gets a session
		// with its anonymous thread (SPEC §10), where the stateless
		// revision would leave it no thread at all. Only its discover goes
		// there, refused before any session is made; everything else,
		// legacy sessions included, lives in the first.
		pinned := mcpserver.NewStreamableHTTPServer(s.mcp,
			mcpserver.WithEndpointPath("/mcp"),
			mcpserver.WithDisableLocalhostProtection(true),
			mcpserver.WithStreamableHTTPProtocolVersions(mcp.LegacyProtocolVersions()...),
		)
		mcpHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if threadlessDiscover(r) {
				pinned.ServeHTTP(w, r)
				return
			}
			if modernPost(r) {
				// Every 2026-07-28 notification is taken and dropped, as its
				// body says (mcp-go checks Mcp-Method against the body for
				// requests only). mcp-go keys a stateless request by its
				// JSON-RPC id alone, so a notifications/cancelled would end
				// any client's request of that id (a listen stream; calls
				// ignore it, see handler); a client needs to send none: on
				// 2026-07-28 HTTP a request ends when its stream closes.
				notification, err := notificationBody(r)
				if err != nil {
					http.Error(w, err.Error(), http.StatusBadRequest)
					return
				}
				if notification {
					w.WriteHeader(http.StatusAccepted)
					return
				}
			}
			if listenPost(r) {
				// A subscriptions/listen stream lasts until its client
				// goes, or the server does.
				ctx, cancel := context.WithCancel(r.Context())
				defer cancel()
				defer context.AfterFunc(listenCtx, cancel)()
				r = r.WithContext(ctx)
			}
			streamable.ServeHTTP(w, r)
		})
	}
	sse := mcpserver.NewSSEServer(s.mcp,
		mcpserver.WithSSEEndpoint("/sse"),
		mcpserver.WithMessageEndpoint("/message"),
		mcpserver.WithKeepAlive(true),
		mcpserver.WithKeepAliveInterval(30*time.Second),
		mcpserver.WithSSEDisableLocalhostProtection(true),
	)

	// Stateless requests' leases end after the sessions' idle time.
	if s.cfg.Stateless {
		go s.leases.sweep(ctx, cfg.SessionIdleTTL, s.sessions.End)
	}
	var draining atomic.Bool
	guard := &httpGuard{cfg: cfg, tokens: tokens, draining: &draining, srv: s, threads: threads, bodies: newFairBudget(cfg.MaxBodyBytesInFlight, len(tokens))}
	s.calls = newFairBudget(int64(cfg.MaxCalls), len(tokens))
	mux := http.NewServeMux()
	healthz := func(w http.ResponseWriter, r *http.Request) {
		if draining.Load() {
			http.Error(w, "shutting down", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ok\n")
	}
	mux.HandleFunc("/healthz", healthz)
	mux.Handle("/mcp", guard.wrap(mcpHandler, func(r *http.Request) bool {
		// A stateless request makes no session: the calls' caps bound it.
		// A stateless listen stream is held open as a session's stream is:
		// it counts as one while it lasts.
		return r.Method == http.MethodPost && r.Header.Get(mcpserver.HeaderKeySessionID) == "" && (!modernPost(r) || listenPost(r))
	}, false))
	mux.Handle("/sse", guard.wrap(sse.SSEHandler(), func(r *http.Request) bool { return r.Method == http.MethodGet }, false))
	mux.Handle("/message", guard.wrap(sse.MessageHandler(), func(*http.Request) bool { return false }, true))

	maxUnauth := 0
	if len(tokens) > 0 {
		if maxUnauth = cfg.MaxUnauthenticatedConnections; maxUnauth <= 0 {
			maxUnauth = max(8, cfg.MaxConnections/16)
		}
		maxUnauth = min(maxUnauth, cfg.MaxConnections)
	}
	ll := newLimitListener(ln, cfg.MaxConnections, maxUnauth, guard.validToken)
	ll.shareAmong(len(tokens))
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Context().Value(reserveKey{}) != nil {
				// A connection beyond the cap: the health check only.
				w.Header().Set("Connection", "close")
				if r.URL.Path == "/healthz" {
					healthz(w, r)
					return
				}
				refuse(w, r, http.StatusServiceUnavailable, "too many connections")
				return
			}
			if len(tokens) > 0 {
				// A connection whose request shows a valid token leaves the
				// unauthenticated share; one whose request does not is
				// answered and closed (no keep-alive holds a slot).
				// The token is checked once a request: the guard reads the
				// answer from the context.
				ok := guard.authorized(r)
				r = r.WithContext(context.WithValue(r.Context(), authKey{}, ok))
				if ok {
					if lc, isLimited := r.Context().Value(connKey{}).(*limitedConn); isLimited {
						lc.authenticated()
						if ll.perToken != nil && !ll.perToken.claim(lc, credential(r.Header, true)) {
							// One token holds its share of the connections:
							// this one goes, the others' slots stay theirs.
							w.Header().Set("Connection", "close")
							refuse(w, r, http.StatusServiceUnavailable, "too many connections for this token")
							return
						}
					}
				} else {
					w.Header().Set("Connection", "close")
				}
			}
			if r.ContentLength != 0 {
				// The body comes within BodyTimeout or the connection goes
				// (the guard lifts the deadline once it has the body). No
				// ReadTimeout: it would cut long responses, SSE streams and
				// long calls, which read nothing while they write.
				http.NewResponseController(w).SetReadDeadline(time.Now().Add(cfg.BodyTimeout))
			}
			mux.ServeHTTP(w, r)
		}),
		ReadHeaderTimeout: cfg.HeaderTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		MaxHeaderBytes:    64 << 10,
		ConnContext:       connContext,
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ll) }()
	s.cfg.Logger.Info("serving MCP over HTTP", "addr", ln.Addr().String(), "streamable", "/mcp", "sse", "/sse", "auth", len(tokens) > 0)

	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	s.cfg.Logger.Info("shutting down: no new sessions, waiting for calls in flight", "calls", s.inflight.Load())
	draining.Store(true)
	// A call is done when its response is written, not when its handler
	// returns: wait for the requests that carry calls (POSTs) too.
	busy := func() bool { return s.inflight.Load() > 0 || guard.posts.Load() > 0 }
	hadCalls := busy()
	deadline := time.Now().Add(cfg.DrainTimeout)
	for busy() && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if busy() {
		s.cfg.Logger.Warn("cancelling calls still running", "calls", s.inflight.Load())
		s.stopAll()
		for end := time.Now().Add(5 * time.Second); busy() && time.Now().Before(end); {
			time.Sleep(20 * time.Millisecond)
		}
	}
	if hadCalls {
		// The last results are written; give their clients a moment to
		// take them in before their sessions' streams close under them.
		time.Sleep(drainGrace)
	}
	sse.CloseSessions()
	endListens()
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	streamable.Shutdown(sctx)
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
	}
	return nil
}

// budgetFiles fits the connections and every tenant's live threads in the
// process's open-file limit (SPEC §16): every connection is a file, every
// live thread holds several (its files' roots, the link to its sandbox),
// and with what else the server opens (the audit log, the files of calls,
// bash's pipes) they stay below the limit, so that neither a flood of
// connections nor one token at its cap of threads starves another token's
// calls of files. Where both do not fit, the connections get at least
// half of what there is and the threads the rest.
func (s *Server) budgetFiles(cfg *HTTPConfig, tenants int) {
	lim := openFileLimit()
	if lim <= 0 {
		return
	}
	avail := max(2, lim-reserveConns-256)
	need := 0
	if cfg.ThreadsPerToken > 0 {
		need = tenants * cfg.ThreadsPerToken * threadFiles
	}
	if cfg.MaxConnections+need > avail {
		conns := min(cfg.MaxConnections, max(avail/2, avail-need))
		if conns < cfg.MaxConnections {
			s.cfg.Logger.Warn("http.max_connections lowered to fit the open-file limit", "max_connections", cfg.MaxConnections, "open_file_limit", lim, "now", conns)
			cfg.MaxConnections = conns
		}
	}
	fit := max(1, (avail-cfg.MaxConnections)/threadFiles/tenants)
	if cfg.ThreadsPerToken == 0 || cfg.ThreadsPerToken > fit {
		s.cfg.Logger.Warn("limits.threads_per_token lowered to fit the open-file limit", "threads_per_token", cfg.ThreadsPerToken, "tokens", tenants, "open_file_limit", lim, "now", fit)
		cfg.ThreadsPerToken = fit
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

// httpGuard is what stands before the MCP handlers: Origin check, bearer
// auth, thread header check, body cap, and no new sessions while draining.
type httpGuard struct {
	cfg      HTTPConfig
	tokens   [][32]byte
	draining *atomic.Bool
	srv      *Server
	threads  threadResolver // the thread of a request (withThreads)
	posts    atomic.Int64   // POST requests being served (they carry the calls)
	bodies   *fairBudget    // bytes of request bodies in flight
}

// detached says the handler answers before the call it carries is done
// (SSE's message endpoint answers 202 and runs the call on).
func (g *httpGuard) wrap(next http.Handler, newSession func(*http.Request) bool, detached bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if origin := r.Header.Get("Origin"); origin != "" && !originAllowed(origin, g.cfg.AllowedOrigins) {
			refuse(w, r, http.StatusForbidden, fmt.Sprintf("Origin %q not allowed: add it to http.allowed_origins", origin))
			return
		}
		if !hostAllowed(r, g.cfg.AllowedHosts) {
			refuse(w, r, http.StatusForbidden, fmt.Sprintf("Host %q not allowed: add it to http.allowed_hosts", r.Host))
			return
		}
		if len(g.tokens) > 0 && !g.checkedAuthorized(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="sandbox-mcp"`)
			refuse(w, r, http.StatusUnauthorized, "unauthorized")
			return
		}
		if id := r.Header.Get(ThreadHeader); id != "" && !validThreadHeader(id) {
			refuse(w, r, http.StatusBadRequest, "invalid "+ThreadHeader+": want [A-Za-z0-9][A-Za-z0-9._-]{0,127}")
			return
		}
		// A session belongs to the credential that made it: another token
		// naming its id finds nothing.
		cred := credential(r.Header, len(g.tokens) > 0)
		if newSession(r) {
			if g.draining.Load() {
				refuse(w, r, http.StatusServiceUnavailable, "shutting down")
				return
			}
			res, full := g.srv.sessionN.reserve(cred, g.cfg.MaxSessions, g.cfg.MaxSessionsPerToken)
			if res == nil {
				refuse(w, r, http.StatusServiceUnavailable, full)
				return
			}
			defer res.release()
			r = r.WithContext(context.WithValue(r.Context(), reservationKey{}, res))
		}
		id := r.Header.Get(mcpserver.HeaderKeySessionID)
		if id == "" {
			id = r.URL.Query().Get("sessionId")
		}
		if owner, ok := g.srv.owners.Load(id); ok && id != "" && owner.(string) != cred {
			refuse(w, r, http.StatusNotFound, "session not found")
			return
		}
		r = r.WithContext(withThreads(context.WithValue(r.Context(), credentialKey{}, cred), g.threads))
		if r.Method == http.MethodPost && !listenPost(r) {
			// A listen stream carries no call: shutdown does not wait for it.
			g.posts.Add(1)
			defer g.posts.Add(-1)
		}
		if r.Body != nil && r.Method == http.MethodPost {
			if r.ContentLength > g.cfg.MaxBodyBytes {
				refuse(w, r, http.StatusRequestEntityTooLarge, "request body too large")
				return
			}
			// The body's bytes, and what decoding makes of them, stay in
			// memory until the call answers: the server holds so many at
			// once, and a request waits briefly for room or is turned away.
			weight := r.ContentLength
			if weight < 0 {
				weight = g.cfg.MaxBodyBytes // chunked: its size is known once read
			}
			weight = max(weight, 512) // a request costs more than its body
			if !g.bodies.acquire(r.Context(), cred, weight) {
				refuse(w, r, http.StatusServiceUnavailable, "server busy: too many request bytes in flight")
				return
			}
			hold := &bodyHold{b: g.bodies, cred: cred, n: weight, refs: 1}
			if detached {
				defer time.AfterFunc(sseCallGrace, hold.unref)
			} else {
				defer hold.unref()
			}
			r = r.WithContext(context.WithValue(r.Context(), bodyHoldKey{}, hold))
			rc := http.NewResponseController(w)
			if r.ContentLength < 0 {
				// Without a length, read it here to answer 413 past the cap.
				body, err := io.ReadAll(io.LimitReader(r.Body, g.cfg.MaxBodyBytes+1))
				if err != nil {
					refuse(w, r, http.StatusBadRequest, "cannot read body")
					return
				}
				if int64(len(body)) > g.cfg.MaxBodyBytes {
					refuse(w, r, http.StatusRequestEntityTooLarge, "request body too large")
					return
				}
				r.Body.Close()
				rc.SetReadDeadline(time.Time{})
				r.Body = io.NopCloser(bytes.NewReader(body))
				r.ContentLength = int64(len(body))
			} else {
				// With a length (net/http reads no more), the body goes to
				// the handler as it comes: no copy of ours. Its deadline is
				// lifted once it is read, before the call runs, or the
				// server's watch for a client gone would cut the call.
				r.Body = &deadlineBody{ReadCloser: r.Body, rc: rc}
			}
		}
		next.ServeHTTP(w, r)
	})
}

// authorized compares the request's token with every configured token in
// constant time (hashes, so lengths do not leak either).
func (g *httpGuard) authorized(r *http.Request) bool { return g.validToken(r.Header) }

// authKey holds, in a request's context, whether its token was found valid
// (the server's first handler checks it for the connection caps).
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

func validThreadHeader(id string) bool {
	return sandbox.ValidThreadID(id) == nil
}

// originAllowed: localhost origins (any port, http or https) and the
// configured ones pass. "null" and malformed origins do not.
func originAllowed(origin string, allowed []string) bool {
	norm := strings.TrimSuffix(strings.ToLower(origin), "/")
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
