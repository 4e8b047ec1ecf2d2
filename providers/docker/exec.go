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

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor"
)

// Exec runs the command through the container's supervisor (its main
// process), over the channel of the sandbox's link: a unix socket in the
// container's run directory, bound from the host, so that a warm call is
// one round trip on a socket, not an exec through the engine. The
// supervisor runs the command in its own process group with cwd the
// workspace (with req.Shell, in the shell state it keeps: package
// supervisor) and enforces the timeout; a cancelled ctx kills the group. If
// the supervisor does not end a command it was told to (stopped, hung),
// the container is restarted: every process in it goes, the thread's files
// stay.
func (s *Sandbox) Exec(ctx context.Context, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
	id, done, err := s.container(ctx)
	if err != nil {
		return sandbox.ExecResult{}, err
	}
	defer done()
	argv, err := s.argv(ctx, req.Command)
	if err != nil {
		return sandbox.ExecResult{}, err
	}
	res, err := s.link.Exec(ctx, supervisor.ExecRequest{Argv: argv, Dir: sandbox.WorkspaceDir, Timeout: req.Timeout, Output: req.Output,
		YieldAfter: req.YieldAfter, Shell: req.Shell, ResetState: req.ResetState, Jobs: req.Jobs, LogDir: sandbox.JobLogDir})
	if errors.Is(err, supervisor.ErrUnresponsive) {
		s.restart(id)
	}
	return sandbox.ExecResult{ExitCode: res.ExitCode, TimedOut: res.TimedOut, Job: res.Job}, err
}

// argv is how the container's shell runs command. $0 is "bash", as for
// bash -c, whatever the shell: it prefixes the shell's error messages.
func (s *Sandbox) argv(ctx context.Context, command string) ([]string, error) {
	c, err := s.link.Conn(ctx)
	if err != nil {
		return nil, err
	}
	shell := c.Hello().Shell
	if shell == "" {
		return nil, fmt.Errorf("bash needs a shell (sh) in the image %s; read_file and write_file still work", s.p.cfg.Image)
	}
	return []string{shell, "-c", command, "bash"}, nil
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

// dial reaches the supervisor of the thread's container, making or
// starting the container when it is not running (the supervisor ended,
// taking the container with it; or it was removed behind the server's
// back).
func (s *Sandbox) dial(ctx context.Context) (*supervisor.Conn, error) {
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
			s.p.forget(s.name, id)
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
