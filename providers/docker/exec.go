package docker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// killGrace is how long a killed command may take to end before the
// container is restarted as the last resort.
const killGrace = 5 * time.Second

// Exec runs the command through exec in the thread's container, with cwd
// the workspace. A timeout or a cancelled ctx kills the command's process
// group from inside (there is no exec-kill API); if the command does not
// end then, the container is restarted.
func (s *Sandbox) Exec(ctx context.Context, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
	for attempt := 0; ; attempt++ {
		res, err := s.exec(ctx, req)
		if errors.Is(err, errGone) && attempt == 0 {
			continue // the container was killed or removed behind our back: make it again
		}
		return res, err
	}
}

// errGone: the container the provider knew is no longer there.
var errGone = errors.New("container gone")

func (s *Sandbox) exec(ctx context.Context, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
	var res sandbox.ExecResult
	id, done, err := s.container(ctx)
	if err != nil {
		return res, err
	}
	defer done()
	shell := s.shell(ctx, id)
	if shell == "" {
		return res, fmt.Errorf("bash needs a shell (sh) in the image %s; read_file and write_file still work", s.p.cfg.Image)
	}
	ex, err := s.p.cli.ContainerExecCreate(ctx, id, container.ExecOptions{
		Cmd:          sandbox.InbandCommand(shell, "", req.Command),
		WorkingDir:   sandbox.WorkspaceDir,
		Env:          s.p.env,
		AttachStdout: true,
		AttachStderr: true,
	})
	if err != nil {
		if cerrdefs.IsNotFound(err) || cerrdefs.IsConflict(err) {
			s.p.forget(s.name, id)
			return res, errGone
		}
		return res, engineError(err)
	}
	// The attach is not tied to ctx: ending it would leave the command
	// running. Ending the command ends the stream.
	conn, err := s.p.cli.ContainerExecAttach(context.Background(), ex.ID, container.ExecAttachOptions{})
	if err != nil {
		return res, engineError(err)
	}
	defer conn.Close()
	out := req.Output
	if out == nil {
		out = io.Discard
	}
	var status sandbox.InbandStatus // the wrapper's lines, on stderr
	copied := make(chan error, 1)
	go func() {
		_, err := stdcopy.StdCopy(out, &status, conn.Reader)
		copied <- err
	}()

	var timeout <-chan time.Time
	if req.Timeout > 0 {
		t := time.NewTimer(req.Timeout)
		defer t.Stop()
		timeout = t.C
	}
	var ctxErr error
	select {
	case <-copied:
	case <-timeout:
		res.TimedOut = true
		s.kill(id, status.PID(), copied)
	case <-ctx.Done():
		ctxErr = ctx.Err()
		s.kill(id, status.PID(), copied)
	}
	if ctxErr != nil {
		return res, ctxErr
	}
	if code, ok := status.ExitCode(); ok {
		// The wrapper said how the command ended: no inspect call.
		if !res.TimedOut {
			res.ExitCode = code
		}
		return res, nil
	}
	ictx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := s.p.cli.ContainerExecInspect(ictx, ex.ID)
	if err != nil {
		return res, engineError(err)
	}
	if !res.TimedOut {
		res.ExitCode = info.ExitCode
	}
	return res, nil
}

// kill ends a running command: its process group from inside (pid, as the
// wrapper reported it; 0 when it did not), then, if the stream does not
// end, the whole container (a restart: every process in it goes, the
// thread's files stay).
func (s *Sandbox) kill(id string, pid int, copied <-chan error) {
	if pid > 1 {
		ctx, cancel := context.WithTimeout(context.Background(), killGrace)
		defer cancel()
		s.run(ctx, id, sandbox.InbandKillCommand(pid))
	}
	select {
	case <-copied:
		return
	case <-time.After(killGrace):
	}
	s.p.log.Warn("docker provider: command did not end after its process group was killed; restarting the container", "name", s.name)
	zero := 0
	rctx, rcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer rcancel()
	if err := s.p.cli.ContainerRestart(rctx, id, container.StopOptions{Timeout: &zero}); err != nil {
		s.p.log.Warn("docker provider: restart failed", "name", s.name, "err", err)
	}
	select {
	case <-copied:
	case <-time.After(killGrace):
	}
}

// run execs argv in the container and returns its stdout, stderr and exit
// code.
func (s *Sandbox) run(ctx context.Context, id string, argv []string) (stdout, stderr []byte, code int, err error) {
	ex, err := s.p.cli.ContainerExecCreate(ctx, id, container.ExecOptions{Cmd: argv, AttachStdout: true, AttachStderr: true})
	if err != nil {
		return nil, nil, -1, err
	}
	conn, err := s.p.cli.ContainerExecAttach(ctx, ex.ID, container.ExecAttachOptions{})
	if err != nil {
		return nil, nil, -1, err
	}
	defer conn.Close()
	var o, e bytes.Buffer
	if _, err := stdcopy.StdCopy(&o, &e, io.LimitReader(conn.Reader, 64<<20)); err != nil {
		return nil, nil, -1, err
	}
	info, err := s.p.cli.ContainerExecInspect(ctx, ex.ID)
	if err != nil {
		return nil, nil, -1, err
	}
	return o.Bytes(), e.Bytes(), info.ExitCode, nil
}

// shell is the shell the wrapper runs with in the container: "bash" where
// the image has it, "sh", or "" when it has no shell (sandbox.ShellProbe,
// asked once per sandbox; an engine error is not remembered).
func (s *Sandbox) shell(ctx context.Context, id string) string {
	if sh := s.sh.Load(); sh != nil {
		return *sh
	}
	stdout, _, code, err := s.run(ctx, id, sandbox.ShellProbe)
	sh, known := sandbox.ShellFromProbe(stdout, code, err)
	if !known {
		return "sh"
	}
	s.sh.Store(&sh)
	return sh
}

// hasShell reports whether the container has sh.
func (s *Sandbox) hasShell(ctx context.Context, id string) bool { return s.shell(ctx, id) != "" }

func oneLine(b []byte) string { return strings.TrimSpace(strings.ReplaceAll(string(b), "\n", " ")) }
