package kubernetes

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"

	"github.com/sandbox-mcp/sandbox-mcp/supervisor"
)

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

// uidOf is the uid of the running Pod name, as this replica knows it.
func (p *Provider) uidOf(name string) types.UID { return types.UID(p.boxes.ID(name)) }

// dropPod deletes a Pod and forgets it: the last resort for a supervisor
// that does not answer. The thread's files stay.
func (p *Provider) dropPod(name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p.deletePod(ctx, name, "")
	p.forget(name)
}

// errGone: the Pod the provider knew is no longer there.
var errGone = errors.New("pod gone")

// errNoSupervisor: the Pod runs, but its supervisor does not answer as one
// of this server's version (its socket removed or taken over from inside,
// an old supervisor image, a relay that could not start).
var errNoSupervisor = errors.New("the Pod's supervisor does not answer")

// Dial opens a channel to the supervisor of the thread's Pod
// (supervised.Box): one long-lived pods/exec of the supervisor's relay
// (supervise --connect), shared by every call, so that a warm call is one
// round trip on that stream, not an exec of its own. It makes the Pod when
// it is not running. A Pod that went away behind the server's back is made
// again; one whose supervisor does not answer (or answers in another
// version) is deleted and made again, once.
func (s *Sandbox) Dial(ctx context.Context) (*supervisor.Conn, error) {
	for attempt := 0; ; attempt++ {
		done, err := s.p.ensure(ctx, s)
		if err != nil {
			return nil, err
		}
		uid := s.p.uidOf(s.name)
		t0 := time.Now()
		// A warm Pod claimed here comes with its channel open.
		c := s.p.pool.channel(s.name, uid)
		if c == nil {
			c, err = s.connect(ctx)
		}
		done()
		if err == nil {
			s.p.log.Debug("kubernetes provider: channel open", "pod", s.name, "connect", time.Since(t0))
			s.mu.Lock()
			s.dialed.c, s.dialed.uid = c, uid
			s.mu.Unlock()
		}
		if err == nil || ctx.Err() != nil {
			return c, err
		}
		gone := !errors.Is(err, errNoSupervisor) && s.p.goneSoon(s.name)
		switch {
		case attempt > 0:
		case errors.Is(err, errNoSupervisor):
			s.p.dropPod(s.name)
			continue
		case gone:
			s.p.forget(s.name)
			continue
		}
		if why := s.p.supervisorEnded(s.name); gone && why != "" {
			// Made again, and it ended again: it cannot start.
			s.p.dropPod(s.name)
			return nil, fmt.Errorf("kubernetes provider: Pod %s: its supervisor ended as it started (%s); image %s, kubernetes.supervisor_image %s", s.name, why, s.p.cfg.Image, s.p.cfg.SupervisorImage)
		}
		if errors.Is(err, supervisor.ErrVersion) || errors.Is(err, errNoSupervisor) {
			return nil, fmt.Errorf("kubernetes provider: Pod %s: %v (kubernetes.supervisor_image %s: want the image of this server's version)", s.name, err, s.p.cfg.SupervisorImage)
		}
		return nil, err
	}
}

// supervisorEnded says how the Pod's sandbox container (its supervisor)
// ended, or "" when it did not (or the Pod is not there).
func (p *Provider) supervisorEnded(name string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pod, err := p.cs.CoreV1().Pods(p.cfg.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return ""
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if t := cs.State.Terminated; cs.Name == containerName && t != nil {
			return oneLine(ended(pod))
		}
	}
	return ""
}

// connect opens the relay's exec in the Pod and says hello over it: the
// exec's stdin and stdout carry the framed protocol (every frame checked,
// so a stream truncated or corrupted in transit fails the channel, never a
// call's result). The stream lives as long as the channel, not ctx.
func (s *Sandbox) connect(ctx context.Context) (*supervisor.Conn, error) {
	return s.p.connect(ctx, s.name, s.p.wrapRelay)
}

// connect is Sandbox.connect to Pod name, the relay's stdout through wrap
// (if not nil).
func (p *Provider) connect(ctx context.Context, name string, wrap func(io.Reader) io.Reader) (*supervisor.Conn, error) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	sctx, cancel := context.WithCancel(context.Background())
	var stderr bytes.Buffer
	ended := make(chan error, 1)
	go func() {
		err := p.stream(sctx, name, []string{supervisorBin, "supervise", "--connect", supervisorSock}, inR, outW, &limitWriter{w: &stderr, n: 1 << 10})
		why := err // what the channel's calls are told
		switch code, ok := exitCode(err); {
		case err == nil:
			why = io.EOF
		case ok:
			why = fmt.Errorf("the supervisor's relay in Pod %s ended (exit %d: %s)", name, code, oneLine(stderr.String()))
		case !errors.Is(err, context.Canceled):
			why = apiError(err)
		}
		outW.CloseWithError(why)
		inR.CloseWithError(why)
		ended <- err
	}()
	var r io.Reader = outR
	if wrap != nil {
		r = wrap(r)
	}
	c, err := supervisor.NewConn(ctx, r, inW, closerFunc(func() error {
		cancel()
		inW.Close()
		outR.Close()
		return nil
	}))
	if err == nil {
		return c, nil
	}
	if errors.Is(err, supervisor.ErrVersion) {
		return nil, fmt.Errorf("%w: %w", errNoSupervisor, err)
	}
	// Why it did not answer: the relay's exit (it ran, and found no
	// supervisor) or the API's error.
	var serr error
	select {
	case serr = <-ended:
	case <-time.After(5 * time.Second):
		return nil, err
	}
	if _, ok := exitCode(serr); ok && ctx.Err() == nil {
		return nil, fmt.Errorf("%w: %s", errNoSupervisor, oneLine(stderr.String()))
	}
	if serr != nil && !errors.Is(serr, context.Canceled) && serr != io.EOF {
		return nil, apiError(serr)
	}
	return nil, err
}

// closerFunc is a func as an io.Closer.
type closerFunc func() error

func (f closerFunc) Close() error { return f() }

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
