package docker

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"

	"github.com/sandbox-mcp/sandbox-mcp/filelock"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

func TestResolveChannel(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ configured, host, want, err string }{
		{"", "unix:///var/run/docker.sock", channelSocket, ""},
		{"auto", "unix:///var/run/docker.sock", channelSocket, ""},
		{"", "tcp://10.0.0.2:2376", channelExec, ""},
		{"", "ssh://me@box", channelExec, ""},
		{"exec", "unix:///var/run/docker.sock", channelExec, ""},
		{"socket", "tcp://10.0.0.2:2376", "", "docker.channel socket: the supervisor's socket reaches the server only on the engine's own Linux host"},
		{"pipe", "unix:///var/run/docker.sock", "", `docker.channel "pipe": want auto, socket or exec`},
	} {
		got, err := resolveChannel(c.configured, c.host)
		if got != c.want || (err == nil) != (c.err == "") || err != nil && !strings.Contains(err.Error(), c.err) {
			t.Errorf("resolveChannel(%q, %q) = %q, %v; want %q, %q", c.configured, c.host, got, err, c.want, c.err)
		}
	}
}

func TestConfigChannelAndBinaryKeys(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Channel: "socket"}, ""},
		{Config{Channel: "fifo"}, `docker.channel "fifo": want auto, socket or exec`},
		{Config{SupervisorBinary: "bin/sandbox-mcp"}, `docker.supervisor_binary "bin/sandbox-mcp": want an absolute path`},
	} {
		err := c.cfg.Validate()
		if (err == nil) != (c.want == "") || err != nil && !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate(%+v) = %v, want %q", c.cfg, err, c.want)
		}
	}
	// A supervisor_binary that is no Linux build is refused, naming the key.
	notELF := filepath.Join(t.TempDir(), "sandbox-mcp")
	os.WriteFile(notELF, []byte("\xcf\xfa\xed\xfe not an ELF file (a Mach-O header)"), 0o755)
	if _, err := supervisorBinary(notELF, nil); err == nil || !strings.Contains(err.Error(), "docker.supervisor_binary: the supervisor binary "+notELF+" is not a Linux (ELF) build") {
		t.Errorf("a Mach-O supervisor_binary: %v", err)
	}
	if _, err := supervisorBinary(filepath.Join(t.TempDir(), "missing"), nil); err == nil || !strings.HasPrefix(err.Error(), "docker.supervisor_binary: ") {
		t.Errorf("a missing supervisor_binary: %v", err)
	}
}

// stoppingEngine stops the container between a relay exec's creation and
// its attach, once armed: the race of a container that stops as the
// channel is dialled (the engine answers the attach "unable to upgrade to
// tcp, received 500").
type stoppingEngine struct {
	*client.Client
	armed atomic.Bool
	t     *testing.T
}

func (e *stoppingEngine) ContainerExecCreate(ctx context.Context, id string, opts container.ExecOptions) (container.ExecCreateResponse, error) {
	resp, err := e.Client.ContainerExecCreate(ctx, id, opts)
	if err == nil && e.armed.CompareAndSwap(true, false) {
		zero := 0
		if err := e.Client.ContainerStop(ctx, id, container.StopOptions{Timeout: &zero}); err != nil {
			e.t.Errorf("stop: %v", err)
		}
	}
	return resp, err
}

func TestExecChannelContainerStopsWhileDialling(t *testing.T) {
	t.Parallel()
	requireDocker(t)
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	eng := &stoppingEngine{Client: cli, t: t}
	cfg := Config{StateDir: t.TempDir(), ContainerPrefix: randomPrefix(t), Image: baseImage, Memory: "256m", Channel: channelExec}
	setDefaults(&cfg)
	if cfg.Locks, err = filelock.NewFileLocks(filepath.Join(cfg.StateDir, "locks")); err != nil {
		t.Fatal(err)
	}
	p, err := newProvider(t.Context(), cfg, eng, 256<<20)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{p: p, cli: cli, cfg: cfg, prefix: cfg.ContainerPrefix}
	t.Cleanup(func() { p.Close(); f.removeAll(); cli.Close() })
	sb := f.acquire(t, "stops")
	execOut(t, sb, "echo kept > /mnt/user-data/workspace/f")
	// The channel's next dial: kill its relay, so the next call dials
	// again, and stop the container under that dial.
	sb.Exec(t.Context(), sandbox.ExecRequest{Command: `for d in /proc/[0-9]*; do tr '\0' ' ' < $d/cmdline 2>/dev/null | grep -q -- '--conn''ect' && kill -9 ${d#/proc/}; done; sleep 5`, Timeout: time.Minute, Output: io.Discard})
	eng.armed.Store(true)
	if out, res := execOut(t, sb, "cat /mnt/user-data/workspace/f"); out != "kept\n" || res.ExitCode != 0 {
		t.Fatalf("the call after the container stopped under its dial: exit %d %q", res.ExitCode, out)
	}
	if eng.armed.Load() {
		t.Fatal("the container was not stopped under a dial: the test did not test")
	}
}
