package docker

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// waitWarm waits until p's pool holds n boxes.
func waitWarm(t testing.TB, p *Provider, n int) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for p.pool.Ready() < n {
		if time.Now().After(deadline) {
			t.Fatalf("the warm pool holds %d boxes after 90 s, want %d", p.pool.Ready(), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// containerOf is the id of the container the thread's commands run in, as
// its hostname says (the engine names a container's host by its id).
func containerOf(t *testing.T, sb sandbox.Sandbox) string {
	t.Helper()
	out, _ := execOut(t, sb, "hostname")
	return strings.TrimSpace(out)
}

// A new thread's first call claims a warm box: its commands run there, as
// the thread's container user, with the thread's own directories at the
// virtual paths (what a command writes is on the host in the thread's
// directory and read by the file tools, and the other way round); the
// pool refills with another box; the next thread claims that one and sees
// nothing of the first, in its files or in the box.
func TestWarmPoolClaim(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.Warm = 1 })
	waitWarm(t, f.p, 1)
	first := f.p.pool.ready[0]

	a := f.acquire(t, "wa")
	if id := containerOf(t, a); !strings.HasPrefix(first.id, id) {
		t.Fatalf("thread wa runs in %s, want the warm box %s", id, shortID(first.id))
	}
	if out, res := execOut(t, a, "echo from-a > /mnt/user-data/workspace/a.txt; echo secret-a > /tmp/a; id -u; ls /mnt/user-data"); res.ExitCode != 0 || !strings.HasPrefix(out, "1000\n") {
		t.Fatalf("in the claimed box: %q %+v", out, res)
	}
	host := filepath.Join(sandbox.ThreadDir(f.cfg.StateDir, "wa"), "workspace", "a.txt")
	if b, err := os.ReadFile(host); err != nil || string(b) != "from-a\n" {
		t.Fatalf("the thread's host file: %q %v", b, err)
	}
	w, err := a.FS().Create(t.Context(), "/mnt/user-data/uploads/up.txt")
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(w, "uploaded\n")
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if out, _ := execOut(t, a, "cat /mnt/user-data/uploads/up.txt"); out != "uploaded\n" {
		t.Fatalf("a file the file tools wrote, read in the box: %q", out)
	}
	if got := f.p.boxName("wa"); got != first.name {
		t.Fatalf("thread wa's container is named %s, want the claimed box %s", got, first.name)
	}

	waitWarm(t, f.p, 1)
	second := f.p.pool.ready[0]
	if second.id == first.id {
		t.Fatal("the pool refilled with the box already claimed")
	}
	b := f.acquire(t, "wb")
	if id := containerOf(t, b); !strings.HasPrefix(second.id, id) {
		t.Fatalf("thread wb runs in %s, want the new warm box %s", id, shortID(second.id))
	}
	if out, _ := execOut(t, b, "ls -A /mnt/user-data/workspace /mnt/user-data/uploads; cat /tmp/a 2>&1 || true"); strings.Contains(out, "a.txt") || strings.Contains(out, "up.txt") || strings.Contains(out, "secret-a") {
		t.Fatalf("thread wb sees thread wa's files: %q", out)
	}
	// Each thread keeps its own box.
	if id := containerOf(t, a); !strings.HasPrefix(first.id, id) {
		t.Fatalf("thread wa moved to %s", id)
	}
}

// An empty pool falls back to making the thread's container; a thread
// that already has files is never given a warm box (its files stay where
// they are) and finds them in its own container.
func TestWarmPoolFallbacks(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.Warm = 1 })
	waitWarm(t, f.p, 1)
	dir := sandbox.ThreadDir(f.cfg.StateDir, "old")
	if err := os.MkdirAll(filepath.Join(dir, "workspace"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(filepath.Join(dir, "workspace"), 0o777)
	if err := os.WriteFile(filepath.Join(dir, "workspace", "kept.txt"), []byte("kept\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	old := f.acquire(t, "old")
	if out, _ := execOut(t, old, "cat /mnt/user-data/workspace/kept.txt"); out != "kept\n" {
		t.Fatalf("a thread with files: %q", out)
	}
	if f.p.boxName("old") != f.p.containerName("old") || f.p.pool.Ready() != 1 {
		t.Fatalf("a thread with files took a warm box (name %s, pool %d)", f.p.boxName("old"), f.p.pool.Ready())
	}
	// Two new threads at once with one box: one claims, one starts its own.
	n1, n2 := f.acquire(t, "n1"), f.acquire(t, "n2")
	for _, c := range []struct {
		sb   sandbox.Sandbox
		name string
	}{{n1, "n1"}, {n2, "n2"}} {
		if out, res := execOut(t, c.sb, "echo ok"); out != "ok\n" || res.ExitCode != 0 {
			t.Fatalf("thread %s: %q", c.name, out)
		}
	}
	if (f.p.boxName("n1") == f.p.containerName("n1")) == (f.p.boxName("n2") == f.p.containerName("n2")) {
		t.Fatalf("with one warm box, want one thread to claim it: n1 %s, n2 %s", f.p.boxName("n1"), f.p.boxName("n2"))
	}
}

// A claimed box outlives its server as any thread's container does: the
// next server on the state dir adopts it for its thread, Discard removes
// it with the thread. The boxes nobody claimed go with their server.
func TestWarmPoolRestartAndDiscard(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.Warm = 1 })
	waitWarm(t, f.p, 1)
	sb, err := f.p.Acquire(t.Context(), "kept")
	if err != nil {
		t.Fatal(err)
	}
	execOut(t, sb, "echo here > /mnt/user-data/workspace/here.txt")
	claimed := f.p.boxName("kept")
	waitWarm(t, f.p, 1)
	unclaimed := f.p.pool.ready[0].id
	f.p.Release("kept")
	f.p.Close()
	if _, err := f.cli.ContainerInspect(t.Context(), unclaimed); err == nil {
		t.Fatalf("the unclaimed warm box %s outlived its server", shortID(unclaimed))
	}

	p2, err := New(t.Context(), f.cfg) // no warm boxes this time
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Close()
	f.p = p2
	info, err := f.cli.ContainerInspect(t.Context(), claimed)
	if err != nil {
		t.Fatalf("the claimed box is gone after its server stopped: %v", err)
	}
	sb2, err := p2.Acquire(t.Context(), "kept")
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Release("kept")
	if out, _ := execOut(t, sb2, "cat /mnt/user-data/workspace/here.txt; hostname"); !strings.HasPrefix(out, "here\n") || !strings.HasPrefix(info.ID, strings.TrimSpace(strings.TrimPrefix(out, "here\n"))) {
		t.Fatalf("after a restart the thread runs elsewhere or lost its file: %q (box %s)", out, shortID(info.ID))
	}
	if err := p2.Discard(t.Context(), "kept"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.cli.ContainerInspect(t.Context(), claimed); err == nil {
		t.Fatal("Discard left the thread's claimed box")
	}
	if _, err := os.Stat(filepath.Join(claimsDir(f.cfg.StateDir), claimed)); err == nil {
		t.Fatal("Discard left the box's claim")
	}
}

// A server killed with boxes in its pool: the next server on the state
// dir removes them (their pool's lock is free), and never a live
// server's.
func TestWarmPoolDeadPoolRemoved(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.Warm = 1 })
	waitWarm(t, f.p, 1)
	live := f.p.pool.ready[0].id
	// A pool whose server died: its box made by hand, its lock not held.
	dead := &pool{p: f.p, id: "deadbeef0000", dir: filepath.Join(f.cfg.StateDir, "warm", "deadbeef0000")}
	os.MkdirAll(dead.dir, 0o700)
	os.WriteFile(filepath.Join(dead.dir, "lock"), nil, 0o600)
	cfg := f.p.containerConfig("")
	cfg.Labels[labelWarm] = dead.id
	resp, err := f.cli.ContainerCreate(t.Context(), cfg, f.p.hostConfig(nil, t.TempDir()), nil, nil, f.cfg.ContainerPrefix+"-warm-00000000000000aa")
	if err != nil {
		t.Fatal(err)
	}
	p2, err := New(t.Context(), f.cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Close()
	if _, err := f.cli.ContainerInspect(t.Context(), resp.ID); err == nil {
		t.Fatal("a dead pool's warm box was left")
	}
	if _, err := f.cli.ContainerInspect(t.Context(), live); err != nil {
		t.Fatalf("a live server's warm box was removed: %v", err)
	}
	if _, err := os.Stat(dead.dir); err == nil {
		t.Fatal("a dead pool's directory was left")
	}
}

// BenchmarkColdFirstCallWarm is BenchmarkColdFirstCall with docker.warm: a
// new thread's acquire and first command, the pool refilled between.
func BenchmarkColdFirstCallWarm(b *testing.B) {
	f := newFixture(b, func(c *Config) { c.Replicas = -1; c.Warm = 1; c.Channel = os.Getenv("DOCKER_CHANNEL") })
	i := 0
	for b.Loop() {
		b.StopTimer()
		waitWarm(b, f.p, 1)
		i++
		thread := "coldwarm-" + strings.Repeat("x", i%3) + time.Now().Format("150405.000000000")
		b.StartTimer()
		sb, err := f.p.Acquire(b.Context(), thread)
		if err != nil {
			b.Fatal(err)
		}
		execOut(b, sb, "true")
		b.StopTimer()
		if f.p.boxName(thread) == f.p.containerName(thread) {
			b.Fatal("the thread did not claim a warm box")
		}
		f.p.Release(thread)
		b.StartTimer()
	}
}

// A warm box's shell is warmed as a thread's first call would use it: the
// claiming thread's first bash command (Shell, as the bash tool runs it)
// runs in a spare shell, and sees what a thread's first command sees in a
// container made for it — the workspace, $0, the environment (but for the
// host name: the container's id).
func TestWarmPoolShellWarmed(t *testing.T) {
	const cmd = `pwd; echo "$0 $SHLVL $-"; env | grep -v '^HOSTNAME=' | sort; ` +
		`case $(tr '\0' ' ' </proc/$$/cmdline) in *__smc""p_c*) echo spare;; *) echo fresh;; esac`
	shell := func(sb sandbox.Sandbox) string {
		t.Helper()
		c := sandbox.NewCapture(1<<20, 1<<20)
		res, err := sb.Exec(t.Context(), sandbox.ExecRequest{Command: cmd, Timeout: time.Minute, Output: c, Shell: true})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("%v %+v", err, res)
		}
		h, tl, _ := c.Result()
		return string(h) + string(tl)
	}
	f := newFixture(t, func(c *Config) { c.Warm = 1 })
	waitWarm(t, f.p, 1)
	warm := shell(f.acquire(t, "warmshell"))
	cold := newFixture(t)
	fresh := shell(cold.acquire(t, "warmshell"))
	if !strings.HasSuffix(warm, "\nspare\n") || !strings.HasSuffix(fresh, "\nfresh\n") {
		t.Fatalf("the claimed box's first command ran %q; in a new container %q", warm, fresh)
	}
	if strings.TrimSuffix(warm, "spare\n") != strings.TrimSuffix(fresh, "fresh\n") {
		t.Fatalf("the first command in a claimed box sees\n%s\nin a container made for the thread\n%s", warm, fresh)
	}
}

// At docker.replicas, a claim's first call makes room as any new thread's
// does: the least recently used container goes (in the background, the
// call not waiting for it) and the claimed box runs the call; the
// provider's Close waits for the removal.
func TestWarmPoolClaimAtTheCap(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.Warm = 1; c.Replicas = 1; c.IdleTimeout = -1 })
	waitWarm(t, f.p, 1)
	if err := f.use(t, "cap-a", false); err != nil {
		t.Fatal(err)
	}
	a := f.p.boxes.ID(f.p.boxName("cap-a"))
	if a == "" {
		t.Fatal("thread cap-a has no container")
	}
	waitWarm(t, f.p, 1)
	b := f.acquire(t, "cap-b")
	if out, _ := execOut(t, b, "echo ok"); out != "ok\n" {
		t.Fatalf("a claim at the cap: %q", out)
	}
	if f.p.boxes.ID(f.p.boxName("cap-a")) != "" {
		t.Fatal("cap-a's container is still counted under the cap")
	}
	f.p.Release("cap-b")
	f.p.Close()
	for _, c := range f.ours(t, true) {
		if c.ID == a {
			t.Fatalf("cap-a's container %s is still there after Close: %s", shortID(a), c.State)
		}
	}
}
