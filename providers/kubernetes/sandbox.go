package kubernetes

import (
	"time"

	"context"
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"github.com/sandbox-mcp/sandbox-mcp/providers/internal/supervised"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor"
)

// Sandbox is one thread's Pod-backed sandbox (supervised.Sandbox): its
// commands, jobs and every file operation go to the Pod's supervisor,
// over the sandbox's link. The virtual paths are the Pod's real mount
// points, and any other absolute path is the Pod's own file system (the
// agent owns its sandbox); every operation acts as the Pod's user, as its
// commands do; grep and glob run whole inside the Pod. Jobs outlive the
// call, the thread's release and a restart of any replica, and end with
// the Pod; between calls a running job keeps the idle reaper away
// (supervisorBusy).
type Sandbox struct {
	*supervised.Sandbox
	p      *Provider
	key    string // thread key
	name   string // Pod name
	mounts []sandbox.Mount

	mu     sync.Mutex
	dialed struct { // the link's last channel, and the Pod it reaches
		c   *supervisor.Conn
		uid types.UID
	}
}

var (
	_ sandbox.Sandbox = (*Sandbox)(nil)
	_ sandbox.Jobs    = (*Sandbox)(nil)
)

// newSandbox returns the thread's sandbox; its Pod is made on first use.
// Its mounts' Host is the node directory behind one (empty for a claim).
func newSandbox(p *Provider, thread, name string, mounts []sandbox.Mount) *Sandbox {
	sb := &Sandbox{p: p, key: thread, name: name, mounts: mounts}
	sb.Sandbox = supervised.New(sb, supervised.Config{Thread: thread, Mounts: mounts, Image: p.cfg.Image,
		Egress: p.cfg.Egress, Name: sb.name, Provider: p.Name()})
	return sb
}

// PodName is the name of the thread's Pod.
func (s *Sandbox) PodName() string { return s.name }

// Enter marks the Pod busy for one call (never reaped as idle while a
// call runs), making it when it does not run, on a channel to the Pod the
// provider knows now (supervised.Box): a channel dialed to an earlier Pod
// of the thread (deleted, made again since) is dropped for a new one.
func (s *Sandbox) Enter(ctx context.Context) (func(), error) {
	for attempt := 0; ; attempt++ {
		c, err := s.Link().Conn(ctx)
		if err != nil {
			return nil, err
		}
		done, err := s.p.ensure(ctx, s)
		if err != nil {
			return nil, err
		}
		if attempt > 0 || s.dialedTo(c) == s.p.uidOf(s.name) {
			return done, nil
		}
		done()
		s.Link().Drop(c)
	}
}

// Unresponsive deletes the Pod (supervised.Box): every process in it goes,
// the thread's files stay, and the next call makes it again.
func (s *Sandbox) Unresponsive() {
	s.p.log.Warn("kubernetes provider: the supervisor did not end a command; deleting the Pod", "pod", s.name)
	s.p.dropPod(s.name)
}

// dialedTo is the uid of the Pod channel c was dialed to.
func (s *Sandbox) dialedTo(c *supervisor.Conn) types.UID {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dialed.c != c {
		return ""
	}
	return s.dialed.uid
}

// Idle says the Pod's idle timeout and what is left of it as this
// replica knows its use (supervised.IdleStopper).
func (s *Sandbox) Idle() (timeout, left time.Duration, ok bool) {
	return s.p.boxes.Idle(s.name, s.p.cfg.IdleTimeout)
}
