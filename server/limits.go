package server

import (
	"bytes"
	"container/list"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"
)

// reserveConns is how many connections beyond MaxConnections are still
// accepted, each for one /healthz request within reserveTimeout: a full
// server still answers its health check, and those connections cost it
// seconds at most.
const (
	reserveConns   = 16
	reserveTimeout = 2 * time.Second
)

// limitListener caps the connections open at once. Beyond the cap it
// accepts a few more (the reserve) that may only ask /healthz, under a hard
// deadline; beyond those it closes new connections at once, so that the
// kernel's queue never holds the health check behind a flood.
type limitListener struct {
	net.Listener
	slots   chan struct{}
	reserve chan struct{}
	// unauth, when tokens are configured, holds the connections that have
	// not yet shown a valid token: a small share of the slots (SPEC §16).
	unauth *unauthConns
	// perToken, with several tokens, caps the connections each token
	// holds: one token's connections never take the slots from another.
	perToken *tokenConns
}

// tokenConns counts the connections of each token (by its hash), each
// counted from its first request with that token until it closes.
type tokenConns struct {
	mu    sync.Mutex
	share int
	per   map[string]int
}

// claim counts c as cred's, and reports false when cred already holds its
// share (the request is then refused and the connection closed).
func (t *tokenConns) claim(c *limitedConn, cred string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if c.cred != "" || c.dropped {
		return true // already counted (for the token that first used it), or closed
	}
	if t.per[cred] >= t.share {
		return false
	}
	t.per[cred]++
	c.cred = cred
	return true
}

// drop gives c's place back.
func (t *tokenConns) drop(c *limitedConn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c.dropped = true // a request still being served on it counts no more
	if c.cred == "" {
		return
	}
	if t.per[c.cred]--; t.per[c.cred] <= 0 {
		delete(t.per, c.cred)
	}
	c.cred = ""
}

// newLimitListener caps ln's connections at max; with maxUnauth > 0, at
// most that many of them may be without a valid token (as valid says) at
// once.
func newLimitListener(ln net.Listener, max, maxUnauth int, valid func(http.Header) bool) *limitListener {
	l := &limitListener{Listener: ln, slots: make(chan struct{}, max), reserve: make(chan struct{}, reserveConns)}
	if maxUnauth > 0 {
		l.unauth = &unauthConns{max: maxUnauth, valid: valid}
	}
	return l
}

// shareAmong gives each of tokens (more than one) an even share of the
// connections that are not the unauthenticated share.
func (l *limitListener) shareAmong(tokens int) {
	if tokens > 1 {
		room := cap(l.slots)
		if l.unauth != nil {
			room -= l.unauth.max
		}
		l.perToken = &tokenConns{share: max(1, room/tokens), per: map[string]int{}}
	}
}

// unauthConns are the connections that have not yet carried a request
// with a valid token, oldest first. Every new connection is one until its
// first request shows a token; past the share, the oldest is closed. A
// client with a token sends it in its first request, a few milliseconds
// after connecting, so a flood of connections that never authenticate
// churns through its own share and leaves the rest of the slots to the
// token holders. A request without a valid token is answered and its
// connection closed (connection: close), so no keep-alive holds a slot.
type unauthConns struct {
	mu    sync.Mutex
	max   int
	list  list.List              // of *limitedConn
	valid func(http.Header) bool // the request's token is a configured one
}

// unauthGrace is how long a new connection may stay in the share before
// the share's cap can close it: long enough for any client to have sent
// its first request (and a token holder's to have left the share), short
// enough that silent connections cost the server moments.
const unauthGrace = 250 * time.Millisecond

// add counts c as unauthenticated, closing the oldest past their grace
// beyond the share.
func (u *unauthConns) add(c *limitedConn) {
	u.mu.Lock()
	c.unauth = u
	c.born = time.Now()
	c.elem = u.list.PushBack(c)
	var evict []*limitedConn
	for u.list.Len() > u.max {
		// The oldest that has sent nothing goes first: a client with a
		// token writes its request as soon as it is connected, so its
		// connection speaks and leaves the share within moments, while a
		// flood of silent connections churns through itself. Without a
		// silent one, the oldest (a request being answered, or trickled
		// byte by byte). None younger than unauthGrace: the share may
		// overflow by the connections of the last moments (the slots bound
		// them, see evictOne).
		e := u.oldest(c.born.Add(-unauthGrace), true)
		if e == nil {
			e = u.oldest(c.born.Add(-unauthGrace), false)
		}
		if e == nil {
			break
		}
		evict = append(evict, u.take(e))
	}
	u.mu.Unlock()
	for _, oc := range evict {
		oc.Close()
	}
}

// oldest is the oldest connection of the share born before t (only a
// silent one, with silent), or nil. u.mu is held.
func (u *unauthConns) oldest(t time.Time, silent bool) *list.Element {
	for e := u.list.Front(); e != nil; e = e.Next() {
		c := e.Value.(*limitedConn)
		if !c.born.Before(t) {
			return nil // the list is in order of birth
		}
		if !silent || !c.spoke.Load() {
			return e
		}
	}
	return nil
}

// take removes e from the share and returns its connection. u.mu is held.
func (u *unauthConns) take(e *list.Element) *limitedConn {
	u.list.Remove(e)
	c := e.Value.(*limitedConn)
	c.elem = nil
	return c
}

// evictOne closes the oldest unauthenticated connection, silent ones
// first, whatever its age, and reports whether there was one: every slot
// is taken, and a new connection (maybe a token holder's) takes its place
// rather than the reserve's.
func (u *unauthConns) evictOne() bool {
	u.mu.Lock()
	e := u.oldest(time.Now().Add(time.Hour), true)
	if e == nil {
		e = u.list.Front()
	}
	if e == nil {
		u.mu.Unlock()
		return false
	}
	c := u.take(e)
	u.mu.Unlock()
	c.Close() // gives its slot back
	return true
}

// tokenWaiting looks, without waiting or taking anything, at what a new
// connection has already sent: a client with a token has usually written
// its request by the time the connection is accepted, and such a
// connection is never counted in the share (a flood of new connections
// could otherwise push it out before its first read).
func (u *unauthConns) tokenWaiting(c net.Conn) bool {
	head := peekWaiting(c, peekMax)
	if len(head) == 0 || u.valid == nil {
		return false
	}
	auth, found, _ := authorizationLine(head)
	return found && u.valid(http.Header{"Authorization": {auth}})
}

// remove takes c out of the share (it authenticated, or closed).
func (u *unauthConns) remove(c *limitedConn) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if c.elem != nil {
		u.list.Remove(c.elem)
		c.elem = nil
	}
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.unauth != nil && len(l.slots) == cap(l.slots) {
			// Every slot is taken: an unauthenticated connection makes room.
			l.unauth.evictOne()
		}
		select {
		case l.slots <- struct{}{}:
			lc := &limitedConn{Conn: c, release: func() { <-l.slots }, tokens: l.perToken}
			if l.unauth != nil && !l.unauth.tokenWaiting(c) {
				l.unauth.add(lc)
			}
			return lc, nil
		default:
		}
		select {
		case l.reserve <- struct{}{}:
			lc := &limitedConn{Conn: c, release: func() { <-l.reserve }, hard: time.Now().Add(reserveTimeout)}
			lc.Conn.SetDeadline(lc.hard)
			return lc, nil
		default:
		}
		c.Close()
	}
}

// limitedConn gives its slot back when closed. A reserve connection (hard
// set) never gets a deadline later than hard.
type limitedConn struct {
	net.Conn
	release func()
	once    sync.Once
	hard    time.Time

	unauth  *unauthConns  // the share it is counted in until it authenticates
	elem    *list.Element // its place there (under unauth.mu); nil: not counted
	spoke   atomic.Bool   // a read returned bytes
	cred    string        // the token it is counted for (under tokens.mu)
	tokens  *tokenConns   // the per-token counts (set at accept, then only read)
	dropped bool          // closed: its token's count was given back (under tokens.mu)
	born    time.Time     // when it was counted in the share
	// What peek read of the first request's headers (Read's goroutine only).
	head     []byte
	peekDone bool
}

// Read marks the connection as one that spoke and, while it is counted
// unauthenticated, looks for a valid token in the headers of its first
// request as they arrive: a token holder's connection leaves the share at
// its first read, before any flood can push it out (the guard checks the
// token again, as for every request; this only classifies).
func (c *limitedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && c.unauth != nil {
		c.spoke.Store(true)
		c.peek(p[:n])
	}
	return n, err
}

// peekMax bounds the bytes of a connection's first request looked at for
// its token.
const peekMax = 8 << 10

// peek adds b to what was read of the first request's headers and, once
// an Authorization line is whole, authenticates the connection if its
// token is valid. It stops at the end of the headers or at peekMax.
func (c *limitedConn) peek(b []byte) {
	if c.peekDone {
		return
	}
	c.head = append(c.head, b[:min(len(b), peekMax-len(c.head))]...)
	auth, found, done := authorizationLine(c.head)
	if found && c.unauth.valid != nil && c.unauth.valid(http.Header{"Authorization": {auth}}) {
		c.authenticated()
	}
	if c.peekDone = found || done || len(c.head) >= peekMax; c.peekDone {
		c.head = nil
	}
}

// authorizationLine finds the Authorization header in the start of a
// request (head): its value and whether it was found, and whether head
// holds the headers' end (nothing more to look for).
func authorizationLine(head []byte) (value string, found, done bool) {
	end := bytes.Index(head, []byte("\r\n\r\n"))
	lines := head
	if end >= 0 {
		lines = head[:end+2]
	}
	for {
		i := bytes.Index(lines, []byte("\r\n"))
		if i < 0 {
			return "", false, end >= 0
		}
		name, v, ok := bytes.Cut(lines[:i], []byte(":"))
		if ok && strings.EqualFold(string(name), "Authorization") {
			return strings.TrimSpace(string(v)), true, true
		}
		lines = lines[i+2:]
	}
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		if c.unauth != nil {
			c.unauth.remove(c)
		}
		if c.tokens != nil {
			c.tokens.drop(c)
		}
		c.release()
	})
	return err
}

// authenticated takes the connection out of the unauthenticated share: a
// request on it carried a valid token.
func (c *limitedConn) authenticated() {
	if c.unauth != nil {
		c.unauth.remove(c)
	}
}

// connKey holds a request's connection in its context.
type connKey struct{}

func (c *limitedConn) clamp(t time.Time) time.Time {
	if !c.hard.IsZero() && (t.IsZero() || t.After(c.hard)) {
		return c.hard
	}
	return t
}

func (c *limitedConn) SetDeadline(t time.Time) error { return c.Conn.SetDeadline(c.clamp(t)) }
func (c *limitedConn) SetReadDeadline(t time.Time) error {
	return c.Conn.SetReadDeadline(c.clamp(t))
}
func (c *limitedConn) SetWriteDeadline(t time.Time) error {
	return c.Conn.SetWriteDeadline(c.clamp(t))
}

// reserveKey marks the context of a request on a reserve connection.
type reserveKey struct{}

func connContext(ctx context.Context, c net.Conn) context.Context {
	lc, ok := c.(*limitedConn)
	if !ok {
		return ctx
	}
	if !lc.hard.IsZero() {
		ctx = context.WithValue(ctx, reserveKey{}, true)
	}
	return context.WithValue(ctx, connKey{}, lc)
}

// refuse answers an error without waiting for the request's body: the
// answer goes out first and the connection closes after it (net/http
// would otherwise read the body before answering). What the client is
// still sending is then read and dropped for a short, bounded while: a
// connection closed on unread bytes is reset, and a reset that reaches
// the client before it has read the answer destroys the answer, so the
// client would see "connection reset" instead of the status.
func refuse(w http.ResponseWriter, r *http.Request, code int, msg string) {
	body := r.Body != nil && r.ContentLength != 0
	rc := http.NewResponseController(w)
	if body {
		w.Header().Set("Connection", "close")
		_ = rc.EnableFullDuplex() // read the body after answering
	}
	if code == http.StatusServiceUnavailable || code == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", "1")
	}
	http.Error(w, msg, code)
	if !body {
		return
	}
	_ = rc.Flush()
	_ = rc.SetReadDeadline(time.Now().Add(refuseDrainTime))
	_, _ = io.CopyN(io.Discard, r.Body, refuseDrainBytes)
}

// What refuse reads of a refused body at most, and for how long.
const (
	refuseDrainBytes = 4 << 20
	refuseDrainTime  = 500 * time.Millisecond
)

// sessionCount counts the sessions open, in all and per credential, with
// the ones being made: a request that may make a session reserves its
// place before it runs (so a burst cannot overshoot the caps), and the
// session, once registered, takes the reservation over.
type sessionCount struct {
	mu    sync.Mutex
	total int
	per   map[string]int
}

// reservation is one request's place for the session it may make.
type reservation struct {
	c       *sessionCount
	cred    string
	claimed bool // the session was registered: it holds the place now
}

type reservationKey struct{}

// reserve takes a place for a session of cred, or says which cap is full.
func (c *sessionCount) reserve(cred string, max, perCred int) (*reservation, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.total >= max {
		return nil, "too many sessions"
	}
	if perCred > 0 && c.per[cred] >= perCred {
		return nil, "too many sessions for this token"
	}
	c.add(cred, 1)
	return &reservation{c: c, cred: cred}, ""
}

func (c *sessionCount) add(cred string, n int) {
	if c.per == nil {
		c.per = map[string]int{}
	}
	c.total += n
	if c.per[cred] += n; c.per[cred] <= 0 {
		delete(c.per, cred)
	}
}

// register counts a new session: it takes over its request's reservation,
// or counts itself (a session made without one).
func (c *sessionCount) register(ctx context.Context, cred string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r, ok := ctx.Value(reservationKey{}).(*reservation); ok && r.c == c && !r.claimed && r.cred == cred {
		r.claimed = true
		return
	}
	c.add(cred, 1)
}

// unregister gives an ended session's place back.
func (c *sessionCount) unregister(cred string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.add(cred, -1)
}

// release gives the place back unless a session took it.
func (r *reservation) release() {
	r.c.mu.Lock()
	defer r.c.mu.Unlock()
	if !r.claimed {
		r.claimed = true
		r.c.add(r.cred, -1)
	}
}

// busyWait is how long a request waits for room (body bytes, a call slot)
// before it is turned away as busy.
const busyWait = 5 * time.Second

// budget is a weighted semaphore: bytes of request bodies in flight, or
// tool calls running. Acquire waits up to busyWait.
type budget struct {
	sem *semaphore.Weighted
	cap int64
}

func newBudget(cap int64) *budget { return &budget{sem: semaphore.NewWeighted(cap), cap: cap} }

// acquire takes n (at most cap) within busyWait, or reports false.
func (b *budget) acquire(ctx context.Context, n int64) bool {
	ctx, cancel := context.WithTimeout(ctx, busyWait)
	defer cancel()
	return b.sem.Acquire(ctx, min(n, b.cap)) == nil
}

func (b *budget) release(n int64) { b.sem.Release(min(n, b.cap)) }

// fairBudget is a budget that one credential cannot take whole: with
// several tokens, each gets an even share of it (a token that fills its
// share waits, or is turned away, while the others still get in).
type fairBudget struct {
	all   *budget
	share int64 // per credential; 0: no shares (no tokens, or one)
	mu    sync.Mutex
	per   map[string]*budget // by credential (a configured token's hash: few)
}

func newFairBudget(cap int64, tokens int) *fairBudget {
	f := &fairBudget{all: newBudget(cap), per: map[string]*budget{}}
	if tokens > 1 {
		f.share = max(1, cap/int64(tokens))
	}
	return f
}

func (f *fairBudget) of(cred string) *budget {
	if f.share == 0 {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	b := f.per[cred]
	if b == nil {
		b = newBudget(f.share)
		f.per[cred] = b
	}
	return b
}

// acquire takes n for cred, from its share and from the whole.
func (f *fairBudget) acquire(ctx context.Context, cred string, n int64) bool {
	own := f.of(cred)
	if own != nil && !own.acquire(ctx, n) {
		return false
	}
	if !f.all.acquire(ctx, n) {
		if own != nil {
			own.release(n)
		}
		return false
	}
	return true
}

func (f *fairBudget) release(cred string, n int64) {
	f.all.release(n)
	if own := f.of(cred); own != nil {
		own.release(n)
	}
}

// bodyHold is one request's share of the body budget. It goes back when
// every holder let go: the HTTP handler, and the tool call the body
// carries when it runs after its handler answered (SSE answers 202 and
// runs the call on; the call's arguments stay in memory until it ends).
type bodyHold struct {
	b    *fairBudget
	cred string
	n    int64
	mu   sync.Mutex
	refs int
}

type bodyHoldKey struct{}

func (h *bodyHold) ref() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.refs == 0 {
		return false // already given back
	}
	h.refs++
	return true
}

func (h *bodyHold) unref() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.refs--; h.refs == 0 {
		h.b.release(h.cred, h.n)
	}
}

// sseCallGrace is how long an SSE message's body share waits after its
// handler answered for the call it carries to take the share over.
const sseCallGrace = 5 * time.Second

// deadlineBody lifts the body read deadline when the body has been read
// whole: the call then runs with the connection watched for the client
// going away, and no deadline cuts it.
type deadlineBody struct {
	io.ReadCloser
	rc   *http.ResponseController
	done bool
}

func (d *deadlineBody) Read(p []byte) (int, error) {
	n, err := d.ReadCloser.Read(p)
	if err == io.EOF && !d.done {
		d.done = true
		d.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}
