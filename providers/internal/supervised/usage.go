package supervised

import (
	"context"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

var _ sandbox.UsageReporter = (*Sandbox)(nil)

// IdleStopper is a Box its provider stops once unused for a while
// (docker, kubernetes: idle_timeout).
type IdleStopper interface {
	// Idle says the box's idle timeout and the time left of it now
	// (timeout minus the time since its last use); ok false when the
	// provider stops no idle box.
	Idle() (timeout, left time.Duration, ok bool)
}

// Usage answers what the box uses, from its supervisor (one request: its
// cgroup, its jobs, the bytes of user-data), and the box's facts
// (sandbox.UsageReporter).
func (s *Sandbox) Usage(ctx context.Context) (sandbox.Usage, error) {
	var timeout, left time.Duration
	idle := false
	if b, ok := s.box.(IdleStopper); ok {
		timeout, left, idle = b.Idle() // before Enter: this call is a use
	}
	dir := s.cfg.UserData
	if dir == "" {
		dir = sandbox.UserDataDir
	}
	u, err := entered(s, ctx, func() (sandbox.Usage, error) { return s.link.Usage(ctx, dir) })
	if err != nil {
		return sandbox.Usage{}, err
	}
	u.Provider, u.Image, u.Box = s.cfg.Provider, s.cfg.Image, s.cfg.Name
	if idle {
		u.IdleLeft, u.IdleTimeout = &left, timeout
	}
	return u, nil
}
