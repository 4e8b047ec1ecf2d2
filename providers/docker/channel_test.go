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
	if _, err := supervisorBinary(notELF); err == nil || !strings.Contains(err.Error(), "docker.supervisor_binary: the supervisor binary "+notELF+" is not a Linux (ELF) build") {
		t.Errorf("a Mach-O supervisor_binary: %v", err)
	}
	if _, err := supervisorBinary(filepath.Join(t.TempDir(), "missing")); err == nil || !strings.HasPrefix(err.Error(), "docker.supervisor_binary: ") {
		t.Errorf("a missing supervisor_binary: %v", err)
	}
}

// A macOS or Windows server finds the Linux build the release puts beside
// it, makes it executable when an unpacker dropped the mode, and says
// where it looked when there is none.
func TestOwnSupervisorBinaryBeside(t *testing.T) {
	t.Parallel()
	self, err := os.Executable() // this test binary: a Linux ELF
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	exe := filepath.Join(dir, "sandbox-mcp")
	if _, err := ownSupervisorBinary("darwin", "arm64", exe); err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "linux", "sandbox-mcp")) {
		t.Fatalf("no Linux build beside: %v", err)
	}
	os.Mkdir(filepath.Join(dir, "linux"), 0o755)
	beside := filepath.Join(dir, "linux", "sandbox-mcp")
	os.WriteFile(beside, data, 0o644)
	bin, err := ownSupervisorBinary("windows", "amd64", exe)
	if err != nil {
		t.Fatal(err)
	}
	if bin.Path != beside {
		t.Errorf("supervisor %s, want %s", bin.Path, beside)
	}
	if fi, _ := os.Stat(beside); fi.Mode()&0o111 == 0 {
		t.Errorf("the Linux build was left without exec bits: %v", fi.Mode())
	}
	if bin, err := ownSupervisorBinary("linux", "amd64", self); err != nil || bin.Path != self {
		t.Errorf("on Linux: %v %v", bin, err)
	}
	// The extension (.mcpb) holds both architectures' Linux builds,
	// linux-ARCH/sandbox-mcp beside the server: the server's own
	// architecture's is taken.
	ext := t.TempDir()
	for _, a := range []string{"amd64", "arm64"} {
		os.Mkdir(filepath.Join(ext, "linux-"+a), 0o755)
		os.WriteFile(filepath.Join(ext, "linux-"+a, "sandbox-mcp"), data, 0o755)
	}
	bin, err = ownSupervisorBinary("darwin", "arm64", filepath.Join(ext, "sandbox-mcp"))
	if err != nil || bin.Path != filepath.Join(ext, "linux-arm64", "sandbox-mcp") {
		t.Errorf("in the extension: %v %v", bin, err)
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
