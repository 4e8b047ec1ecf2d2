package supervised

import (
	"context"
	"errors"
	"net"
	"sync"

	"github.com/sandbox-mcp/sandbox-mcp/egress"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor"
)

// Egress is the box's way out in network.mode allowlist (SPEC §17): the
// box has no route of its own; its supervisor listens on the box's
// loopback and carries each connection to the server, which serves it
// (package egress) — so it works the same in a container without a
// network and in a Pod.
type Egress interface {
	// CA is the certificate the box trusts beside its own roots (the
	// proxy terminates TLS to hosts it injects headers into); nil: none.
	CA() []byte
	// Env is what a command gets to use the proxy at addr, with the
	// bundle of roots at caFile ("": none).
	Env(addr, caFile string) []string
	// ServeConn serves one connection from the box until it ends.
	ServeConn(ctx context.Context, conn net.Conn, who egress.Who)
}

// network is what the sandbox keeps of its box's proxy listener: the
// variables of the channel that asked for it last.
type network struct {
	ctx    context.Context // ends with the sandbox: every proxied connection with it
	cancel context.CancelFunc

	mu   sync.Mutex
	conn *supervisor.Conn
	env  []string
}

// dial is the link's dialer: the box's, and with Egress the channel then
// asks its supervisor for the proxy listener and receives its connections
// — at once, so that a job started before a server restart finds its way
// out again as soon as the server reaches the box.
func (s *Sandbox) dial(ctx context.Context) (*supervisor.Conn, error) {
	c, err := s.box.Dial(ctx)
	if err != nil || s.cfg.Egress == nil {
		return c, err
	}
	who := egress.Who{Thread: s.cfg.Thread, Sandbox: s.cfg.Name, Provider: s.cfg.Provider}
	l, err := c.Listen(ctx, s.cfg.Egress.CA(), func(conn net.Conn) {
		s.cfg.Egress.ServeConn(s.net.ctx, conn, who)
	})
	if err != nil {
		c.Close()
		return nil, err
	}
	env := s.cfg.Egress.Env(l.Addr, l.CAFile)
	s.net.mu.Lock()
	s.net.conn, s.net.env = c, env
	s.net.mu.Unlock()
	return c, nil
}

// withEgress is env with the proxy's variables first (the command's own
// override none of them: they come from the server too).
func (s *Sandbox) withEgress(ctx context.Context, env []string) ([]string, error) {
	if s.cfg.Egress == nil {
		return env, nil
	}
	if _, err := s.link.Conn(ctx); err != nil {
		return nil, err
	}
	s.net.mu.Lock()
	proxy := s.net.env
	s.net.mu.Unlock()
	return append(append([]string(nil), proxy...), env...), nil
}

var _ sandbox.Ports = (*Sandbox)(nil)

// Box names the box by its supervisor's boot id: a box started anew has a
// new supervisor, so what was opened in the old one ends with it.
func (s *Sandbox) Box(ctx context.Context) (string, error) {
	return entered(s, ctx, func() (string, error) {
		c, err := s.link.Conn(ctx)
		if err != nil {
			return "", err
		}
		return c.Hello().Boot, nil
	})
}

// DialPort connects to 127.0.0.1:port in the box named box, through its
// supervisor. The box is entered only while the connection is made: a
// preview a browser keeps open must not keep the box from its reaper.
func (s *Sandbox) DialPort(ctx context.Context, box string, port int) (net.Conn, error) {
	return entered(s, ctx, func() (net.Conn, error) {
		c, err := s.link.Conn(ctx)
		if errors.Is(err, supervisor.ErrClosed) {
			return nil, sandbox.ErrBoxGone
		}
		if err != nil {
			return nil, err
		}
		if c.Hello().Boot != box {
			return nil, sandbox.ErrBoxGone
		}
		return c.DialPort(ctx, port)
	})
}
