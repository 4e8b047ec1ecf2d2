package kubernetes

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandbox-mcp/sandbox-mcp/internal/testkit"
	"github.com/sandbox-mcp/sandbox-mcp/providers/internal/replicas"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// tokenB is a second token's namespace, as the server's token resolver
// makes it: the first token's threads have plain keys.
const tokenB = "@0123456789abcdef"

// running is the uid of thread's live Pod, or "".
func (f *fixture) running(t *testing.T, thread string) string {
	t.Helper()
	for _, pod := range f.pods(t) {
		if pod.Annotations[annThread] == thread {
			return string(pod.UID)
		}
	}
	return ""
}

// podsOf is how many live Pods name thread.
func (f *fixture) podsOf(t *testing.T, thread string) int {
	t.Helper()
	n := 0
	for _, pod := range f.pods(t) {
		if pod.Annotations[annThread] == thread {
			n++
		}
	}
	return n
}

// use acquires thread on p, runs true in it and, unless hold, releases it.
func use(t *testing.T, p *Provider, thread string, hold bool) error {
	t.Helper()
	sb, err := p.Acquire(t.Context(), thread)
	if err != nil {
		t.Fatal(err)
	}
	if hold {
		t.Cleanup(func() { p.Release(thread) })
	} else {
		defer p.Release(thread)
	}
	_, err = sb.Exec(t.Context(), sandbox.ExecRequest{Command: "true", Timeout: time.Minute, Output: &strings.Builder{}})
	return err
}

// inFlight starts a call in thread on p (`sleep 120`) and returns once p
// counts it in flight and says so on the Pod (its in-use annotation, which
// other replicas read); end ends the call and releases thread.
func inFlight(t *testing.T, p *Provider, thread string) (end func()) {
	t.Helper()
	sb, err := p.Acquire(t.Context(), thread)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		sb.Exec(ctx, sandbox.ExecRequest{Command: "sleep 120", Timeout: 2 * time.Minute, Output: &strings.Builder{}})
	}()
	end = func() { cancel(); <-done; p.Release(thread) }
	t.Cleanup(func() { cancel(); <-done })
	name := sb.(*Sandbox).PodName()
	waitFor(t, 2*time.Minute, "the call in "+thread+" in flight and said so", func() bool {
		if inUse, _ := p.boxes.Used(name); !inUse || p.boxes.ID(name) == "" {
			return false
		}
		pod, err := p.cs.CoreV1().Pods(p.cfg.Namespace).Get(t.Context(), name, metav1.GetOptions{})
		return err == nil && pod.Annotations[p.inUseKey()] != ""
	})
	return end
}

// startJob starts `sleep 300` as a job of thread, released after.
func startJob(t *testing.T, p *Provider, thread string) sandbox.JobInfo {
	t.Helper()
	sb := acquireNow(t, p, thread)
	defer p.Release(thread)
	j, err := sb.StartJob(t.Context(), sandbox.JobRequest{Command: "sleep 300"})
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// jobState is the state of thread's job id.
func jobState(t *testing.T, p *Provider, thread, id string) string {
	t.Helper()
	sb := acquireNow(t, p, thread)
	defer p.Release(thread)
	list, err := sb.Jobs(t.Context())
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

// isFull: err is the cap's, naming kubernetes.replicas (limit).
func isFull(err error, limit string) bool {
	return errors.Is(err, replicas.ErrFull) && strings.Contains(err.Error(), "kubernetes.replicas ("+limit+") reached")
}

// Issue #24 item 4: another token's new threads never take a Pod whose
// job runs, nor one within its token's share; the new token's own idle
// one goes instead, and once nothing may go its call says so.
func TestReplicasAcrossTokensSpareAnothersJob(t *testing.T) {
	t.Parallel()
	cfg := newConfig(t)
	cfg.Replicas, cfg.IdleTimeout = 2, -1
	p := newProviderT(t, cfg)
	f := &fixture{p: p, cfg: cfg}
	a := "a1-" + randomHex(4)
	job := startJob(t, p, a) // A's dev server; A's session ended
	uidA := f.running(t, a)
	b := func(i int) string { return tokenB + "/b" + string(rune('0'+i)) + "-" + a }
	for i := 1; i <= 3; i++ {
		if err := use(t, p, b(i), false); err != nil {
			t.Fatalf("B's thread %d: %v", i, err)
		}
		if got := f.running(t, a); got != uidA {
			t.Fatalf("after B's thread %d: A's Pod %q, want %q still running", i, got, uidA)
		}
	}
	// Two tenants, replicas 2: a share of one each. B's third took B's
	// own idle second, never A's.
	if f.running(t, b(1)) != "" || f.running(t, b(2)) != "" || f.running(t, b(3)) == "" {
		t.Fatalf("B's Pods: b1 %q b2 %q b3 %q; want only b3", f.running(t, b(1)), f.running(t, b(2)), f.running(t, b(3)))
	}
	if s := jobState(t, p, a, job.ID); s != sandbox.JobRunning {
		t.Fatalf("A's job: %s", s)
	}
	// A call of B's runs in b3: nothing may go for b4.
	end := inFlight(t, p, b(3))
	defer end()
	if err := use(t, p, b(4), false); !isFull(err, "2") {
		t.Fatalf("B's fourth with a call in flight in b3 and A's job running: %v, want kubernetes.replicas (2) reached", err)
	}
	if f.running(t, a) != uidA || f.running(t, b(3)) == "" || f.running(t, b(4)) != "" {
		t.Fatal("a Pod went, or b4's was made, though nothing could go")
	}
	if s := jobState(t, p, a, job.ID); s != sandbox.JobRunning {
		t.Fatalf("A's job at the end: %s", s)
	}
}

// One tenant: the least recently used Pod goes unless its job runs or a
// call is in flight there; with every one so, the new thread's call is a
// tool error naming kubernetes.replicas, and goes through once the call
// ends. A thread merely held (a session open between calls) may go.
func TestReplicasSpareJobsAndCallsInFlight(t *testing.T) {
	t.Parallel()
	cfg := newConfig(t)
	cfg.Replicas, cfg.IdleTimeout = 2, -1
	p := newProviderT(t, cfg)
	f := &fixture{p: p, cfg: cfg}
	sfx := "-" + randomHex(4)
	j1, c1, n1, n2 := "j1"+sfx, "c1"+sfx, "n1"+sfx, "n2"+sfx
	job := startJob(t, p, j1) // the least recently used, with a job
	uidJ := f.running(t, j1)
	end := inFlight(t, p, c1)
	uidC := f.running(t, c1)
	err := use(t, p, n1, false)
	if !isFull(err, "2") || !strings.Contains(err.Error(), "raise kubernetes.replicas") {
		t.Fatalf("a third thread with a job and a call in flight running: %v", err)
	}
	if f.running(t, j1) != uidJ || f.running(t, c1) != uidC || f.running(t, n1) != "" {
		t.Fatal("a Pod in use went, or n1's was made")
	}
	end()                                       // the call ends: c1 may go now (j1 still may not)
	if err := use(t, p, n1, true); err != nil { // n1 stays held, between calls
		t.Fatal(err)
	}
	if f.running(t, c1) != "" || f.running(t, j1) != uidJ || f.running(t, n1) == "" {
		t.Fatalf("after c1's call: c1 %q j1 %q n1 %q; want c1 gone", f.running(t, c1), f.running(t, j1), f.running(t, n1))
	}
	// A held thread with no call in flight is not in use: n2 takes n1's place.
	if err := use(t, p, n2, false); err != nil {
		t.Fatalf("a new thread with one thread held between calls: %v", err)
	}
	if f.running(t, n1) != "" || f.running(t, j1) != uidJ {
		t.Fatal("want the held, idle n1 gone and j1 kept")
	}
	if s := jobState(t, p, j1, job.ID); s != sandbox.JobRunning {
		t.Fatalf("the job at the end: %s", s)
	}
}

// Two server replicas: a Pod with a call in flight on one is never taken
// by the other for its cap (the caller's in-use annotation says so); once
// the call ended there, it may go (the mark is cleared within a heartbeat).
func TestReplicasInFlightOnAnotherReplica(t *testing.T) {
	t.Parallel()
	cfg := newConfig(t)
	cfg.Replicas, cfg.IdleTimeout = 1, -1
	r1, r2 := newProviderT(t, cfg), newProviderT(t, cfg)
	f := &fixture{p: r1, cfg: cfg}
	t1, t2 := "busy-"+randomHex(4), "other-"+randomHex(4)
	end := inFlight(t, r1, t1)
	uid := f.running(t, t1)
	if err := use(t, r2, t2, false); !isFull(err, "1") {
		t.Fatalf("replica 2, with a call in flight on replica 1's only Pod: %v, want kubernetes.replicas (1) reached", err)
	}
	if f.running(t, t1) != uid {
		t.Fatal("the Pod with a call in flight went")
	}
	end()
	var err error
	waitFor(t, time.Minute, "replica 2's call once replica 1's call ended", func() bool {
		err = use(t, r2, t2, false)
		return err == nil
	})
	if f.running(t, t1) != "" || f.running(t, t2) == "" {
		t.Fatal("want t1's Pod gone for t2's")
	}
}

// Concurrent first calls of new threads never both take the last place.
func TestReplicasConcurrentNewThreadsStayUnderTheCap(t *testing.T) {
	t.Parallel()
	cfg := newConfig(t)
	cfg.Replicas, cfg.IdleTimeout = 2, -1
	p := newProviderT(t, cfg)
	f := &fixture{p: p, cfg: cfg}
	sfx := randomHex(4)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() { errs[i] = use(t, p, "c"+string(rune('0'+i))+"-"+sfx, true) })
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
	if n := len(f.pods(t)); ok < 2 || n > 2 {
		t.Fatalf("%d calls went through, %d Pods; replicas 2", ok, n)
	}
}

// Discard deletes the thread's Pod and waits for it, ending its job, while
// its last Release happens; its node directory (host_path) goes too; a
// thread without a Pod is no error; a thread used again gets a new Pod.
func TestDiscard(t *testing.T) {
	t.Parallel()
	cfg := newConfig(t)
	cfg.IdleTimeout = -1
	ticks := t.TempDir()
	os.Chmod(ticks, 0o777)
	cfg.Mounts = []sandbox.Mount{{Virtual: "/mnt/ticks", Host: ticks}}
	p := newProviderT(t, cfg)
	f := &fixture{p: p, cfg: cfg}
	if err := p.Discard(t.Context(), "never-used"); err != nil {
		t.Fatalf("a thread without a sandbox: %v", err)
	}
	if err := p.Discard(t.Context(), "../x"); err == nil {
		t.Fatal("a bad thread key passed")
	}
	th := tokenB + "/anon-" + randomHex(4)
	sb := acquireNow(t, p, th)
	j, err := sb.StartJob(t.Context(), sandbox.JobRequest{Command: "while :; do echo x >> /mnt/ticks/tick; sleep 0.1; done"})
	if err != nil {
		t.Fatal(err)
	}
	tick := filepath.Join(ticks, "tick")
	waitFor(t, 10*time.Second, "the job's first tick", func() bool { _, err := os.Stat(tick); return err == nil })
	uid := f.running(t, th)
	dir := filepath.Join(cfg.Storage.HostPath, "threads", filepath.FromSlash(th))
	if uid == "" {
		t.Fatal("no Pod")
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("the thread's node directory: %v", err)
	}
	var wg sync.WaitGroup
	wg.Go(func() { p.Release(th) })
	if err := p.Discard(t.Context(), th); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if _, err := cluster.cs.CoreV1().Pods(cfg.Namespace).Get(t.Context(), sb.PodName(), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the Pod after Discard: %v", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the thread's node directory after Discard: %v", err)
	}
	if before, after := testkit.Growth(t, tick, 500*time.Millisecond); after != before {
		t.Fatalf("job %s still writes after Discard: %d -> %d bytes", j.ID, before, after)
	}
	if err := p.Discard(t.Context(), th); err != nil {
		t.Fatalf("a second Discard: %v", err)
	}
	if err := use(t, p, th, false); err != nil {
		t.Fatalf("the thread used again: %v", err)
	}
}

// Discard in pvc mode deletes the thread's claim, and never another
// thread's under its name.
func TestDiscardClaim(t *testing.T) {
	t.Parallel()
	cfg := newConfig(t)
	cfg.IdleTimeout = -1
	cfg.Storage = Storage{Mode: StoragePVC, StorageClass: "smcp-test-none-" + randomHex(4), Size: "1Gi"}
	p := newProviderT(t, cfg)
	claims := cluster.cs.CoreV1().PersistentVolumeClaims(cfg.Namespace)
	claim := func(thread, annotated string) string {
		name := claimName(PodName(cfg.PodPrefix, thread))
		class := cfg.Storage.StorageClass
		_, err := claims.Create(t.Context(), &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: p.labels(), Annotations: map[string]string{annThread: annotated}},
			Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				StorageClassName: &class,
				Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resourceMust("1Gi")}},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { claims.Delete(context.Background(), name, metav1.DeleteOptions{}) })
		return name
	}
	mine, theirs := "gone-"+randomHex(4), "kept-"+randomHex(4)
	name := claim(mine, mine)
	other := claim(theirs, "someone-else")
	for _, th := range []string{mine, theirs} {
		if err := p.Discard(t.Context(), th); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 10*time.Second, "the thread's claim deleted", func() bool {
		c, err := claims.Get(t.Context(), name, metav1.GetOptions{})
		return apierrors.IsNotFound(err) || err == nil && c.DeletionTimestamp != nil
	})
	if c, err := claims.Get(t.Context(), other, metav1.GetOptions{}); err != nil || c.DeletionTimestamp != nil {
		t.Fatalf("another thread's claim under the name: %v", err)
	}
}
