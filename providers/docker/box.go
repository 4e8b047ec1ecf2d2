package docker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"

	"github.com/sandbox-mcp/sandbox-mcp/providers/internal/supervised"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor"
)

// Sandbox is one thread's container-backed sandbox (supervised.Sandbox):
// the thread's directories served on the host, every other path by the
// container's supervisor, as are its commands and jobs. Jobs outlive the
// call, the thread's release and a restart of the server, and end with
// the container; between calls a running job keeps the idle reaper away
// (supervisorBusy).
type Sandbox struct {
	*supervised.Sandbox
	p      *Provider
	key    string // thread key
	name   string // container name
	mounts []sandbox.Mount
}

var (
	_ sandbox.Sandbox = (*Sandbox)(nil)
	_ sandbox.Jobs    = (*Sandbox)(nil)
)

// container returns the running container's id, marked busy until done.
func (s *Sandbox) container(ctx context.Context) (string, func(), error) {
	return s.p.ensure(ctx, s.name, s.key, s.mounts)
}

// Enter marks the container busy for one call, making or starting it
// when it does not run (supervised.Box).
func (s *Sandbox) Enter(ctx context.Context) (func(), error) {
	_, done, err := s.container(ctx)
	return done, err
}

// Unresponsive restarts the container (supervised.Box): every process in
// it goes, the thread's files stay.
func (s *Sandbox) Unresponsive() {
	if id := s.p.boxes.ID(s.name); id != "" {
		s.restart(id)
	}
}

// restart restarts the container: the last resort for a command that does
// not end.
func (s *Sandbox) restart(id string) {
	s.p.log.Warn("docker provider: the supervisor did not end a command; restarting the container", "name", s.name)
	zero := 0
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.p.cli.ContainerRestart(ctx, id, container.StopOptions{Timeout: &zero}); err != nil {
		s.p.log.Warn("docker provider: restart failed", "name", s.name, "err", err)
	}
}

// supervisorStart bounds how long a container's supervisor may take to
// listen once the container runs.
const supervisorStart = 10 * time.Second

// Dial reaches the supervisor of the thread's container (supervised.Box),
// making or starting the container when it is not running (the supervisor
// ended, taking the container with it; or it was removed behind the
// server's back). The container's supervisor is its main process; in
// socket mode, its unix socket in the container's run directory, bound
// from the host, so that a warm call is one round trip on a socket, not
// an exec through the engine.
func (s *Sandbox) Dial(ctx context.Context) (*supervisor.Conn, error) {
	for attempt := 0; ; attempt++ {
		id, done, err := s.container(ctx)
		if err != nil {
			return nil, err
		}
		var c *supervisor.Conn
		if s.p.channel == channelExec {
			c, err = s.connectExec(ctx, id)
		} else {
			c, err = s.connect(ctx, id)
		}
		done()
		if errors.Is(err, errGone) && attempt == 0 {
			s.p.boxes.Forget(s.name, id)
			continue
		}
		if errors.Is(err, errNoSupervisor) && attempt == 0 {
			// Its socket gone or taken over from inside: a restart brings
			// the supervisor back (the thread's files stay).
			s.restart(id)
			continue
		}
		if errors.Is(err, errGone) {
			err = fmt.Errorf("docker provider: container %s stopped as it started; its supervisor did not run (the image's architecture or user?)", s.name)
		}
		return c, err
	}
}

// connect waits for the supervisor's socket in the container's run
// directory, as the container starts, and says hello.
func (s *Sandbox) connect(ctx context.Context, id string) (*supervisor.Conn, error) {
	run, err := s.p.runDir(s.name)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(supervisorStart)
	lastCheck := time.Now()
	for wait := time.Millisecond; ; wait = min(2*wait, 5*time.Millisecond) {
		nc, err := supervisor.DialSocket(run, socketName)
		if err == nil {
			hctx, cancel := context.WithTimeout(ctx, supervisorStart)
			c, err := supervisor.NewConn(hctx, nc, nc, nc)
			cancel()
			if err != nil {
				return nil, fmt.Errorf("%w: container %s: %v", errNoSupervisor, s.name, s.p.bin.Refusal(err))
			}
			return c, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%w: container %s: nothing listens after %s", errNoSupervisor, s.name, supervisorStart)
		}
		if time.Since(lastCheck) > 200*time.Millisecond {
			// Not yet listening, or never again: is the container up?
			lastCheck = time.Now()
			info, err := s.p.cli.ContainerInspect(ctx, id)
			if cerrdefs.IsNotFound(err) || err == nil && (info.State == nil || !info.State.Running) {
				return nil, errGone
			}
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
	}
}

// errGone: the container the provider knew is no longer there or running.
var errGone = errors.New("container gone")

// errNoSupervisor: the container runs, but its supervisor does not answer
// as one (its socket removed, or taken over by a command).
var errNoSupervisor = errors.New("docker provider: the container's supervisor does not answer")

// The supervisor's run directory: where it listens, bound from
// <state>/supervisors/<container name> on the host.
const (
	runDir     = supervisor.BinaryDir + "/run"
	socketName = "sock"
)

// runDir is the host directory bound at runDir in container name, made
// when missing: owned by the containers' user, private to it (mode 0700;
// 0777 when that user is a name whose uid is not known, in a parent only
// the server's user can enter).
func (p *Provider) runDir(name string) (string, error) {
	parent := filepath.Join(p.cfg.StateDir, "supervisors")
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return "", fmt.Errorf("docker provider: state dir: %w", err)
	}
	dir := filepath.Join(parent, name)
	mode := os.FileMode(0o700)
	if p.uid < 0 {
		mode = 0o777
	}
	if err := os.Mkdir(dir, mode); err != nil && !errors.Is(err, os.ErrExist) {
		return "", fmt.Errorf("docker provider: state dir: %w", err)
	}
	if err := os.Chmod(dir, mode); err != nil {
		return "", fmt.Errorf("docker provider: state dir: %w", err)
	}
	if p.uid >= 0 && os.Geteuid() == 0 {
		if err := os.Lchown(dir, p.uid, p.gid); err != nil {
			return "", fmt.Errorf("docker provider: state dir: %w", err)
		}
	}
	return dir, nil
}

// Idle says the container's idle timeout and what is left of it
// (supervised.IdleStopper).
func (s *Sandbox) Idle() (timeout, left time.Duration, ok bool) {
	return s.p.boxes.Idle(s.name, s.p.cfg.IdleTimeout)
}
