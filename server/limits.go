package server

import (
	"context"
	"net"
	"net/http"
	"sync"
	"time"
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
}

func newLimitListener(ln net.Listener, max int) *limitListener {
	return &limitListener{Listener: ln, slots: make(chan struct{}, max), reserve: make(chan struct{}, reserveConns)}
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		select {
		case l.slots <- struct{}{}:
			return &limitedConn{Conn: c, release: func() { <-l.slots }}, nil
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
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

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
	if lc, ok := c.(*limitedConn); ok && !lc.hard.IsZero() {
		return context.WithValue(ctx, reserveKey{}, true)
	}
	return ctx
}

// refuse answers an error without reading the request's body: the
// connection closes after the answer (net/http would otherwise drain the
// body first), and what is left of the body is not waited for.
func refuse(w http.ResponseWriter, r *http.Request, code int, msg string) {
	if r.ContentLength != 0 {
		w.Header().Set("Connection", "close")
		http.NewResponseController(w).SetReadDeadline(time.Now())
	}
	if code == http.StatusServiceUnavailable || code == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", "1")
	}
	http.Error(w, msg, code)
}
