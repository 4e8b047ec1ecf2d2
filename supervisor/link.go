package supervisor

import (
	"context"
	"errors"
	"sync"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// Dialer starts a sandbox's supervisor, or reaches the one that runs, and
// returns a channel to it.
type Dialer func(ctx context.Context) (*Conn, error)

// Link is one sandbox's channel to its supervisor: dialed on first use,
// shared by every call, dialed again when it has failed.
type Link struct {
	dial Dialer
	sem  chan struct{} // one dial at a time

	mu     sync.Mutex
	conn   *Conn
	closed bool
}

// NewLink returns a link that dials with dial.
func NewLink(dial Dialer) *Link { return &Link{dial: dial, sem: make(chan struct{}, 1)} }

// ErrClosed: the link was closed (its sandbox released).
var ErrClosed = errors.New("the sandbox was released")

// Conn returns the working channel, dialing one when there is none.
func (l *Link) Conn(ctx context.Context) (*Conn, error) {
	if c := l.current(); c != nil {
		return c, nil
	}
	select {
	case l.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-l.sem }()
	if c := l.current(); c != nil {
		return c, nil
	}
	l.mu.Lock()
	closed := l.closed
	l.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	c, err := l.dial(ctx)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		c.Close()
		return nil, ErrClosed
	}
	l.conn = c
	return c, nil
}

// Connected reports whether a working channel is up (no dial is made).
func (l *Link) Connected() bool { return l.current() != nil }

// current is the channel while it works.
func (l *Link) current() *Conn {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn != nil && l.conn.Err() != nil {
		l.conn = nil
	}
	return l.conn
}

// Drop ends the channel if it is still c, so that the next call dials
// anew (after the sandbox was ended behind it).
func (l *Link) Drop(c *Conn) {
	l.mu.Lock()
	if l.conn == c {
		l.conn = nil
	}
	l.mu.Unlock()
	c.Close()
}

// Close ends the channel; later calls fail with ErrClosed.
func (l *Link) Close() {
	l.mu.Lock()
	c := l.conn
	l.conn, l.closed = nil, true
	l.mu.Unlock()
	if c != nil {
		c.Close()
	}
}

// Exec runs a command on the sandbox's channel (Conn.Exec). A command the
// supervisor never started because the channel was already gone (a
// sandbox ended behind the server's back) is tried once more on a new
// channel. On ErrUnresponsive the channel is dropped: the caller ends the
// sandbox (its last resort), and the next call dials anew.
func (l *Link) Exec(ctx context.Context, req ExecRequest) (sandbox.ExecResult, error) {
	for attempt := 0; ; attempt++ {
		c, err := l.Conn(ctx)
		if err != nil {
			return sandbox.ExecResult{}, err
		}
		res, err := c.Exec(ctx, req)
		var ce *ChannelError
		switch {
		case errors.As(err, &ce) && ce.NotStarted && attempt == 0:
			l.Drop(c)
			continue
		case errors.Is(err, ErrUnresponsive):
			l.Drop(c)
		}
		return res, err
	}
}
