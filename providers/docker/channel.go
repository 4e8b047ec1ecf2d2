package docker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/sandbox-mcp/sandbox-mcp/supervisor"
)

// The channel to a container's supervisor (docker.channel):
//   - socket: the supervisor's unix socket in a host directory bound into
//     the container (<state>/supervisors/<name>). The fastest; it needs the
//     server on the engine's own Linux host: a socket does not cross the
//     VM of Docker Desktop (macOS, Windows), nor a remote engine.
//   - exec: one long-lived exec in the container per thread, running the
//     supervisor's relay (supervise --connect) to the socket, which lives
//     in a tmpfs of the container's own; its stdin and stdout carry the
//     frames (each checked: CRC-32C, sequence numbers). Works wherever the
//     Engine API reaches, Docker Desktop included.
const (
	channelAuto   = "auto"
	channelSocket = "socket"
	channelExec   = "exec"
)

// resolveChannel is the channel docker.channel names; auto: socket where
// the server runs on Linux beside a local engine (a unix:// daemon host),
// exec elsewhere (tryConnect also turns auto to exec for Docker Desktop's
// engine, in a VM behind its unix:// socket).
func resolveChannel(configured, daemonHost string) (string, error) {
	local := runtime.GOOS == "linux" && strings.HasPrefix(daemonHost, "unix://")
	switch configured {
	case "", channelAuto:
		if local {
			return channelSocket, nil
		}
		return channelExec, nil
	case channelSocket:
		if !local {
			return "", fmt.Errorf("docker.channel socket: the supervisor's socket reaches the server only on the engine's own Linux host (this server runs on %s, the engine at %s); use exec (or auto)", runtime.GOOS, daemonHost)
		}
		return channelSocket, nil
	case channelExec:
		return channelExec, nil
	}
	return "", fmt.Errorf("docker.channel %q: want auto, socket or exec", configured)
}

// Channel is how this provider reaches its containers' supervisors:
// socket or exec.
func (p *Provider) Channel() string { return p.channel }

// relay opens one relay exec in container id and says hello over it.
func (p *Provider) relay(ctx context.Context, id, name string) (*supervisor.Conn, error) {
	ex, err := p.cli.ContainerExecCreate(ctx, id, container.ExecOptions{
		User:         p.user,
		AttachStdin:  true,
		AttachStdout: true,
		AttachStderr: true,
		WorkingDir:   "/",
		Cmd:          p.bin.Argv("supervise", "--connect", runDir+"/"+socketName),
	})
	if err != nil {
		if cerrdefs.IsNotFound(err) || cerrdefs.IsConflict(err) {
			return nil, errGone // removed, or not running
		}
		// Perhaps the container stopping (connectExec looks at it).
		return nil, fmt.Errorf("%w: container %s: %v", errNotListening, name, engineError(err))
	}
	hj, err := p.cli.ContainerExecAttach(ctx, ex.ID, container.ExecAttachOptions{})
	if err != nil {
		// The container stopped between the exec's creation and its
		// start ("unable to upgrade to tcp, received 500"), or the engine
		// failed: connectExec looks at the container.
		return nil, fmt.Errorf("%w: container %s: %v", errNotListening, name, engineError(err))
	}
	// The exec's stdout and stderr come multiplexed on one stream: the
	// frames go to the supervisor client, the relay's complaints (at most
	// 1 KiB) to the error.
	outR, outW := io.Pipe()
	stderr := &boundedBuffer{max: 1 << 10}
	go func() {
		_, err := stdcopy.StdCopy(outW, stderr, hj.Reader)
		outW.CloseWithError(errors.Join(err, io.EOF))
	}()
	var once sync.Once
	closer := closerFunc(func() error {
		once.Do(func() {
			hj.Close()
			outR.Close()
		})
		return nil
	})
	hctx, cancel := context.WithTimeout(ctx, supervisorStart)
	defer cancel()
	c, err := supervisor.NewConn(hctx, outR, hj.Conn, closer)
	if err != nil {
		closer.Close()
		if msg := strings.TrimSpace(stderr.String()); msg != "" {
			return nil, fmt.Errorf("%w: container %s: %s", errNotListening, name, oneLine(msg))
		}
		return nil, fmt.Errorf("%w: container %s: %v", errNotListening, name, p.bin.Refusal(err))
	}
	return c, nil
}

// errNotListening: the relay ran but reached no supervisor (not listening
// yet, or its socket gone).
var errNotListening = errors.New("docker provider: the container's supervisor does not answer its relay")

// connectExec reaches the supervisor through a relay exec, waiting for
// it to listen as the container starts.
func (s *Sandbox) connectExec(ctx context.Context, id string) (*supervisor.Conn, error) {
	deadline := time.Now().Add(supervisorStart)
	for wait := 5 * time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		c, err := s.p.relay(ctx, id, s.name)
		if err == nil || !errors.Is(err, errNotListening) {
			return c, err
		}
		info, ierr := s.p.cli.ContainerInspect(ctx, id)
		switch {
		case cerrdefs.IsNotFound(ierr) || ierr == nil && (info.State == nil || !info.State.Running):
			return nil, errGone
		case ierr != nil:
			return nil, engineError(ierr)
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%w: %v", errNoSupervisor, err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
	}
}

// closerFunc is a func as an io.Closer.
type closerFunc func() error

func (f closerFunc) Close() error { return f() }

// boundedBuffer keeps the first max bytes written to it.
type boundedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
	max int
}

func (b *boundedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := b.max - b.buf.Len(); room > 0 {
		b.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (b *boundedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// supervisorBinary is the supervisor daemon bound into every container
// (supervisor.FindBinary): docker.supervisor_binary, or the one beside this
// server — on macOS and Windows, the Linux build for the engine's
// architecture beside it (Docker Desktop's engine runs Linux of the
// host's) — or, for a server built alone on Linux, the server itself.
func supervisorBinary(configured string, log *slog.Logger) (*supervisor.Binary, error) {
	bin, err := supervisor.FindBinary(supervisor.Locate{GOOS: "linux", Configured: configured, Setting: "docker.supervisor_binary", Log: log})
	if err == nil {
		err = bin.Inspect()
	}
	switch {
	case err != nil && configured != "":
		return nil, fmt.Errorf("docker.supervisor_binary: %w", err)
	case err != nil:
		return nil, fmt.Errorf("docker provider: %w", err)
	}
	return bin, nil
}
