package docker

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/internal/testkit"
	"github.com/sandbox-mcp/sandbox-mcp/providers/internal/replicas"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// tokenB is a second token's namespace, as the server's token resolver
// makes it: the first token's threads have plain keys.
const tokenB = "@0123456789abcdef"

// running is the id of thread's running container, or "".
func (f *fixture) running(t testing.TB, thread string) string {
	t.Helper()
	for _, c := range f.ours(t, false) {
		if c.Labels[labelThread] == thread {
			return c.ID
		}
	}
	return ""
}

// use acquires thread, runs true in it and, unless hold, releases it.
func (f *fixture) use(t testing.TB, thread string, hold bool) error {
	t.Helper()
	sb, err := f.p.Acquire(t.Context(), thread)
	if err != nil {
		t.Fatal(err)
	}
	if hold {
		t.Cleanup(func() { f.p.Release(thread) })
	} else {
		defer f.p.Release(thread)
	}
	_, err = sb.Exec(t.Context(), sandbox.ExecRequest{Command: "true", Timeout: time.Minute, Output: sandbox.NewCapture(1<<10, 1<<10)})
	return err
}

// inFlight starts a call in thread (`sleep 120`) and returns once the
// provider counts it in flight; end ends the call (and releases thread).
func (f *fixture) inFlight(t testing.TB, thread string) (end func()) {
	t.Helper()
	sb, err := f.p.Acquire(t.Context(), thread)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		sb.Exec(ctx, sandbox.ExecRequest{Command: "sleep 120", Timeout: 2 * time.Minute, Output: sandbox.NewCapture(1<<10, 1<<10)})
	}()
	end = func() { cancel(); <-done; f.p.Release(thread) }
	name := f.p.containerName(thread)
	if !testkit.Poll(time.Minute, 10*time.Millisecond, func() bool { inUse, _ := f.p.boxes.Used(name); return inUse && f.p.boxes.ID(name) != "" }) {
		end()
		t.Fatalf("the call in %s never showed as in flight", thread)
	}
	t.Cleanup(func() { cancel(); <-done })
	return end
}

// startJob starts `sleep 300` as a job of thread, released after.
func (f *fixture) startJob(t testing.TB, thread string) sandbox.JobInfo {
	t.Helper()
	sb, err := f.p.Acquire(t.Context(), thread)
	if err != nil {
		t.Fatal(err)
	}
	defer f.p.Release(thread)
	j, err := sb.(sandbox.Jobs).StartJob(t.Context(), sandbox.JobRequest{Command: "sleep 300"})
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// jobState is the state of thread's job id.
func (f *fixture) jobState(t testing.TB, thread, id string) string {
	t.Helper()
	sb, err := f.p.Acquire(t.Context(), thread)
	if err != nil {
		t.Fatal(err)
	}
	defer f.p.Release(thread)
	list, err := sb.(sandbox.Jobs).Jobs(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range list {
		if j.ID == id {
			return j.State
		}
	}
	return "missing"
}

// A call canceled mid-way leaves no container running that no table
// holds: a cleanup's removal outlives the call's cancel (the engine starts
// a container whose start call was canceled all the same), and no
// container is taken to make room when the question whether it is busy was
// cut short (it was forgotten, its removal failed, and it ran on: reaped by
// nobody, beyond the cap).
func TestCanceledCallLeavesNoContainerUntracked(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(c *Config) { c.Replicas = 2; c.IdleTimeout = -1 })
	for _, th := range []string{"a", "b"} {
		if err := f.use(t, th, false); err != nil {
			t.Fatal(err)
		}
	}
	canceled, cancel := context.WithCancel(t.Context())
	cancel()
	var a replicas.Box
	for _, b := range f.p.boxes.Snapshot() {
		if b.Thread == "a" {
			a = b
		}
	}
	if a.ID == "" {
		t.Fatal("thread a's container is not in the table")
	}
	if f.p.takeIdle(canceled, a) || f.p.boxes.ID(a.Name) != a.ID {
		t.Fatal("a canceled call took an idle container to make room")
	}
	f.p.remove(canceled, f.running(t, "b"))
	if id := f.running(t, "b"); id != "" {
		t.Fatalf("a canceled call's removal left container %.12s running", id)
	}
}

// Issue #24 item 4: another token's new threads never take a container
// whose job runs, nor one within its token's share; the new token's own
// idle one goes instead, and once nothing may go its call says so.
func TestReplicasAcrossTokensSpareAnothersJob(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(c *Config) { c.Replicas = 2; c.IdleTimeout = -1 })
	job := f.startJob(t, "a1") // A's dev server; A's session ended
	a1 := f.running(t, "a1")
	for i, th := range []string{tokenB + "/b1", tokenB + "/b2", tokenB + "/b3"} {
		if err := f.use(t, th, false); err != nil {
			t.Fatalf("B's thread %d: %v", i+1, err)
		}
		if got := f.running(t, "a1"); got != a1 {
			t.Fatalf("after B's thread %d: A's container %.12s, want %.12s still running", i+1, got, a1)
		}
	}
	// Two tenants, replicas 2: a share of one each. B's third took B's
	// own idle second, never A's.
	if f.running(t, tokenB+"/b2") != "" || f.running(t, tokenB+"/b1") != "" || f.running(t, tokenB+"/b3") == "" {
		t.Fatalf("B's containers: b1 %q b2 %q b3 %q; want only b3 running", f.running(t, tokenB+"/b1"), f.running(t, tokenB+"/b2"), f.running(t, tokenB+"/b3"))
	}
	if s := f.jobState(t, "a1", job.ID); s != sandbox.JobRunning {
		t.Fatalf("A's job: %s", s)
	}
	// A call of B's runs in b3: nothing may go for b4.
	end := f.inFlight(t, tokenB+"/b3")
	defer end()
	err := f.use(t, tokenB+"/b4", false)
	if !errors.Is(err, replicas.ErrFull) || !strings.Contains(err.Error(), "docker.replicas (2) reached") {
		t.Fatalf("B's fourth with a call in flight in b3 and A's job running: %v, want docker.replicas (2) reached", err)
	}
	if f.running(t, "a1") != a1 || f.running(t, tokenB+"/b3") == "" || f.running(t, tokenB+"/b4") != "" {
		t.Fatal("a container went, or b4's was made, though nothing could go")
	}
	if s := f.jobState(t, "a1", job.ID); s != sandbox.JobRunning {
		t.Fatalf("A's job at the end: %s", s)
	}
}

// One tenant: the least recently used container goes unless its job runs
// or a call is in flight there; with every one so, the new thread's call
// is a tool error naming docker.replicas, and goes through once the call
// ends. A thread merely held (a session open between calls) may go: its
// next call makes its container again.
func TestReplicasSpareJobsAndCallsInFlight(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(c *Config) { c.Replicas = 2; c.IdleTimeout = -1 })
	job := f.startJob(t, "j1") // the least recently used, with a job
	j1 := f.running(t, "j1")
	end := f.inFlight(t, "c1")
	c1 := f.running(t, "c1")
	err := f.use(t, "n1", false)
	if !errors.Is(err, replicas.ErrFull) || !strings.Contains(err.Error(), "docker.replicas (2) reached") || !strings.Contains(err.Error(), "raise docker.replicas") {
		t.Fatalf("a third thread with a job and a call in flight running: %v", err)
	}
	if f.running(t, "j1") != j1 || f.running(t, "c1") != c1 || f.running(t, "n1") != "" {
		t.Fatal("a container in use went, or n1's was made")
	}
	if s := f.jobState(t, "j1", job.ID); s != sandbox.JobRunning {
		t.Fatalf("the job: %s", s)
	}
	end()                                        // the call ends: c1 may go now (j1 still may not)
	if err := f.use(t, "n1", true); err != nil { // n1 stays held, between calls
		t.Fatal(err)
	}
	if f.running(t, "c1") != "" || f.running(t, "j1") != j1 || f.running(t, "n1") == "" {
		t.Fatalf("after c1's call: c1 %q j1 %q n1 %q; want c1 gone", f.running(t, "c1"), f.running(t, "j1"), f.running(t, "n1"))
	}
	// A held thread with no call in flight is not in use: n2 takes n1's place.
	if err := f.use(t, "n2", false); err != nil {
		t.Fatalf("a new thread with one thread held between calls: %v", err)
	}
	if f.running(t, "n1") != "" || f.running(t, "j1") != j1 {
		t.Fatal("want the held, idle n1 gone and j1 kept")
	}
	if s := f.jobState(t, "j1", job.ID); s != sandbox.JobRunning {
		t.Fatalf("the job at the end: %s", s)
	}
}

// Concurrent first calls of new threads never both take the last place.
func TestReplicasConcurrentNewThreadsStayUnderTheCap(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(c *Config) { c.Replicas = 2; c.IdleTimeout = -1 })
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() { errs[i] = f.use(t, "c"+string(rune('0'+i)), true) })
	}
	wg.Wait()
	ok := 0
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case !errors.Is(err, replicas.ErrFull):
			t.Fatal(err)
		}
	}
	if n := len(f.ours(t, false)); ok < 2 || n > 2 {
		t.Fatalf("%d calls went through, %d containers running; replicas 2", ok, n)
	}
}

// Discard removes the thread's container now, ending its job, while its
// last Release happens, and the thread's files; a thread without a
// container is no error; a thread used again gets a new container.
func TestDiscard(t *testing.T) {
	t.Parallel()
	ticks := t.TempDir()
	os.Chmod(ticks, 0o777)
	f := newFixture(t, func(c *Config) {
		c.IdleTimeout = -1
		c.Mounts = []sandbox.Mount{{Virtual: "/mnt/ticks", Host: ticks}}
	})
	if err := f.p.Discard(t.Context(), "never-used"); err != nil {
		t.Fatalf("a thread without a sandbox: %v", err)
	}
	if err := f.p.Discard(t.Context(), "../x"); err == nil {
		t.Fatal("a bad thread key passed")
	}
	const th = "anon-1"
	sb, err := f.p.Acquire(t.Context(), th)
	if err != nil {
		t.Fatal(err)
	}
	j, err := sb.(sandbox.Jobs).StartJob(t.Context(), sandbox.JobRequest{Command: "while :; do echo x >> /mnt/ticks/tick; sleep 0.1; done"})
	if err != nil {
		t.Fatal(err)
	}
	tick := filepath.Join(ticks, "tick")
	dir := filepath.Join(f.cfg.StateDir, "threads", th)
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("the thread's directory: %v", err)
	}
	if f.running(t, th) == "" {
		t.Fatal("no container")
	}
	if !testkit.Poll(10*time.Second, 50*time.Millisecond, func() bool { _, err := os.Stat(tick); return err == nil }) {
		t.Fatalf("the job wrote no tick: %s", f.jobState(t, th, j.ID))
	}
	var wg sync.WaitGroup
	wg.Go(func() { f.p.Release(th) })
	if err := f.p.Discard(t.Context(), th); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if n := len(f.ours(t, true)); n != 0 {
		t.Fatalf("%d containers of the thread after Discard", n)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the thread's directory after Discard: %v", err)
	}
	if before, after := testkit.Growth(t, tick, 500*time.Millisecond); after != before {
		t.Fatalf("the job still writes after Discard: %d -> %d bytes", before, after)
	}
	if err := f.p.Discard(t.Context(), th); err != nil {
		t.Fatalf("a second Discard: %v", err)
	}
	if err := f.use(t, th, false); err != nil {
		t.Fatalf("the thread used again: %v", err)
	}
}
