package docker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"

	"github.com/sandbox-mcp/sandbox-mcp/internal/testkit"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox/sandboxtest"
	"github.com/sandbox-mcp/sandbox-mcp/search"
)

const (
	baseImage    = "sandbox-mcp-base:latest"
	noShellImage = "sandbox-mcp-test:noshell"
	busyboxImage = "sandbox-mcp-test:busybox"
	// Stock-like images whose CMD exits at once without a terminal.
	busyboxShImage    = "sandbox-mcp-test:busybox-sh"
	debianPythonImage = "sandbox-mcp-test:debian-python"
)

// requireDocker skips when no engine answers or the images are missing,
// unless CI asked for docker (SANDBOX_MCP_REQUIRE_DOCKER=1): then it fails.
func requireDocker(t testing.TB, images ...string) {
	t.Helper()
	skip := func(format string, args ...any) {
		t.Helper()
		if os.Getenv("SANDBOX_MCP_REQUIRE_DOCKER") == "1" {
			t.Fatalf(format, args...)
		}
		t.Skipf("SKIPPED: "+format, args...)
	}
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		skip("no docker client: %v", err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if _, err := cli.Ping(ctx); err != nil {
		skip("no docker engine: %v", err)
	}
	for _, img := range append([]string{baseImage}, images...) {
		if _, err := cli.ImageInspect(ctx, img); err != nil {
			skip("image %s missing: run deploy/docker/build-images.sh", img)
		}
	}
}

func randomPrefix(t testing.TB) string {
	var b [4]byte
	rand.Read(b[:])
	return "smcp-test-" + hex.EncodeToString(b[:])
}

type fixture struct {
	p      *Provider
	cli    *client.Client
	cfg    Config
	prefix string
}

func newFixture(t testing.TB, mutate ...func(*Config)) *fixture {
	t.Helper()
	requireDocker(t)
	skills := t.TempDir()
	os.WriteFile(filepath.Join(skills, "skill.md"), []byte("skill\n"), 0o644)
	os.Chmod(skills, 0o755)
	cfg := Config{StateDir: t.TempDir(), SkillsDir: skills, ContainerPrefix: randomPrefix(t), Image: baseImage, Memory: "256m"}
	for _, m := range mutate {
		m(&cfg)
	}
	os.Chmod(cfg.StateDir, 0o755)
	p, err := New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	cli, _ := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	f := &fixture{p: p, cli: cli, cfg: cfg, prefix: cfg.ContainerPrefix}
	t.Cleanup(func() {
		p.Close()
		f.removeAll()
		cli.Close()
	})
	return f
}

func (f *fixture) ours(t testing.TB, all bool) []container.Summary {
	t.Helper()
	list, err := f.cli.ContainerList(context.Background(), container.ListOptions{All: all, Filters: filters.NewArgs(filters.Arg("label", labelPrefix+"="+f.prefix))})
	if err != nil {
		t.Fatal(err)
	}
	return list
}

func (f *fixture) removeAll() {
	list, _ := f.cli.ContainerList(context.Background(), container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", labelPrefix+"="+f.prefix))})
	for _, c := range list {
		f.cli.ContainerRemove(context.Background(), c.ID, container.RemoveOptions{Force: true})
	}
}

func (f *fixture) acquire(t testing.TB, thread string) sandbox.Sandbox {
	t.Helper()
	sb, err := f.p.Acquire(t.Context(), thread)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.p.Release(thread) })
	return sb
}

func execOut(t testing.TB, sb sandbox.Sandbox, cmd string) (string, sandbox.ExecResult) {
	t.Helper()
	c := sandbox.NewCapture(1<<20, 1<<20)
	res, err := sb.Exec(t.Context(), sandbox.ExecRequest{Command: cmd, Timeout: time.Minute, Output: c})
	if err != nil {
		t.Fatalf("%s: %v", cmd, err)
	}
	h, tl, _ := c.Result()
	return string(h) + string(tl), res
}

// noCap lifts the replicas cap: the contract's subtests each hold a thread
// of their own at once, as many as run in parallel, and a cap that never
// takes a held sandbox would fail the ones beyond it.
func noCap(c *Config) { c.Replicas = -1 }

func TestContract(t *testing.T) {
	contract(t, newFixture(t, noCap))
}

// TestContractExecChannel: the whole contract with the supervisor reached
// through a relay exec (docker.channel: exec, as on Docker Desktop), on
// the stock busybox image whose CMD exits.
func TestContractExecChannel(t *testing.T) {
	f := newFixture(t, noCap, func(c *Config) { c.Channel = channelExec })
	contract(t, f)
	f2 := newFixture(t, func(c *Config) { c.Channel = channelExec; c.Image = busyboxShImage })
	sb := f2.acquire(t, "busybox")
	if out, res := execOut(t, sb, "echo hi from $(busybox | head -c 7)"); out != "hi from BusyBox\n" || res.ExitCode != 0 {
		t.Fatalf("busybox sh over the exec channel: exit %d %q", res.ExitCode, out)
	}
	// No host directory for the socket: a tmpfs of the container's own.
	info, err := f2.cli.ContainerInspect(t.Context(), f2.ours(t, false)[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range info.Mounts {
		if m.Destination == runDir {
			t.Errorf("the run directory is a %s mount from %s, want a tmpfs", m.Type, m.Source)
		}
	}
	if _, ok := info.HostConfig.Tmpfs[runDir]; !ok {
		t.Errorf("no tmpfs at %s: %v", runDir, info.HostConfig.Tmpfs)
	}
	if entries, _ := os.ReadDir(filepath.Join(f2.cfg.StateDir, "supervisors")); len(entries) != 0 {
		t.Errorf("socket directories made on the host: %v", entries)
	}
}

func contract(t *testing.T, f *fixture) {
	n := 0
	var mu sync.Mutex
	sandboxtest.Run(t, sandboxtest.Options{ReadOnlyEnforced: true}, func(t *testing.T) sandbox.Sandbox {
		mu.Lock()
		n++
		thread := "contract-" + string(rune('a'+n))
		mu.Unlock()
		return f.acquire(t, thread)
	})
}

func TestHardenedLabelledLazyContainer(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	sb := f.acquire(t, "hard")
	if got := f.ours(t, true); len(got) != 0 {
		t.Fatalf("a container exists before first use: %v", got[0].Names)
	}
	out, _ := execOut(t, sb, "id -u; cat /proc/self/status | grep -E '^(CapEff|NoNewPrivs)'; ls /sys/class/net")
	if out != "1000\nNoNewPrivs:\t1\nCapEff:\t0000000000000000\nlo\n" && out != "1000\nCapEff:\t0000000000000000\nNoNewPrivs:\t1\nlo\n" {
		t.Errorf("inside: %q", out)
	}
	list := f.ours(t, true)
	if len(list) != 1 {
		t.Fatalf("%d containers", len(list))
	}
	info, err := f.cli.ContainerInspect(t.Context(), list[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if info.Name != "/"+f.p.containerName("hard") || info.Config.Labels[labelThread] != "hard" || info.Config.Labels[labelManaged] != "true" {
		t.Errorf("name %s labels %v", info.Name, info.Config.Labels)
	}
	hc := info.HostConfig
	if strings.Join(hc.CapDrop, ",") != "ALL" || !strings.Contains(strings.Join(hc.SecurityOpt, ","), "no-new-privileges") ||
		hc.NetworkMode != "none" || hc.PidsLimit == nil || *hc.PidsLimit != 512 || hc.Memory != 256<<20 || hc.NanoCPUs != 1e9 {
		t.Errorf("host config: capdrop %v secopt %v net %v pids %v mem %d cpu %d", hc.CapDrop, hc.SecurityOpt, hc.NetworkMode, hc.PidsLimit, hc.Memory, hc.NanoCPUs)
	}
}

func TestConcurrentFirstCallsMakeOneContainer(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	sb := f.acquire(t, "race")
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			execOut(t, sb, "true")
		}()
	}
	wg.Wait()
	// A second server process on the same state dir finds the same one.
	p2, err := New(t.Context(), f.cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Close()
	sb2, _ := p2.Acquire(t.Context(), "race")
	execOut(t, sb2, "true")
	if got := f.ours(t, true); len(got) != 1 {
		t.Fatalf("%d containers for one thread", len(got))
	}
}

func TestRecreatedAfterRemovalWithFilesIntact(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	sb := f.acquire(t, "phoenix")
	execOut(t, sb, "echo kept > /mnt/user-data/workspace/kept.txt; echo lost > /tmp/lost.txt")
	first := f.ours(t, true)[0].ID
	f.cli.ContainerRemove(t.Context(), first, container.RemoveOptions{Force: true})
	out, res := execOut(t, sb, "cat kept.txt; cat /tmp/lost.txt 2>/dev/null || echo no-tmp")
	if res.ExitCode != 0 || out != "kept\nno-tmp\n" {
		t.Fatalf("after removal: exit %d %q", res.ExitCode, out)
	}
	if got := f.ours(t, true); len(got) != 1 || got[0].ID == first {
		t.Fatalf("containers after removal: %d", len(got))
	}
	// Killed (stopped) rather than removed: started again.
	f.cli.ContainerKill(t.Context(), f.ours(t, true)[0].ID, "KILL")
	if out, _ := execOut(t, sb, "cat kept.txt"); out != "kept\n" {
		t.Fatalf("after kill: %q", out)
	}
}

func TestFoundAgainAfterRestart(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	sb := f.acquire(t, "again")
	execOut(t, sb, "true")
	id := f.ours(t, true)[0].ID
	f.p.Close()
	p2, err := New(t.Context(), f.cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Close()
	sb2, _ := p2.Acquire(t.Context(), "again")
	execOut(t, sb2, "true")
	if got := f.ours(t, true); len(got) != 1 || got[0].ID != id {
		t.Fatalf("restart made another container")
	}
}

func TestIdleTimeoutAndReplicas(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(c *Config) { c.IdleTimeout = 2 * time.Second; c.Replicas = 2 })
	for _, th := range []string{"r1", "r2", "r3"} {
		sb, err := f.p.Acquire(t.Context(), th)
		if err != nil {
			t.Fatal(err)
		}
		execOut(t, sb, "true")
		f.p.Release(th) // a held thread's container is never taken
		time.Sleep(50 * time.Millisecond)
	}
	running := f.ours(t, false)
	if len(running) != 2 {
		t.Fatalf("%d running, replicas 2", len(running))
	}
	for _, c := range running {
		if c.Labels[labelThread] == "r1" {
			t.Errorf("the least recently used (r1) kept running")
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for len(f.ours(t, true)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d containers still there after the idle timeout", len(f.ours(t, true)))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func TestContainerPathsAndNoShellImage(t *testing.T) {
	t.Parallel()
	requireDocker(t, noShellImage)
	f := newFixture(t)
	sb := f.acquire(t, "paths")
	fsys := sb.FS()
	err := fsys.Edit(t.Context(), "/tmp/deep/new.txt", func(_ []byte, exists bool) ([]byte, error) {
		if exists {
			t.Error("exists")
		}
		return []byte("in the container\n"), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if out, _ := execOut(t, sb, "cat /tmp/deep/new.txt; stat -c %U /tmp/deep/new.txt /tmp/deep"); out != "in the container\nsandbox\nsandbox\n" {
		t.Fatalf("bash sees %q", out)
	}
	r, err := fsys.Open(t.Context(), "/etc/os-release")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(r)
	r.Close()
	if !strings.Contains(string(b), "Debian") {
		t.Fatalf("/etc/os-release: %q", b)
	}
	entries, err := fsys.ReadDir(t.Context(), "/mnt/user-data")
	if err != nil || len(entries) != 3 {
		t.Fatalf("ReadDir /mnt/user-data: %v %v", entries, err)
	}

	ns := newFixture(t, func(c *Config) { c.Image = noShellImage })
	sb2 := ns.acquire(t, "noshell")
	r, err = sb2.FS().Open(t.Context(), "/data/motd.txt")
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(r)
	r.Close()
	if string(b) != "hello from the image\n" {
		t.Fatalf("motd %q", b)
	}
	// File operations act as the container's user, as its commands do:
	// the image's root-owned /data is not the agent's to change.
	appendLine := func(old []byte, _ bool) ([]byte, error) { return append(old, "edited\n"...), nil }
	if err := sb2.FS().Edit(t.Context(), "/data/motd.txt", appendLine); !errors.Is(err, sandbox.ErrPermission) {
		t.Fatalf("edit of a root-owned image file as the container user: %v, want permission denied", err)
	}
	for range 2 {
		if err := sb2.FS().Edit(t.Context(), "/tmp/notes/n.txt", appendLine); err != nil {
			t.Fatal(err)
		}
	}
	r, err = sb2.FS().Open(t.Context(), "/tmp/notes/n.txt")
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(r)
	r.Close()
	if string(b) != "edited\nedited\n" {
		t.Fatalf("after two edits %q", b)
	}
	c := sandbox.NewCapture(1000, 1000)
	if _, err := sb2.Exec(t.Context(), sandbox.ExecRequest{Command: "true", Timeout: time.Minute, Output: c}); err == nil || !strings.Contains(err.Error(), "shell") {
		t.Fatalf("bash without a shell: %v", err)
	}
}

// The engine down at start-up: the provider starts anyway, each call gets
// a clear error naming the engine (and no host path: not the socket's),
// and calls work once the engine is back.
func TestEngineDownAtStartThenBack(t *testing.T) {
	requireDocker(t)
	upstream := engineSocket()
	sock := filepath.Join(t.TempDir(), "docker.sock")
	t.Setenv("DOCKER_HOST", "unix://"+sock)
	cli, err := client.NewClientWithOpts(client.WithHost("unix://"+upstream), client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{StateDir: t.TempDir(), ContainerPrefix: randomPrefix(t), Image: baseImage, Memory: "256m"}
	start := time.Now()
	p, err := New(t.Context(), cfg)
	if err != nil {
		t.Fatalf("start-up with the engine down: %v", err)
	}
	f := &fixture{p: p, cli: cli, cfg: cfg, prefix: cfg.ContainerPrefix}
	t.Cleanup(func() {
		p.Close()
		f.removeAll()
		cli.Close()
	})
	if time.Since(start) > 15*time.Second {
		t.Fatalf("start-up took %v", time.Since(start))
	}
	for range 2 {
		_, err := f.p.Acquire(t.Context(), "later")
		if err == nil || !strings.Contains(err.Error(), "docker engine not reachable") || strings.Contains(err.Error(), sock) {
			t.Fatalf("a call with the engine down: err = %v", err)
		}
	}
	stop := testkit.UnixProxy(t, sock, upstream)
	defer stop()
	sb := f.acquire(t, "later")
	if out, res := execOut(t, sb, "echo back"); out != "back\n" || res.ExitCode != 0 {
		t.Fatalf("after the engine came back: exit %d %q", res.ExitCode, out)
	}
}

// engineSocket is the real engine's socket.
func engineSocket() string {
	if h := os.Getenv("DOCKER_HOST"); strings.HasPrefix(h, "unix://") && !strings.Contains(h, os.TempDir()) {
		return strings.TrimPrefix(h, "unix://")
	}
	return "/var/run/docker.sock"
}

func TestTwoThreadsTwoContainers(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	a, b := f.acquire(t, "one"), f.acquire(t, "two")
	execOut(t, a, "echo a > mine.txt")
	out, _ := execOut(t, b, "cat mine.txt 2>&1 || echo absent")
	if out != "cat: mine.txt: No such file or directory\nabsent\n" {
		t.Fatalf("thread two sees %q", out)
	}
	if got := f.ours(t, false); len(got) != 2 || got[0].ID == got[1].ID {
		t.Fatalf("%d containers for two threads", len(got))
	}
}

// The engine going away mid-run: a warm sandbox goes on working (its
// calls go to its supervisor, not through the engine), and a call that
// needs the engine — a new thread's first — gets a clear error, not a
// hang: the provider talks to the real engine through a proxy socket that
// the test then shuts.
func TestEngineGoneMidRun(t *testing.T) {
	requireDocker(t)
	upstream := engineSocket()
	sock := filepath.Join(t.TempDir(), "proxy.sock")
	stop := testkit.UnixProxy(t, sock, upstream)
	defer stop()
	t.Setenv("DOCKER_HOST", "unix://"+sock)
	f := newFixture(t)
	// The fixture's own cleanup talks through the shut proxy: remove the
	// container through the engine itself.
	t.Cleanup(func() {
		cli, err := client.NewClientWithOpts(client.WithHost("unix://"+upstream), client.WithAPIVersionNegotiation())
		if err != nil {
			return
		}
		defer cli.Close()
		f.cli = cli
		f.removeAll()
	})
	sb := f.acquire(t, "gone")
	execOut(t, sb, "true")
	stop()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if out, res := execOut(t, sb, "echo warm"); out != "warm\n" || res.ExitCode != 0 {
		t.Fatalf("warm call with the engine gone: exit %d %q", res.ExitCode, out)
	}
	sb2 := f.acquire(t, "gone-new")
	_, err := sb2.Exec(ctx, sandbox.ExecRequest{Command: "true", Timeout: time.Minute, Output: io.Discard})
	if err == nil || !strings.Contains(err.Error(), "docker engine") || ctx.Err() != nil {
		t.Fatalf("err = %v (ctx %v)", err, ctx.Err())
	}
}

// The shell state with busybox's sh (no bash, no export -p path): cd and
// export persist, ResetState forgets.
func TestShOnlyImageShellState(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.Image = busyboxImage })
	sb := f.acquire(t, "sh-only-state")
	shell := func(cmd string, reset bool) string {
		t.Helper()
		c := sandbox.NewCapture(1<<20, 1<<20)
		res, err := sb.Exec(t.Context(), sandbox.ExecRequest{Command: cmd, Timeout: time.Minute, Output: c, Shell: true, ResetState: reset})
		h, tl, _ := c.Result()
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("%s: %+v %v %q", cmd, res, err, h)
		}
		return string(h) + string(tl)
	}
	shell("cd /mnt/user-data/outputs && export FOO='a b' && nosuch 2>/dev/null; true", false)
	if out := shell(`pwd; echo "$FOO"`, false); out != sandbox.OutputsDir+"\na b\n" {
		t.Fatalf("the next command: %q", out)
	}
	if out := shell(`pwd; echo "${FOO-unset}"`, true); out != sandbox.WorkspaceDir+"\nunset\n" {
		t.Fatalf("ResetState: %q", out)
	}
}

// An image with sh but no bash (busybox): the wrapper runs with sh, and
// exit codes, background children and timeouts behave as with bash.
func TestShOnlyImage(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.Image = busyboxImage })
	sb := f.acquire(t, "sh-only")
	for range 2 { // the second call starts with sh directly
		out, res := execOut(t, sb, `echo "$0:$1:$#:${__smcp_c-unset}"; nosuchcommand; exit 3`)
		if res.ExitCode != 3 || !strings.HasPrefix(out, "bash::0:unset\n") || !strings.Contains(out, "nosuchcommand") {
			t.Fatalf("exit %d, output %q", res.ExitCode, out)
		}
	}
	out, _ := execOut(t, sb, `sleep 30 & echo $!`)
	pid := strings.TrimSpace(out)
	if out, _ := execOut(t, sb, `kill -0 `+pid+` 2>/dev/null && echo alive || echo gone`); out != "gone\n" {
		t.Fatalf("background child %s after its call: %q", pid, out)
	}
	start := time.Now()
	res, err := sb.Exec(t.Context(), sandbox.ExecRequest{Command: "sleep 30", Timeout: time.Second, Output: io.Discard})
	if err != nil || !res.TimedOut || time.Since(start) > 15*time.Second {
		t.Fatalf("timeout: %+v %v after %v", res, err, time.Since(start))
	}
}

// t26821 and t49091 share the first 8 hex of their sha256, the length of
// the names the provider once used: each must still get its own container
// and files.
func TestCollidingThreadsGetTheirOwnContainers(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	if f.p.containerName("t26821") == f.p.containerName("t49091") {
		t.Fatalf("t26821 and t49091 have one container name: %s", f.p.containerName("t26821"))
	}
	a, b := f.acquire(t, "t26821"), f.acquire(t, "t49091")
	execOut(t, a, "echo secret > secret.txt; echo mine > /tmp/mine.txt")
	out, _ := execOut(t, b, "cat secret.txt /tmp/mine.txt 2>/dev/null || echo absent")
	if out != "absent\n" {
		t.Fatalf("thread t49091 sees t26821's files: %q", out)
	}
	if got := f.ours(t, false); len(got) != 2 {
		t.Fatalf("%d containers for two threads", len(got))
	}
}

// A container found under a thread's name whose label names another thread
// is never used for it: each call gets a clear error, the container is
// left as it is.
func TestContainerOfAnotherThreadIsRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	name := f.p.containerName("t26821")
	resp, err := f.cli.ContainerCreate(t.Context(), &container.Config{
		Image: baseImage,
		Cmd:   []string{"sleep", "infinity"},
		Labels: map[string]string{
			labelManaged: "true",
			labelThread:  "t49091",
			labelState:   f.p.stateTag,
			labelPrefix:  f.prefix,
		},
	}, &container.HostConfig{NetworkMode: "none"}, nil, nil, name)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.cli.ContainerStart(t.Context(), resp.ID, container.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	sb := f.acquire(t, "t26821")
	for range 2 {
		_, err := sb.Exec(t.Context(), sandbox.ExecRequest{Command: "touch /tmp/intruder", Timeout: time.Minute, Output: io.Discard})
		if err == nil || !strings.Contains(err.Error(), "another thread") || !strings.Contains(err.Error(), name) {
			t.Fatalf("exec in another thread's container: err = %v", err)
		}
		if _, err := sb.FS().Stat(t.Context(), "/etc/os-release"); err == nil || !strings.Contains(err.Error(), "another thread") {
			t.Fatalf("stat in another thread's container: err = %v", err)
		}
	}
	if _, err := f.cli.ContainerStatPath(t.Context(), resp.ID, "/tmp/intruder"); err == nil {
		t.Fatal("the command ran in another thread's container")
	}
	info, err := f.cli.ContainerInspect(t.Context(), resp.ID)
	if err != nil || !info.State.Running {
		t.Fatalf("the other thread's container was disturbed: %v", err)
	}
}

// A container found under a thread's name whose settings label differs
// (not the provider's own: only a hand-made one or a hash collision can
// be there) is never used, and never removed: a command may run in it.
func TestContainerOfOtherSettingsUnderItsNameIsRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	name := f.p.containerName("spec")
	resp, err := f.cli.ContainerCreate(t.Context(), &container.Config{
		Image: baseImage,
		Cmd:   []string{"sleep", "infinity"},
		Labels: map[string]string{
			labelManaged: "true",
			labelThread:  "spec",
			labelState:   f.p.stateTag,
			labelPrefix:  f.prefix,
			labelSpec:    "0123456789abcdef",
		},
	}, &container.HostConfig{NetworkMode: "none"}, nil, nil, name)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.cli.ContainerStart(t.Context(), resp.ID, container.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	sb := f.acquire(t, "spec")
	_, err = sb.Exec(t.Context(), sandbox.ExecRequest{Command: "true", Timeout: time.Minute, Output: io.Discard})
	if err == nil || !strings.Contains(err.Error(), "other settings") || !strings.Contains(err.Error(), name) {
		t.Fatalf("exec in a container of other settings: err = %v", err)
	}
	info, err := f.cli.ContainerInspect(t.Context(), resp.ID)
	if err != nil || !info.State.Running {
		t.Fatalf("the container of other settings was disturbed: %v", err)
	}
}

// An image whose user is root (busybox) runs as a non-root user unless
// docker.user says root; either way a setuid program planted in the
// workspace is no setuid-root file another host user can reach and run.
func TestRootImageAndSetuidPrograms(t *testing.T) {
	t.Parallel()
	requireDocker(t, busyboxImage)
	if os.Geteuid() != 0 {
		t.Skip("SKIPPED: needs root (the server's ownership handling and setpriv)")
	}
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("SKIPPED: no setpriv")
	}
	for _, c := range []struct {
		user, wantUID string
		warn          bool
	}{{"", "1000", false}, {"root", "0", true}} {
		var logs testkit.Buffer
		f := newFixture(t, func(cfg *Config) {
			cfg.Image = busyboxImage
			cfg.User = c.user
			cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		})
		// Every directory above the state dir open to all, as a home or
		// /var/lib would be: only the provider's own modes may protect.
		for d := f.cfg.StateDir; d != "/"; d = filepath.Dir(d) {
			if fi, err := os.Stat(d); err == nil && fi.Mode().Perm()&0o005 != 0o005 {
				os.Chmod(d, fi.Mode().Perm()|0o005)
			}
		}
		thread := "suid-" + map[string]string{"": "default", "root": "root"}[c.user]
		sb := f.acquire(t, thread)
		out, res := execOut(t, sb, "id -u; cp /bin/busybox ./bb && chmod 4755 ./bb && chmod 4755 /mnt/user-data/outputs && echo planted")
		if lines := strings.Fields(out); len(lines) == 0 || lines[0] != c.wantUID {
			t.Fatalf("user %q: container runs as %q (want uid %s); exit %d", c.user, out, c.wantUID, res.ExitCode)
		}
		if got := strings.Contains(logs.String(), "containers run as root"); got != c.warn {
			t.Errorf("user %q: root warning logged %v; logs: %s", c.user, got, logs.String())
		}
		bb := filepath.Join(sandbox.ThreadDir(f.cfg.StateDir, thread), "workspace", "bb")
		fi, err := os.Stat(bb)
		if err != nil {
			t.Fatalf("user %q: %v (bash said %q)", c.user, err, out)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if c.user == "" && st.Uid == 0 {
			t.Errorf("a file written in the container belongs to root on the host: %v", fi.Mode())
		}
		// An ordinary host user (and the container's own uid, should it be a
		// host user's) can neither reach nor run it.
		for _, uid := range []string{"4242", "1000", "65534"} {
			// Through sh: setpriv itself execs with root's capabilities still
			// in effect, which would reach any path.
			cmd := exec.Command("setpriv", "--reuid="+uid, "--regid="+uid, "--clear-groups", "--inh-caps=-all", "/bin/sh", "-c", `"$0" id -u`, bb)
			if got, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(got), "ermission denied") {
				t.Errorf("user %q: host uid %s runs the planted program: %v %q", c.user, uid, err, got)
			}
		}
	}
}

// Two installs (state dirs) on one engine, with the same prefix and the
// same thread, each get their own container and files.
func TestTwoStateDirsOneEngine(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	g := newFixture(t, func(c *Config) { c.ContainerPrefix = f.prefix })
	a, b := f.acquire(t, "shared-id"), g.acquire(t, "shared-id")
	execOut(t, a, "echo first > install.txt")
	out, res := execOut(t, b, "cat install.txt 2>/dev/null || echo absent")
	if out != "absent\n" || res.ExitCode != 0 {
		t.Fatalf("the second install's thread: exit %d %q", res.ExitCode, out)
	}
	if got := f.ours(t, false); len(got) != 2 {
		t.Fatalf("%d containers for one thread id of two installs", len(got))
	}
	// One state dir named two ways (a symlink) is one install.
	link := filepath.Join(t.TempDir(), "state-link")
	if err := os.Symlink(f.cfg.StateDir, link); err != nil {
		t.Fatal(err)
	}
	cfg := f.cfg
	cfg.StateDir = link
	p3, err := New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p3.Close()
	sb3, err := p3.Acquire(t.Context(), "shared-id")
	if err != nil {
		t.Fatal(err)
	}
	defer p3.Release("shared-id")
	if out, _ := execOut(t, sb3, "cat install.txt"); out != "first\n" {
		t.Fatalf("the same state dir through a symlink: %q", out)
	}
	if got := f.ours(t, false); len(got) != 2 {
		t.Fatalf("%d containers after the symlinked server's call, want 2", len(got))
	}
}

// Images whose own CMD exits at once (a shell, python3 without a
// terminal) still make a container that stays up: its main process is the
// supervisor, nothing from the image.
func TestStockImagesStayUp(t *testing.T) {
	t.Parallel()
	requireDocker(t, busyboxShImage, debianPythonImage)
	for _, img := range []string{busyboxShImage, debianPythonImage} {
		f := newFixture(t, func(c *Config) { c.Image = img })
		sb := f.acquire(t, "stock")
		out, res := execOut(t, sb, "echo up; id -u")
		if out != "up\n1000\n" || res.ExitCode != 0 {
			t.Fatalf("%s: exit %d %q", img, res.ExitCode, out)
		}
		time.Sleep(time.Second)
		list := f.ours(t, false)
		if len(list) != 1 {
			t.Fatalf("%s: %d running containers a second later", img, len(list))
		}
		if out, _ := execOut(t, sb, "echo still"); out != "still\n" {
			t.Fatalf("%s: second call %q", img, out)
		}
		if out, err := f.cli.ContainerInspect(t.Context(), list[0].ID); err != nil || !out.State.Running || out.RestartCount != 0 {
			t.Fatalf("%s: state %+v %v", img, out.State, err)
		}
	}
}

// A timeout kills only its own command: another one running in the same
// container goes on and ends normally — with sh being dash (Debian images),
// busybox sh, whatever shell the wrapper runs with.
func TestTimeoutKillsOnlyItsCommand(t *testing.T) {
	t.Parallel()
	requireDocker(t, busyboxImage, debianPythonImage)
	for _, img := range []string{baseImage, debianPythonImage, busyboxImage} {
		t.Run(img, func(t *testing.T) {
			f := newFixture(t, func(c *Config) { c.Image = img })
			sb := f.acquire(t, "two-calls")
			sandboxtest.TimeoutKillsOnlyItsCommand(t, sb)
			if o, _ := execOut(t, sb, "ps -o pid,args 2>/dev/null | grep -c 'sleep 6[0]' || true"); strings.TrimSpace(o) != "0" {
				t.Errorf("the timed-out command still runs: %q", o)
			}
		})
	}
}

// A container made with other settings is not used: one made as root
// (docker.user: root) never serves the thread once the config no longer
// says root — neither for another server on the same state dir nor after a
// restart, which removes it (idle) rather than leave it behind.
func TestContainerOfOtherSettingsReplaced(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(c *Config) { c.User = "root" })
	sb := f.acquire(t, "settings")
	if out, _ := execOut(t, sb, "id -u"); out != "0\n" {
		t.Fatalf("docker.user root: uid %q", out)
	}
	cfg := f.cfg
	cfg.User = ""
	// Another server on the same state dir, while the first still runs.
	p2, err := New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Close()
	sb2, err := p2.Acquire(t.Context(), "settings")
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Release("settings")
	for range 2 {
		if out, _ := execOut(t, sb2, "id -u"); out != "1000\n" {
			t.Fatalf("without docker.user: uid %q", out)
		}
		// The first server, still saying root, keeps its own.
		if out, _ := execOut(t, sb, "id -u"); out != "0\n" {
			t.Fatalf("docker.user root, beside a server without: uid %q", out)
		}
	}
	if got := f.ours(t, true); len(got) != 2 {
		t.Fatalf("%d containers for one thread of two settings, want 2", len(got))
	}
	// A restart without root adopts the container made without, and
	// removes the one made as root.
	f.p.Close()
	p2.Close()
	p3, err := New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p3.Close()
	got := f.ours(t, true)
	if len(got) != 1 || got[0].Labels[labelSpec] != p3.spec {
		t.Fatalf("a restart kept %d containers, or the one of other settings", len(got))
	}
	sb3, err := p3.Acquire(t.Context(), "settings")
	if err != nil {
		t.Fatal(err)
	}
	defer p3.Release("settings")
	if out, _ := execOut(t, sb3, "id -u"); out != "1000\n" {
		t.Fatalf("after a restart without docker.user: uid %q", out)
	}
}

// Two servers on one state dir whose settings differ (here the
// environment) each have their own container for a thread: a command
// running in the first's survives the second's start-up and calls, and
// each gets its own output.
func TestOtherSettingsDoNotKillCommands(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(c *Config) { c.Environment = map[string]string{"FOO": "a"} })
	sbA := f.acquire(t, "both")
	execOut(t, sbA, "true") // its container is up
	var wg sync.WaitGroup
	var outA string
	var resA sandbox.ExecResult
	wg.Add(1)
	go func() {
		defer wg.Done()
		outA, resA = execOut(t, sbA, "sleep 6; echo A-done $FOO")
	}()
	time.Sleep(time.Second) // the command runs
	cfg := f.cfg
	cfg.Environment = map[string]string{"FOO": "b"}
	p2, err := New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Close()
	sbB, err := p2.Acquire(t.Context(), "both")
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Release("both")
	for range 2 {
		if out, res := execOut(t, sbB, "echo B $FOO"); out != "B b\n" || res.ExitCode != 0 {
			t.Fatalf("the second server: exit %d %q", res.ExitCode, out)
		}
	}
	wg.Wait()
	if outA != "A-done a\n" || resA.ExitCode != 0 {
		t.Fatalf("the first server's command: exit %d %q", resA.ExitCode, outA)
	}
	if got := f.ours(t, false); len(got) != 2 {
		t.Fatalf("%d running containers for one thread of two settings, want 2", len(got))
	}
}

// A server that started with the engine down adopts the containers of an
// earlier run on its first call, while its reaper already runs: the two
// must not race on what the provider knows of its containers (-race).
func TestAdoptAfterEngineDownStartDoesNotRace(t *testing.T) {
	f := newFixture(t)
	execOut(t, f.acquire(t, "one"), "true")
	f.p.Release("one")
	f.p.Close()
	upstream := engineSocket()
	sock := filepath.Join(t.TempDir(), "docker.sock")
	t.Setenv("DOCKER_HOST", "unix://"+sock)
	cfg := f.cfg
	cfg.IdleTimeout = 100 * time.Millisecond
	p, err := New(t.Context(), cfg)
	if err != nil {
		t.Fatalf("start-up with the engine down: %v", err)
	}
	defer p.Close()
	time.Sleep(300 * time.Millisecond) // the reaper is at work
	stop := testkit.UnixProxy(t, sock, upstream)
	defer stop()
	sb, err := p.Acquire(t.Context(), "two")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Release("two")
	if out, _ := execOut(t, sb, "echo two"); out != "two\n" {
		t.Fatalf("after the engine came back: %q", out)
	}
}

// hangingEngine listens at sock and answers nothing: an engine that hangs.
func hangingEngine(t testing.TB, sock string) {
	t.Helper()
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
}

// While the engine hangs, calls that arrive together share one attempt to
// connect: each answers within about one attempt's time limit, not after
// the attempts of every call before it.
func TestHungEngineCallsShareOneConnectAttempt(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "docker.sock")
	hangingEngine(t, sock)
	t.Setenv("DOCKER_HOST", "unix://"+sock)
	const limit, calls = time.Second, 8
	cfg := Config{StateDir: t.TempDir(), ContainerPrefix: randomPrefix(t), Image: baseImage, connectTimeout: limit}
	p, err := New(t.Context(), cfg)
	if err != nil {
		t.Fatalf("start-up with the engine hanging: %v", err)
	}
	defer p.Close()
	start := time.Now()
	errs := make(chan error, calls)
	for i := range calls {
		go func() {
			_, err := p.Acquire(t.Context(), "hung-"+strconv.Itoa(i))
			errs <- err
		}()
	}
	for range calls {
		if err := <-errs; err == nil || !strings.Contains(err.Error(), "docker engine not reachable") {
			t.Fatalf("a call with the engine hanging: err = %v", err)
		}
	}
	// One after another they would take calls × limit.
	if took := time.Since(start); took > calls*limit/2 {
		t.Fatalf("%d calls with the engine hanging took %v (limit %v each)", calls, took, limit)
	}
}

// A search of container paths runs in the container's supervisor and
// finds what the engine finds over the FS; one of the thread's directories is
// searched host-side, with the same result as in the container.
func TestSearchWhereTheFilesAre(t *testing.T) {
	t.Parallel()
	requireDocker(t)
	f := newFixture(t)
	sb := f.acquire(t, "search")
	type searcher interface {
		Grep(context.Context, search.GrepRequest, func(search.FileMatch) error) error
	}
	s, ok := sb.FS().(searcher)
	if !ok {
		t.Fatal("the docker FS does not search")
	}
	if _, res := execOut(t, sb, "mkdir -p /tmp/s/a /mnt/user-data/workspace/s && echo needle > /tmp/s/a/1 && echo hay > /tmp/s/2 && echo needle > /mnt/user-data/workspace/s/3"); res.ExitCode != 0 {
		t.Fatal("setup failed")
	}
	for _, c := range []struct{ root, want string }{
		{"/tmp/s", "/tmp/s/a/1"},
		{"/etc", ""}, // filled from grep -rl below
		{"/mnt/user-data/workspace/s", "/mnt/user-data/workspace/s/3"},
		{"/mnt/user-data", "/mnt/user-data/workspace/s/3"},
	} {
		pattern := "needle"
		if c.root == "/etc" {
			// As the engine finds it here, over the FS, one call a file.
			pattern = "bookworm"
			var want []string
			search.Grep(t.Context(), sb.FS(), search.GrepRequest{Root: c.root, Pattern: pattern, Mode: search.ModeFiles}, func(m search.FileMatch) error {
				want = append(want, m.Path)
				return nil
			})
			if c.want = strings.Join(want, "\n"); len(want) < 2 {
				t.Fatalf("the engine found %q in /etc", want)
			}
		}
		var got []string
		err := s.Grep(t.Context(), search.GrepRequest{Root: c.root, Pattern: pattern, Mode: search.ModeFiles}, func(m search.FileMatch) error {
			got = append(got, m.Path)
			return nil
		})
		if err != nil || strings.Join(got, "\n") != c.want {
			t.Errorf("grep %s: %q, err %v; want %q", c.root, got, err, c.want)
		}
	}
}
