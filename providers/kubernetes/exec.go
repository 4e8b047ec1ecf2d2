package kubernetes

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// killGrace is how long a killed command may take to end before the Pod
// is deleted as the last resort (every process in it goes; the files stay).
const killGrace = 5 * time.Second

// stream runs argv in the Pod's sandbox container through pods/exec
// (WebSocket, falling back to SPDY on servers without it, as kubectl).
// A non-zero exit is a utilexec.ExitError.
func (p *Provider) stream(ctx context.Context, pod string, argv []string, stdin io.Reader, stdout, stderr io.Writer) error {
	req := p.cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(p.cfg.Namespace).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{
			Container: containerName,
			Command:   argv,
			Stdin:     stdin != nil,
			Stdout:    stdout != nil,
			Stderr:    stderr != nil,
		}, scheme.ParameterCodec)
	ws, err := remotecommand.NewWebSocketExecutor(p.rest, "GET", req.URL().String())
	if err != nil {
		return err
	}
	spdy, err := remotecommand.NewSPDYExecutor(p.rest, "POST", req.URL())
	if err != nil {
		return err
	}
	// Only a failed upgrade falls back: any later error may come from a
	// command that ran, and must not run it twice.
	ex, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		return err
	}
	return ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: stdin, Stdout: stdout, Stderr: stderr})
}

// exitCode is the exit status in err, if err is one.
func exitCode(err error) (int, bool) {
	if err == nil {
		return 0, true
	}
	var ee utilexec.ExitError
	if errors.As(err, &ee) && ee.Exited() {
		return ee.ExitStatus(), true
	}
	return 0, false
}

// run execs argv in the sandbox's Pod and returns its stdout, stderr and
// exit code (err only when it could not run).
func (s *Sandbox) run(ctx context.Context, argv []string, stdin io.Reader) (stdout, stderr []byte, code int, err error) {
	var o, e bytes.Buffer
	err = s.p.stream(ctx, s.name, argv, stdin, &limitWriter{w: &o, n: 64 << 20}, &limitWriter{w: &e, n: 1 << 20})
	code, ok := exitCode(err)
	if !ok {
		return o.Bytes(), e.Bytes(), -1, err
	}
	return o.Bytes(), e.Bytes(), code, nil
}

// Exec runs the command through pods/exec in the thread's Pod, with cwd
// the workspace. A timeout or a cancelled ctx kills the command's process
// group from a second exec; if the command does not end then, the Pod is
// deleted (the files stay; the next call makes it again).
func (s *Sandbox) Exec(ctx context.Context, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
	for attempt := 0; ; attempt++ {
		res, err := s.exec(ctx, req)
		if errors.Is(err, errGone) && attempt == 0 {
			continue // the Pod went away before the command ran: make it again
		}
		if errors.Is(err, errGone) {
			err = fmt.Errorf("kubernetes provider: Pod %s went away", s.name)
		}
		return res, err
	}
}

// errGone: the Pod the provider knew is no longer there.
var errGone = errors.New("pod gone")

func (s *Sandbox) exec(ctx context.Context, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
	done, err := s.p.ensure(ctx, s)
	if err != nil {
		return sandbox.ExecResult{}, err
	}
	defer done()
	shell := s.shell(ctx)
	out := &countWriter{w: req.Output}
	if out.w == nil {
		out.w = io.Discard
	}
	var status sandbox.InbandStatus // the wrapper's lines, on stderr
	// The stream is not tied to ctx: ending it would leave the command
	// running. Ending the command ends the stream.
	sctx, cancelStream := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelStream()
	ended := make(chan error, 1)
	go func() {
		ended <- s.p.stream(sctx, s.name, sandbox.InbandCommand(shell, s.p.keep, req.Command), nil, out, &status)
	}()

	var timeout <-chan time.Time
	if req.Timeout > 0 {
		t := time.NewTimer(req.Timeout)
		defer t.Stop()
		timeout = t.C
	}
	var res sandbox.ExecResult
	select {
	case err = <-ended:
	case <-timeout:
		res.TimedOut = true
		s.kill(status.PID(), ended, cancelStream)
		return res, nil
	case <-ctx.Done():
		s.kill(status.PID(), ended, cancelStream)
		return res, ctx.Err()
	}
	// The wrapper reports the command's exit code, then kills its own
	// process group: the exec's status is then 137, not the command's.
	if code, ok := status.ExitCode(); ok {
		res.ExitCode = code
		return res, nil
	}
	if code, ok := exitCode(err); ok {
		res.ExitCode = code
		return res, nil
	}
	if out.n.Load() == 0 && s.p.gone(s.name) {
		s.p.forget(s.name)
		return res, errGone
	}
	return res, apiError(err)
}

// shell is the shell the wrapper runs with in the sandbox's Pod: bash
// where the image has it, else sh. One exec asks (sandbox.ShellProbe), the
// first time.
func (s *Sandbox) shell(ctx context.Context) string {
	if sh := s.sh.Load(); sh != nil {
		return *sh
	}
	o, _, code, err := s.run(ctx, sandbox.ShellProbe, nil)
	sh, known := sandbox.ShellFromProbe(o, code, err)
	if !known || sh == "" {
		return "sh" // not known (asked again next time), or no sh: exec says so
	}
	s.sh.Store(&sh)
	return sh
}

// kill ends a running command: its process group from inside (pid, as the
// wrapper reported it; 0 when it did not), then, if the stream does not
// end, the whole Pod.
func (s *Sandbox) kill(pid int, ended <-chan error, cancelStream func()) {
	if pid > 1 {
		ctx, cancel := context.WithTimeout(context.Background(), killGrace)
		defer cancel()
		s.run(ctx, sandbox.InbandKillCommand(pid), nil)
	}
	select {
	case <-ended:
		return
	case <-time.After(killGrace):
	}
	s.p.log.Warn("kubernetes provider: command did not end after its process group was killed; deleting the Pod", "pod", s.name)
	dctx, dcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer dcancel()
	s.p.deletePod(dctx, s.name, "")
	s.p.forget(s.name)
	cancelStream()
	select {
	case <-ended:
	case <-time.After(killGrace):
	}
}

// countWriter counts what passes through it.
type countWriter struct {
	w io.Writer
	n atomic.Int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n.Add(int64(n))
	return n, err
}

// limitWriter keeps at most n bytes and drops the rest.
type limitWriter struct {
	w io.Writer
	n int
}

func (l *limitWriter) Write(p []byte) (int, error) {
	k := min(len(p), l.n)
	if k > 0 {
		l.w.Write(p[:k])
		l.n -= k
	}
	return len(p), nil
}
