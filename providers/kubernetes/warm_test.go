package kubernetes

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fakediscovery "k8s.io/client-go/discovery/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// warmState is how many warm Pods p's pool holds running, and how many of
// them it has a channel open to.
func warmState(p *Provider) (ready, dialed int) {
	w := p.pool
	w.mu.Lock()
	defer w.mu.Unlock()
	for name := range w.ready {
		ready++
		if w.conns[name].c != nil {
			dialed++
		}
	}
	return ready, dialed
}

// waitWarm waits until p's pool holds n running warm Pods, and, with
// dialed, has a channel open to n of them (the Pods it made itself).
func waitWarm(t testing.TB, p *Provider, n int, dialed bool) {
	t.Helper()
	waitFor(t, 2*time.Minute, "warm Pods ready", func() bool {
		r, d := warmState(p)
		return r >= n && (!dialed || d >= n)
	})
}

// warmPods lists the live warm Pods of cfg's prefix no thread claimed.
func (f *fixture) warmPods(t *testing.T) []corev1.Pod {
	t.Helper()
	var out []corev1.Pod
	for _, pod := range f.pods(t) {
		if pod.Labels[labelWarm] != "" && pod.Annotations[annThread] == "" {
			out = append(out, pod)
		}
	}
	return out
}

// warmConfig keeps n warm Pods of the server's own (warm_pool pods, on a
// cluster with agent-sandbox too: agentsandbox_test.go tests that one).
func warmConfig(t *testing.T, n int) Config {
	cfg := newConfig(t)
	cfg.Warm = n
	cfg.WarmPool = WarmPoolPods
	cfg.Replicas = -1
	return cfg
}

func TestWarmConfig(t *testing.T) {
	t.Parallel()
	base := Config{Storage: Storage{Mode: StorageHostPath, HostPath: "/srv/x"}}
	for _, c := range []struct {
		warm int
		mode string
		pool string
		want string
	}{
		{-1, StorageHostPath, "", "kubernetes.warm -1: want 0"},
		{65, StorageHostPath, "", "kubernetes.warm 65: at most 64"},
		{64, StorageHostPath, "", ""},
		{1, StorageHostPath, WarmPoolAgentSandbox, ""},
		{1, StoragePVC, "", ""},
		{1, "", WarmPoolAuto, ""},
		{1, StoragePVC, WarmPoolPods, ""},
		{1, StoragePVC, WarmPoolAgentSandbox, "kubernetes.warm_pool agent-sandbox: needs kubernetes.storage.mode host_path (storage.mode pvc:"},
		{1, "", WarmPoolAgentSandbox, "kubernetes.warm_pool agent-sandbox: needs kubernetes.storage.mode host_path"},
		{0, StoragePVC, WarmPoolAgentSandbox, ""}, // no warm Pods: nothing to refuse
	} {
		cfg := base
		cfg.Warm, cfg.Storage.Mode, cfg.WarmPool = c.warm, c.mode, c.pool
		err := cfg.Validate()
		if (c.want == "") != (err == nil) || (err != nil && (!strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n"))) {
			t.Errorf("warm %d mode %q warm_pool %q: %v, want %q", c.warm, c.mode, c.pool, err, c.want)
		}
	}
}

// The agent-sandbox CRDs are looked for by discovery: the three kinds of
// the extensions group in v1beta1, or none; on the test cluster, discovery
// agrees with the CustomResourceDefinitions it has.
func TestAgentSandboxDiscovery(t *testing.T) {
	t.Parallel()
	fake := &fakediscovery.FakeDiscovery{Fake: &k8stesting.Fake{}}
	if agentSandboxInstalled(t.Context(), fake) {
		t.Fatal("found on a cluster without the group")
	}
	fake.Resources = []*metav1.APIResourceList{{GroupVersion: "extensions.agents.x-k8s.io/v1alpha1",
		APIResources: []metav1.APIResource{{Name: "sandboxtemplates"}, {Name: "sandboxclaims"}, {Name: "sandboxwarmpools"}}}}
	if agentSandboxInstalled(t.Context(), fake) {
		t.Fatal("found with v1alpha1 only (this server speaks v1beta1)")
	}
	fake.Resources = append(fake.Resources, &metav1.APIResourceList{GroupVersion: "extensions.agents.x-k8s.io/v1beta1",
		APIResources: []metav1.APIResource{{Name: "sandboxtemplates"}, {Name: "sandboxclaims"}}})
	if agentSandboxInstalled(t.Context(), fake) {
		t.Fatal("found without sandboxwarmpools")
	}
	fake.Resources[1].APIResources = append(fake.Resources[1].APIResources, metav1.APIResource{Name: "sandboxwarmpools"})
	if !agentSandboxInstalled(t.Context(), fake) {
		t.Fatal("not found with the three kinds")
	}
	requireCluster(t)
	crds := 0
	for _, name := range []string{"sandboxtemplates", "sandboxwarmpools", "sandboxclaims"} {
		err := cluster.cs.Discovery().RESTClient().Get().AbsPath("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/" + name + ".extensions.agents.x-k8s.io").Do(t.Context()).Error()
		if err == nil {
			crds++
		}
	}
	if got := agentSandboxInstalled(t.Context(), cluster.cs.Discovery()); got != (crds == 3) {
		t.Fatalf("discovery says installed %v; the cluster has %d of the 3 CRDs", got, crds)
	}
	t.Logf("the test cluster serves the agent-sandbox CRDs: %v", crds == 3)
}

// A new thread's first call claims a warm Pod, over the channel its maker
// opened: its commands run there, with the thread's own directory at the
// virtual paths (what a command writes is in the thread's node directory
// and read by the file tools, and the other way round); the Pod names the
// thread (annotation, label). The pool refills; the next thread claims the
// new Pod and sees nothing of the first, in its files or in the Pod.
func TestWarmClaim(t *testing.T) {
	t.Parallel()
	cfg := warmConfig(t, 1)
	p := newProviderT(t, cfg)
	f := &fixture{p: p, cfg: cfg}
	waitWarm(t, p, 1, true)
	first := f.warmPods(t)[0]

	ta := "wa-" + randomHex(4)
	a := acquire(t, p, ta)
	if a.PodName() != first.Name {
		t.Fatalf("thread %s got Pod %s, want the warm Pod %s", ta, a.PodName(), first.Name)
	}
	if out, res := execOut(t, a, "echo from-a > /mnt/user-data/workspace/a.txt; echo secret-a > /tmp/a; id -u"); res.ExitCode != 0 || out != "1000\n" {
		t.Fatalf("in the claimed Pod: %q %+v", out, res)
	}
	if n := relays(t, a); n != 1 {
		t.Fatalf("%d relays in the claimed Pod, want the one its maker dialed", n)
	}
	host := filepath.Join(p.threadDir(ta), "workspace", "a.txt")
	if b, err := os.ReadFile(host); err != nil || string(b) != "from-a\n" {
		t.Fatalf("the thread's node file: %q %v", b, err)
	}
	writeFile(t, a, sandbox.UploadsDir+"/up.txt", []byte("uploaded\n"))
	if out, _ := execOut(t, a, "cat /mnt/user-data/uploads/up.txt"); out != "uploaded\n" {
		t.Fatalf("a file the file tools wrote, read in the Pod: %q", out)
	}
	pod, err := cluster.cs.CoreV1().Pods(cfg.Namespace).Get(t.Context(), first.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pod.UID != first.UID || pod.Annotations[annThread] != ta || pod.Labels[labelThread] != threadHash(ta) {
		t.Fatalf("the claimed Pod's thread: annotation %q label %q", pod.Annotations[annThread], pod.Labels[labelThread])
	}
	if got, err := p.podNameOf(t.Context(), ta); err != nil || got != first.Name {
		t.Fatalf("thread %s's Pod is named %s, want %s", ta, got, first.Name)
	}
	if _, err := os.Stat(filepath.Join(p.warmRoot(), first.Name)); !os.IsNotExist(err) {
		t.Fatalf("the claimed Pod's warm directory is still there: %v", err)
	}

	waitWarm(t, p, 1, true)
	second := f.warmPods(t)
	if len(second) != 1 || second[0].Name == first.Name {
		t.Fatalf("the pool refilled with %d Pods", len(second))
	}
	tb := "wb-" + randomHex(4)
	b := acquire(t, p, tb)
	if b.PodName() != second[0].Name {
		t.Fatalf("thread %s got Pod %s, want the new warm Pod %s", tb, b.PodName(), second[0].Name)
	}
	if out, _ := execOut(t, b, "ls -A /mnt/user-data/workspace /mnt/user-data/uploads; cat /tmp/a 2>&1 || true"); strings.Contains(out, "a.txt") || strings.Contains(out, "up.txt") || strings.Contains(out, "secret-a") {
		t.Fatalf("thread %s sees thread %s's files: %q", tb, ta, out)
	}
	if out, _ := execOut(t, a, "cat /mnt/user-data/workspace/a.txt /tmp/a"); out != "from-a\nsecret-a\n" {
		t.Fatalf("thread %s's Pod changed: %q", ta, out)
	}
}

// An empty pool falls back to making the thread's Pod by its own name; a
// thread that already has files never takes a warm Pod.
func TestWarmFallbacks(t *testing.T) {
	t.Parallel()
	cfg := warmConfig(t, 1)
	p := newProviderT(t, cfg)
	f := &fixture{p: p, cfg: cfg}
	waitWarm(t, p, 1, false)
	warm := f.warmPods(t)[0]
	old := "old-" + randomHex(4)
	dir := filepath.Join(p.threadDir(old), "workspace")
	if err := p.makeThreadDir(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "kept.txt"), []byte("kept\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	so := acquire(t, p, old)
	if out, _ := execOut(t, so, "cat /mnt/user-data/workspace/kept.txt"); out != "kept\n" {
		t.Fatalf("a thread with files: %q", out)
	}
	if so.PodName() != PodName(cfg.PodPrefix, old) {
		t.Fatalf("a thread with files took the warm Pod %s", so.PodName())
	}
	if pods := f.warmPods(t); len(pods) != 1 || pods[0].UID != warm.UID {
		t.Fatalf("a thread with files cost the pool its warm Pod (%d warm Pods)", len(pods))
	}
	// Two new threads at once with one warm Pod: one claims it, the
	// other's Pod is made.
	n1, n2 := "n1-"+randomHex(4), "n2-"+randomHex(4)
	var s1, s2 *Sandbox
	var wg sync.WaitGroup
	wg.Go(func() { s1 = acquire(t, p, n1) })
	wg.Go(func() { s2 = acquire(t, p, n2) })
	wg.Wait()
	for _, s := range []*Sandbox{s1, s2} {
		if out, res := execOut(t, s, "echo ok"); out != "ok\n" || res.ExitCode != 0 {
			t.Fatalf("thread %s: %q", s.key, out)
		}
	}
	if p.isWarmName(s1.PodName()) == p.isWarmName(s2.PodName()) {
		t.Fatalf("with one warm Pod, want one thread to claim it: %s, %s", s1.PodName(), s2.PodName())
	}
}

// Two replicas share the pool: two new threads, one on each, race for one
// warm Pod — one claims it, the other falls back; and one new thread on
// both at once, with a warm Pod for each, ends with one Pod that both
// replicas use (the loser's warm Pod goes).
func TestWarmReplicasRace(t *testing.T) {
	t.Parallel()
	cfg := warmConfig(t, 1)
	a, b := newProviderT(t, cfg), newProviderT(t, cfg)
	f := &fixture{p: a, cfg: cfg}
	waitWarm(t, a, 1, false)
	waitWarm(t, b, 1, false)
	if n := len(f.warmPods(t)); n != 1 {
		t.Fatalf("two replicas with warm 1 keep %d warm Pods, want 1 between them", n)
	}
	x, y := "rx-"+randomHex(4), "ry-"+randomHex(4)
	var sx, sy *Sandbox
	var wg sync.WaitGroup
	wg.Go(func() { sx = acquire(t, a, x); execOut(t, sx, "true") })
	wg.Go(func() { sy = acquire(t, b, y); execOut(t, sy, "true") })
	wg.Wait()
	if a.isWarmName(sx.PodName()) == a.isWarmName(sy.PodName()) {
		t.Fatalf("one warm Pod raced for by two replicas: want exactly one claim, got %s and %s", sx.PodName(), sy.PodName())
	}
	execOut(t, sx, "echo x > /mnt/user-data/workspace/x.txt")
	if out, _ := execOut(t, sy, "ls -A /mnt/user-data/workspace"); out != "" {
		t.Fatalf("thread %s sees %q", y, out)
	}

	// One thread, both replicas, a warm Pod each.
	cfg2 := warmConfig(t, 2)
	c, d := newProviderT(t, cfg2), newProviderT(t, cfg2)
	f2 := &fixture{p: c, cfg: cfg2}
	waitWarm(t, c, 2, false)
	waitWarm(t, d, 2, false)
	oneThreadTwoReplicas(t, f2, c, d, false)
}

// oneThreadTwoReplicas acquires one new thread on replicas a and b at
// once (with a first command, when exec): both get the one Pod, which f
// lists once, and each sees what the other wrote. It returns the thread's
// sandbox on a.
func oneThreadTwoReplicas(t *testing.T, f *fixture, a, b *Provider, exec bool) *Sandbox {
	t.Helper()
	z := "rz-" + randomHex(4)
	var sa, sb *Sandbox
	var wg sync.WaitGroup
	wg.Go(func() {
		if sa = acquire(t, a, z); exec {
			execOut(t, sa, "true")
		}
	})
	wg.Go(func() {
		if sb = acquire(t, b, z); exec {
			execOut(t, sb, "true")
		}
	})
	wg.Wait()
	if sa.PodName() != sb.PodName() {
		t.Fatalf("one thread on two replicas got two Pods: %s and %s", sa.PodName(), sb.PodName())
	}
	execOut(t, sa, "echo z > /mnt/user-data/workspace/z.txt")
	if out, _ := execOut(t, sb, "cat /mnt/user-data/workspace/z.txt"); out != "z\n" {
		t.Fatalf("the other replica reads %q", out)
	}
	if n := f.podsOf(t, z); n != 1 {
		t.Fatalf("%d Pods name thread %s", n, z)
	}
	return sa
}

// The pool refills after claims; its Pods are neither idle nor counted
// under replicas; a claimed Pod idles out as any, and the thread's next
// Pod, made by the same name, has the thread's files.
func TestWarmRefillAndIdle(t *testing.T) {
	t.Parallel()
	cfg := warmConfig(t, 1)
	cfg.IdleTimeout = 4 * time.Second
	cfg.Replicas = 1
	p := newProviderT(t, cfg)
	f := &fixture{p: p, cfg: cfg}
	waitWarm(t, p, 1, true)
	th := "idle-" + randomHex(4)
	sb := acquireNow(t, p, th)
	name := sb.PodName()
	if !p.isWarmName(name) {
		t.Fatalf("thread %s did not claim the warm Pod: %s", th, name)
	}
	writeFile(t, sb, sandbox.WorkspaceDir+"/kept.txt", []byte("kept\n"))
	t0 := time.Now()
	waitWarm(t, p, 1, true)
	t.Logf("the pool refilled in %s", time.Since(t0).Round(time.Millisecond))
	warm := f.warmPods(t)[0]
	p.Release(th)
	waitFor(t, time.Minute, "the claimed Pod idled out", func() bool {
		for _, pod := range f.pods(t) {
			if pod.Name == name {
				return false
			}
		}
		return true
	})
	// Idle twice over, the warm Pod is still there, never counted.
	if pods := f.warmPods(t); len(pods) != 1 || pods[0].UID != warm.UID {
		t.Fatalf("the unclaimed warm Pod went with idle: %d warm Pods", len(pods))
	}
	sb = acquire(t, p, th)
	if sb.PodName() != name {
		t.Fatalf("thread %s came back in %s, want %s", th, sb.PodName(), name)
	}
	if got := readFile(t, sb, sandbox.WorkspaceDir+"/kept.txt"); string(got) != "kept\n" {
		t.Fatalf("after idle: %q", got)
	}
	if out, _ := execOut(t, sb, "cat /mnt/user-data/workspace/kept.txt"); out != "kept\n" {
		t.Fatalf("bash after idle: %q", out)
	}
	if pods := f.warmPods(t); len(pods) != 1 || pods[0].UID != warm.UID {
		t.Fatalf("a thread coming back took a warm Pod: %d warm Pods", len(pods))
	}
	// Discard finds the thread's Pod by the name its directory records.
	if err := p.Discard(t.Context(), th); err != nil {
		t.Fatal(err)
	}
	for _, pod := range f.pods(t) {
		if pod.Name == name {
			t.Fatalf("Pod %s outlived its thread's Discard", name)
		}
	}
	if _, err := os.Stat(filepath.Dir(p.threadDir(th))); !os.IsNotExist(err) {
		t.Fatalf("the thread's directory outlived its Discard: %v", err)
	}
}

// A server that stops removes the unclaimed warm Pods it made, never a
// claimed one; one that dies leaves them to the next server of its
// settings, which keeps them; a server of other settings removes them once
// no server keeps them (warm-alive stale), and their directories.
func TestWarmRestart(t *testing.T) {
	cfg := warmConfig(t, 1)
	p1 := newProviderT(t, cfg)
	f := &fixture{p: p1, cfg: cfg}
	waitWarm(t, p1, 1, true)
	th := "kept-" + randomHex(4)
	sb := acquireNow(t, p1, th)
	execOut(t, sb, "echo here > /mnt/user-data/workspace/here.txt")
	claimed := sb.PodName()
	waitWarm(t, p1, 1, true)
	unclaimed := f.warmPods(t)[0].Name
	p1.Release(th)
	p1.Close()
	waitFor(t, 30*time.Second, "the stopped server's warm Pod deleted", func() bool { return len(f.warmPods(t)) == 0 })
	if _, err := os.Stat(filepath.Join(p1.warmRoot(), unclaimed)); !os.IsNotExist(err) {
		t.Fatalf("its directory: %v", err)
	}

	// A server that dies: its pool stops without its Close.
	p2 := newProviderT(t, cfg)
	waitWarm(t, p2, 1, true)
	orphan := f.warmPods(t)[0]
	close(p2.pool.stop)
	<-p2.pool.done
	p2.pool.once.Do(func() {})
	p3 := newProviderT(t, cfg)
	waitWarm(t, p3, 1, false)
	if pods := f.warmPods(t); len(pods) != 1 || pods[0].UID != orphan.UID {
		t.Fatalf("the next server made its own warm Pod instead of keeping the dead one's")
	}
	sb3 := acquire(t, p3, th)
	if sb3.PodName() != claimed {
		t.Fatalf("thread %s after a restart: Pod %s, want %s", th, sb3.PodName(), claimed)
	}
	if out, _ := execOut(t, sb3, "cat /mnt/user-data/workspace/here.txt"); out != "here\n" {
		t.Fatalf("after a restart: %q", out)
	}
	p3.Release(th)
	p3.pool.close(t.Context())
	if len(f.warmPods(t)) != 1 {
		t.Fatal("a server removed a warm Pod it did not make")
	}

	// A server of other settings (no pool) removes it once it is stale.
	stale := warmStale
	t.Cleanup(func() { warmStale = stale })
	warmStale = 2 * time.Second
	other := cfg
	other.Warm = 0
	other.IdleTimeout = 2 * time.Second
	newProviderT(t, other)
	waitFor(t, time.Minute, "the stale warm Pod removed", func() bool { return len(f.warmPods(t)) == 0 })
	waitFor(t, 10*time.Second, "its directory removed", func() bool {
		_, err := os.Stat(filepath.Join(p1.warmRoot(), orphan.Name))
		return os.IsNotExist(err)
	})
}

// A warm Pod of another server's settings is never claimed.
func TestWarmOtherSettingsNotClaimed(t *testing.T) {
	t.Parallel()
	cfg := warmConfig(t, 1)
	cfg2 := cfg
	cfg2.Environment = map[string]string{"OTHER": "1"}
	p2 := newProviderT(t, cfg2)
	f := &fixture{p: p2, cfg: cfg2}
	waitWarm(t, p2, 1, false)
	foreign := f.warmPods(t)[0].Name
	p := newProviderT(t, cfg)
	if p.pool.spec == p2.pool.spec {
		t.Fatal("two settings, one warm spec")
	}
	th := "other-" + randomHex(4)
	if sb := acquire(t, p, th); sb.PodName() == foreign {
		t.Fatalf("thread %s took warm Pod %s of other settings", th, foreign)
	}
	p.pool.close(t.Context())
	found := false
	for _, pod := range f.warmPods(t) {
		found = found || pod.Name == foreign
	}
	if !found {
		t.Fatal("a server removed a live warm Pod of other settings")
	}
}

// claimsOf lists the live claims of cfg's prefix whose annotation names
// thread.
func (f *fixture) claimsOf(t *testing.T, thread string) []corev1.PersistentVolumeClaim {
	t.Helper()
	list, err := cluster.cs.CoreV1().PersistentVolumeClaims(f.cfg.Namespace).List(t.Context(), metav1.ListOptions{LabelSelector: labelPrefix + "=" + f.cfg.PodPrefix})
	if err != nil {
		t.Fatal(err)
	}
	var out []corev1.PersistentVolumeClaim
	for _, c := range list.Items {
		if c.DeletionTimestamp == nil && c.Annotations[annThread] == thread {
			out = append(out, c)
		}
	}
	return out
}

// storage.mode pvc: a new thread's first call claims a warm Pod and the
// fresh claim it was made with (the pool's, owned by the Pod): what a
// command writes lands in that claim's volume, which names the thread from
// then on and no longer goes with the Pod; the thread's record names the
// Pod, for every replica, one started later too. The pool refills with a
// Pod and claim of their own. The claimed Pod idles out; the thread's next
// Pod, made by another replica under the same name, mounts the same claim
// and sees the files. The next thread's claim of the refill sees nothing
// of the first. Discard deletes the thread's claim and its record.
func TestWarmClaimPVC(t *testing.T) {
	t.Parallel()
	cfg := pvcConfig(t, warmConfig(t, 1), 6)
	cfg.IdleTimeout = 4 * time.Second
	p := newProviderT(t, cfg)
	f := &fixture{p: p, cfg: cfg}
	ctx := t.Context()
	claims := cluster.cs.CoreV1().PersistentVolumeClaims(cfg.Namespace)
	waitWarm(t, p, 1, true)
	first := f.warmPods(t)[0]
	fresh, err := claims.Get(ctx, claimName(first.Name), metav1.GetOptions{})
	if err != nil || fresh.Annotations[annThread] != "" || fresh.Labels[labelWarm] != p.pool.spec || len(fresh.OwnerReferences) != 1 || fresh.OwnerReferences[0].UID != first.UID {
		t.Fatalf("the warm Pod's own claim: %+v %v", fresh, err)
	}

	ta := "pa-" + randomHex(4)
	t0 := time.Now()
	a := acquireNow(t, p, ta)
	if a.PodName() != first.Name {
		t.Fatalf("thread %s got Pod %s, want the warm Pod %s", ta, a.PodName(), first.Name)
	}
	if out, res := execOut(t, a, "echo from-a > /mnt/user-data/workspace/a.txt; id -u"); res.ExitCode != 0 || out != "1000\n" {
		t.Fatalf("in the claimed Pod: %q %+v", out, res)
	}
	t.Logf("a new thread's first call with a warm Pod (pvc): %v", time.Since(t0).Round(time.Millisecond))
	if n := relays(t, a); n != 1 {
		t.Fatalf("%d relays in the claimed Pod, want the one its maker dialed", n)
	}
	if b, err := os.ReadFile(filepath.Join(volumeDir(t, cfg.Namespace, fresh.Name), "workspace", "a.txt")); err != nil || string(b) != "from-a\n" {
		t.Fatalf("the file in the claim's volume: %q %v", b, err)
	}
	c, err := claims.Get(ctx, fresh.Name, metav1.GetOptions{})
	if err != nil || c.UID != fresh.UID || c.Annotations[annThread] != ta || c.Labels[labelThread] != threadHash(ta) || c.Labels[labelWarm] != "" || len(c.OwnerReferences) != 0 {
		t.Fatalf("the claim once taken: %+v %v", c, err)
	}
	if name, ok, err := p.recorded(ctx, ta); err != nil || !ok || name != first.Name {
		t.Fatalf("thread %s's record: %q %v %v, want %s", ta, name, ok, err, first.Name)
	}
	// Another replica, started now (as after a restart), without a pool.
	cfg2 := cfg
	cfg2.Warm, cfg2.IdleTimeout = 0, -1
	p2 := newProviderT(t, cfg2)
	if got, err := p2.podNameOf(ctx, ta); err != nil || got != first.Name {
		t.Fatalf("another replica names thread %s's Pod %q (%v), want %s", ta, got, err, first.Name)
	}
	if ok, err := p2.Exists(ctx, ta); err != nil || !ok {
		t.Fatalf("another replica: Exists = %v, %v", ok, err)
	}

	waitWarm(t, p, 1, true)
	second := f.warmPods(t)
	if len(second) != 1 || second[0].Name == first.Name {
		t.Fatalf("the pool refilled with %d Pods", len(second))
	}
	if c, err := claims.Get(ctx, claimName(second[0].Name), metav1.GetOptions{}); err != nil || c.UID == fresh.UID || c.Annotations[annThread] != "" {
		t.Fatalf("the refill's claim: %v", err)
	}

	p.Release(ta)
	waitFor(t, time.Minute, "the claimed Pod idled out", func() bool {
		for _, pod := range f.pods(t) {
			if pod.Name == first.Name {
				return false
			}
		}
		return true
	})
	a2 := acquireNow(t, p2, ta)
	if a2.PodName() != first.Name {
		t.Fatalf("thread %s came back in %s, want %s", ta, a2.PodName(), first.Name)
	}
	if out, _ := execOut(t, a2, "cat /mnt/user-data/workspace/a.txt"); out != "from-a\n" {
		t.Fatalf("after idle, on another replica: %q", out)
	}
	if got := f.claimsOf(t, ta); len(got) != 1 || got[0].UID != fresh.UID {
		t.Fatalf("thread %s has %d claims after idle, want its one", ta, len(got))
	}
	if pods := f.warmPods(t); len(pods) != 1 || pods[0].UID != second[0].UID {
		t.Fatal("a thread coming back took a warm Pod")
	}
	p2.Release(ta)

	tb := "pb-" + randomHex(4)
	b := acquire(t, p, tb)
	if b.PodName() != second[0].Name {
		t.Fatalf("thread %s got Pod %s, want the refill %s", tb, b.PodName(), second[0].Name)
	}
	if out, _ := execOut(t, b, "ls -A /mnt/user-data/workspace /mnt/user-data/uploads /mnt/user-data/outputs"); strings.Contains(out, "a.txt") {
		t.Fatalf("thread %s sees thread %s's files: %q", tb, ta, out)
	}

	if err := p.Discard(ctx, ta); err != nil {
		t.Fatal(err)
	}
	if got := f.claimsOf(t, ta); len(got) != 0 {
		t.Fatalf("thread %s's claim outlived its Discard", ta)
	}
	if _, ok, err := p.recorded(ctx, ta); err != nil || ok {
		t.Fatalf("thread %s's record after Discard: %v %v", ta, ok, err)
	}
	if ok, err := p2.Exists(ctx, ta); err != nil || ok {
		t.Fatalf("Exists after Discard = %v, %v", ok, err)
	}
}

// storage.mode pvc, two replicas with warm Pods: one new thread on both at
// once ends with one Pod, one claim and one record; and two claims of one
// new thread at once, each taking a warm Pod and its claim, meet at the
// record: exactly one is the thread's, the other's Pod and claim go.
func TestWarmReplicasRacePVC(t *testing.T) {
	t.Parallel()
	cfg := pvcConfig(t, warmConfig(t, 2), 10)
	a, b := newProviderT(t, cfg), newProviderT(t, cfg)
	f := &fixture{p: a, cfg: cfg}
	waitWarm(t, a, 2, false)
	waitWarm(t, b, 2, false)
	sa := oneThreadTwoReplicas(t, f, a, b, false)
	if got := f.claimsOf(t, sa.key); len(got) != 1 || got[0].Name != claimName(sa.PodName()) {
		t.Fatalf("thread %s has %d claims, want one, %s", sa.key, len(got), claimName(sa.PodName()))
	}
	if name, ok, err := b.recorded(t.Context(), sa.key); err != nil || !ok || name != sa.PodName() {
		t.Fatalf("the record names %q (%v %v), want %s", name, ok, err, sa.PodName())
	}

	waitWarm(t, a, 2, false)
	waitWarm(t, b, 2, false)
	th := "race-" + randomHex(4)
	var ca, cb string
	var wg sync.WaitGroup
	wg.Go(func() { ca = a.pool.claim(t.Context(), th) })
	wg.Go(func() { cb = b.pool.claim(t.Context(), th) })
	wg.Wait()
	won := ca + cb
	if (ca == "") == (cb == "") || !a.isWarmName(won) {
		t.Fatalf("two claims of one thread: %q and %q, want exactly one", ca, cb)
	}
	if name, ok, err := a.recorded(t.Context(), th); err != nil || !ok || name != won {
		t.Fatalf("the record names %q (%v %v), want the winner %s", name, ok, err, won)
	}
	if got := f.claimsOf(t, th); len(got) != 1 || got[0].Name != claimName(won) {
		t.Fatalf("thread %s has %d claims, want the winner's alone", th, len(got))
	}
	if n := f.podsOf(t, th); n != 1 {
		t.Fatalf("%d live Pods name thread %s", n, th)
	}
	sb := acquire(t, b, th)
	if sb.PodName() != won {
		t.Fatalf("thread %s's sandbox is %s, want %s", th, sb.PodName(), won)
	}
	if out, _ := execOut(t, sb, "echo ok"); out != "ok\n" {
		t.Fatalf("in the winner's Pod: %q", out)
	}
}

// storage.mode pvc: warm_pool auto keeps the server's own warm Pods, also
// where the cluster serves agent-sandbox's CRDs; a drained pool falls back
// to the thread's own Pod and claim, recorded so; a thread with a claim
// from before records never takes a warm Pod, and gets a record naming
// its own.
func TestWarmFallbacksPVC(t *testing.T) {
	t.Parallel()
	cfg := pvcConfig(t, warmConfig(t, 1), 8)
	cfg.WarmPool = WarmPoolAuto
	p := newProviderT(t, cfg)
	if _, ok := p.pool.src.(ownPods); !ok {
		t.Fatalf("warm_pool auto with pvc: the pool's source is %T, want the server's own Pods", p.pool.src)
	}
	f := &fixture{p: p, cfg: cfg}
	ctx := t.Context()
	waitWarm(t, p, 1, false)
	warm := f.warmPods(t)[0]

	old := "old-" + randomHex(4)
	own := PodName(cfg.PodPrefix, old)
	if err := p.ensureClaim(ctx, &Sandbox{p: p, key: old, name: own}); err != nil {
		t.Fatal(err)
	}
	so := acquire(t, p, old)
	if so.PodName() != own {
		t.Fatalf("a thread with a claim took the warm Pod %s", so.PodName())
	}
	execOut(t, so, "echo kept > /mnt/user-data/workspace/kept.txt")
	if pods := f.warmPods(t); len(pods) != 1 || pods[0].UID != warm.UID {
		t.Fatalf("a thread with a claim cost the pool its warm Pod (%d warm Pods)", len(pods))
	}
	if name, ok, err := p.recorded(ctx, old); err != nil || !ok || name != own {
		t.Fatalf("the old thread's record: %q %v %v", name, ok, err)
	}

	n1, n2 := "n1-"+randomHex(4), "n2-"+randomHex(4)
	var s1, s2 *Sandbox
	var wg sync.WaitGroup
	wg.Go(func() { s1 = acquire(t, p, n1); execOut(t, s1, "echo one > /mnt/user-data/workspace/one.txt") })
	wg.Go(func() { s2 = acquire(t, p, n2); execOut(t, s2, "echo two > /mnt/user-data/workspace/two.txt") })
	wg.Wait()
	if p.isWarmName(s1.PodName()) == p.isWarmName(s2.PodName()) {
		t.Fatalf("with one warm Pod, want one thread to claim it: %s, %s", s1.PodName(), s2.PodName())
	}
	for _, s := range []*Sandbox{s1, s2} {
		if name, ok, err := p.recorded(ctx, s.key); err != nil || !ok || name != s.PodName() {
			t.Fatalf("thread %s's record: %q %v %v, want %s", s.key, name, ok, err, s.PodName())
		}
		if got := f.claimsOf(t, s.key); len(got) != 1 || got[0].Name != claimName(s.PodName()) {
			t.Fatalf("thread %s has %d claims", s.key, len(got))
		}
		if !p.isWarmName(s.PodName()) && s.PodName() != PodName(cfg.PodPrefix, s.key) {
			t.Fatalf("the cold thread's Pod is %s", s.PodName())
		}
	}
	if out, _ := execOut(t, s2, "ls -A /mnt/user-data/workspace"); out != "two.txt\n" {
		t.Fatalf("thread %s sees %q", n2, out)
	}
}

// storage.mode pvc under a Role from before records (no leases): warm
// stops start-up, naming kubernetes.warm and the rule; without warm the
// server starts, and its threads get their claims as before, by their own
// names, without records.
func TestWarmPVCWithoutTheRecordsRule(t *testing.T) {
	t.Parallel()
	cfg := pvcConfig(t, warmConfig(t, 1), 1)
	cfg.Kubeconfig = kubeconfigWithout(t, "coordination.k8s.io")
	_, err := New(t.Context(), cfg)
	if err == nil || !strings.HasPrefix(err.Error(), "kubernetes.warm 1 with storage.mode pvc:") || !strings.Contains(err.Error(), "coordination.k8s.io") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("warm with pvc, the Role without leases: %v", err)
	}
	cfg.Warm = 0
	p := newProviderT(t, cfg)
	if p.records {
		t.Fatal("the server keeps records its Role does not allow")
	}
	th := "norec-" + randomHex(4)
	sb := acquire(t, p, th)
	if out, _ := execOut(t, sb, "echo ok > /mnt/user-data/workspace/ok.txt; cat /mnt/user-data/workspace/ok.txt"); out != "ok\n" || sb.PodName() != PodName(cfg.PodPrefix, th) {
		t.Fatalf("a thread without records: %q in %s", out, sb.PodName())
	}
	if ok, err := p.Exists(t.Context(), th); err != nil || !ok {
		t.Fatalf("Exists = %v, %v", ok, err)
	}
}

// storage.mode pvc leaves no warm claim behind: one whose unclaimed Pod
// someone else deletes goes with it (its owner reference: the garbage
// collector), and a server that stops deletes the unclaimed Pods it made
// and their claims.
func TestWarmClaimsGoPVC(t *testing.T) {
	t.Parallel()
	cfg := pvcConfig(t, warmConfig(t, 1), 4)
	p := newProviderT(t, cfg)
	f := &fixture{p: p, cfg: cfg}
	claims := cluster.cs.CoreV1().PersistentVolumeClaims(cfg.Namespace)
	gone := func(name string) func() bool {
		return func() bool {
			c, err := claims.Get(t.Context(), name, metav1.GetOptions{})
			return apierrors.IsNotFound(err) || err == nil && c.DeletionTimestamp != nil
		}
	}
	waitWarm(t, p, 1, false)
	first := f.warmPods(t)[0]
	zero := int64(0)
	if err := cluster.cs.CoreV1().Pods(cfg.Namespace).Delete(t.Context(), first.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "the deleted warm Pod's claim gone with it", gone(claimName(first.Name)))
	var second corev1.Pod
	waitFor(t, 2*time.Minute, "the pool refilled", func() bool {
		pods := f.warmPods(t)
		if len(pods) != 1 || pods[0].Name == first.Name || !running(&pods[0]) {
			return false
		}
		second = pods[0]
		return true
	})
	if _, err := claims.Get(t.Context(), claimName(second.Name), metav1.GetOptions{}); err != nil {
		t.Fatalf("the refill's claim: %v", err)
	}
	p.pool.close(t.Context())
	waitFor(t, 30*time.Second, "the stopped server's warm Pod's claim deleted", gone(claimName(second.Name)))
}

// A warm Pod's shell is warmed as a thread's first call would use it
// (supervised.WarmShell): the claiming thread's first bash command (Shell,
// as the bash tool runs it) runs in a spare shell, and sees what a
// thread's first command sees in a Pod made for it — the workspace, $0,
// the environment (but for the host name: the Pod's).
func TestWarmShellWarmed(t *testing.T) {
	t.Parallel()
	const cmd = `pwd; echo "$0 $SHLVL $-"; env | grep -v '^HOSTNAME=' | sort; ` +
		`case $(tr '\0' ' ' </proc/$$/cmdline) in *__smc""p_c*) echo spare;; *) echo fresh;; esac`
	shell := func(sb sandbox.Sandbox) string {
		t.Helper()
		var out bytes.Buffer
		res, err := sb.Exec(t.Context(), sandbox.ExecRequest{Command: cmd, Timeout: time.Minute, Output: &out, Shell: true})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("%v %+v", err, res)
		}
		return out.String()
	}
	cfg := warmConfig(t, 1)
	p := newProviderT(t, cfg)
	waitWarm(t, p, 1, true)
	warm := shell(acquire(t, p, "ws-"+randomHex(4)))
	fresh := shell(acquire(t, newProviderT(t, newConfig(t)), "wf-"+randomHex(4)))
	if !strings.HasSuffix(warm, "\nspare\n") || !strings.HasSuffix(fresh, "\nfresh\n") {
		t.Fatalf("the claimed Pod's first command ran %q; in a new Pod %q", warm, fresh)
	}
	if strings.TrimSuffix(warm, "spare\n") != strings.TrimSuffix(fresh, "fresh\n") {
		t.Fatalf("the first command in a claimed Pod sees\n%s\nin a Pod made for the thread\n%s", warm, fresh)
	}
}
