package kubernetes

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// The agent-sandbox warm pool, against the real controller: the tests
// skip, saying so, where the cluster does not serve its CRDs
// (deploy/kubernetes/dev/agent-sandbox.sh installs it), and fail there
// with SANDBOX_MCP_REQUIRE_AGENT_SANDBOX=1 (CI, which installs it).

var sandboxGVR = schema.GroupVersionResource{Group: "agents.x-k8s.io", Version: "v1beta1", Resource: "sandboxes"}

func requireAgentSandbox(t testing.TB) dynamic.Interface {
	t.Helper()
	requireCluster(t)
	if !agentSandboxInstalled(t.Context(), cluster.cs.Discovery()) {
		if os.Getenv("SANDBOX_MCP_REQUIRE_AGENT_SANDBOX") == "1" {
			t.Fatal("the cluster does not serve the agent-sandbox CRDs (SANDBOX_MCP_REQUIRE_AGENT_SANDBOX=1)")
		}
		t.Skip("SKIPPED: the cluster does not serve the agent-sandbox CRDs: deploy/kubernetes/dev/agent-sandbox.sh installs them")
	}
	dyn, err := dynamic.NewForConfig(cluster.rc)
	if err != nil {
		t.Fatal(err)
	}
	return dyn
}

// agentConfig keeps n warm Pods in an agent-sandbox SandboxWarmPool.
func agentConfig(t *testing.T, n int) Config {
	cfg := newConfig(t)
	cfg.Warm = n
	cfg.WarmPool = WarmPoolAgentSandbox
	cfg.Replicas = -1
	return cfg
}

// newAgentProvider starts a provider of cfg whose pool is agent-sandbox's
// (its objects go when the test ends: teardown).
func newAgentProvider(t *testing.T, cfg Config) *Provider {
	t.Helper()
	p := newProviderT(t, cfg)
	if _, ok := p.pool.src.(*agentPool); !ok {
		t.Fatalf("warm_pool agent-sandbox: the pool's source is %T", p.pool.src)
	}
	return p
}

// objectsNamed lists the objects of gvr in cfg's namespace named name.
func objectsNamed(t *testing.T, dyn dynamic.Interface, gvr schema.GroupVersionResource, ns, name string) int {
	t.Helper()
	list, err := dyn.Resource(gvr).Namespace(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, o := range list.Items {
		if o.GetName() == name && o.GetDeletionTimestamp() == nil {
			n++
		}
	}
	return n
}

func TestWarmPoolConfig(t *testing.T) {
	t.Parallel()
	base := Config{Storage: Storage{Mode: StorageHostPath, HostPath: "/srv/x"}, Warm: 1}
	for _, c := range []struct{ pool, want string }{
		{"", ""}, {WarmPoolAuto, ""}, {WarmPoolPods, ""}, {WarmPoolAgentSandbox, ""},
		{"agent_sandbox", `kubernetes.warm_pool "agent_sandbox": want auto, pods or agent-sandbox`},
	} {
		cfg := base
		cfg.WarmPool = c.pool
		err := cfg.Validate()
		if (c.want == "") != (err == nil) || (err != nil && err.Error() != c.want) {
			t.Errorf("warm_pool %q: %v, want %q", c.pool, err, c.want)
		}
	}
	// agent-sandbox where the cluster does not serve it: the server does
	// not start, and says which key.
	cfg := base
	cfg.WarmPool = WarmPoolAgentSandbox
	cfg.SupervisorImage = "x"
	if err := setDefaults(&cfg); err != nil {
		t.Fatal(err)
	}
	_, err := newProvider(t.Context(), cfg, fake.NewClientset(), nil)
	if err == nil || !strings.HasPrefix(err.Error(), "kubernetes.warm_pool agent-sandbox: the cluster does not serve the agent-sandbox CRDs") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("got %v", err)
	}
}

// A first call claims a member of the SandboxWarmPool, over the channel
// this replica dialed: its commands run there, with the thread's own
// directory at the virtual paths, the Pod names the thread and belongs to
// no Sandbox any more, and the claim is gone. The pool refills; the next
// thread claims another member and sees nothing of the first.
func TestAgentSandboxClaim(t *testing.T) {
	t.Parallel()
	dyn := requireAgentSandbox(t)
	cfg := agentConfig(t, 1)
	cfg.Kubeconfig = kubeconfigWithout(t, "") // as a ServiceAccount whose Role is serverNeeds
	p := newAgentProvider(t, cfg)
	f := &fixture{p: p, cfg: cfg}
	waitWarm(t, p, 1, true)
	first, ahead := waitAhead(t, p)
	if !p.isWarmName(first) || !strings.HasPrefix(first, p.pool.src.(*agentPool).name+"-") {
		t.Fatalf("member %s is not named as the pool's", first)
	}
	if _, ok := warmReady(p)[first]; ok {
		t.Fatalf("the member claimed ahead, %s, is still one of the pool's ready members", first)
	}

	ta := "aa-" + randomHex(4)
	t0 := time.Now()
	a := acquire(t, p, ta)
	if out, res := execOut(t, a, "echo from-a > /mnt/user-data/workspace/a.txt; echo secret-a > /tmp/a; id -u"); res.ExitCode != 0 || out != "1000\n" {
		t.Fatalf("in the claimed Pod: %q %+v", out, res)
	}
	t.Logf("first call on a claimed member: %s", time.Since(t0).Round(time.Millisecond))
	if a.PodName() != first {
		t.Fatalf("thread %s got Pod %s, want the member %s", ta, a.PodName(), first)
	}
	// A channel the pool closed (dialed twice as the member was claimed
	// ahead) may take a moment to end its relay.
	waitFor(t, 10*time.Second, "one relay in the claimed Pod", func() bool { return relays(t, a) == 1 })
	if b, err := os.ReadFile(filepath.Join(p.threadDir(ta), "workspace", "a.txt")); err != nil || string(b) != "from-a\n" {
		t.Fatalf("the thread's node file: %q %v", b, err)
	}
	writeFile(t, a, sandbox.UploadsDir+"/up.txt", []byte("uploaded\n"))
	if out, _ := execOut(t, a, "cat /mnt/user-data/uploads/up.txt"); out != "uploaded\n" {
		t.Fatalf("a file the file tools wrote, read in the Pod: %q", out)
	}
	info, err := os.Stat(filepath.Dir(p.threadDir(ta)))
	if err != nil || info.Mode().Perm() != 0o755 || info.Mode()&os.ModeSticky != 0 {
		t.Fatalf("the thread's directory: %v %v", info.Mode(), err)
	}
	pod, err := cluster.cs.CoreV1().Pods(cfg.Namespace).Get(t.Context(), first, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pod.Annotations[annThread] != ta || pod.Labels[labelThread] != threadHash(ta) || len(pod.OwnerReferences) != 0 || pod.Labels[labelSandboxHash] != "" {
		t.Fatalf("the claimed Pod: annotation %q label %q owners %v tracking %q", pod.Annotations[annThread], pod.Labels[labelThread], pod.OwnerReferences, pod.Labels[labelSandboxHash])
	}
	if got, err := p.podNameOf(t.Context(), ta); err != nil || got != first {
		t.Fatalf("thread %s's Pod is named %s, want %s", ta, got, first)
	}
	if _, err := os.Stat(filepath.Join(p.poolRoot(), first)); !os.IsNotExist(err) {
		t.Fatalf("the member's pool directory is still there: %v", err)
	}
	if n := objectsNamed(t, dyn, claimGVR, cfg.Namespace, p.pool.src.(*agentPool).claimName(ta)); n != 0 {
		t.Fatalf("the thread's first call made a claim of its own beside the one ahead")
	}
	waitFor(t, 30*time.Second, "the claim ahead and its Sandbox gone", func() bool {
		return objectsNamed(t, dyn, claimGVR, cfg.Namespace, ahead) == 0 && objectsNamed(t, dyn, sandboxGVR, cfg.Namespace, first) == 0
	})
	if pod, err := cluster.cs.CoreV1().Pods(cfg.Namespace).Get(t.Context(), first, metav1.GetOptions{}); err != nil {
		t.Fatalf("the thread's Pod went with its claim: %v", err)
	} else if len(pod.OwnerReferences) != 0 || pod.Labels[labelSandboxHash] != "" || pod.Annotations[annThread] != ta {
		t.Fatalf("the controllers took the thread's Pod back: owners %v tracking %q thread %q", pod.OwnerReferences, pod.Labels[labelSandboxHash], pod.Annotations[annThread])
	}

	t1 := time.Now()
	waitFor(t, time.Minute, "the pool refilled", func() bool {
		for name := range warmReady(p) {
			if name != first {
				return true
			}
		}
		return false
	})
	t.Logf("the pool refilled in %s", time.Since(t1).Round(time.Millisecond))
	waitWarm(t, p, 1, true)
	second, _ := waitAhead(t, p)
	tb := "ab-" + randomHex(4)
	b := acquire(t, p, tb)
	if b.PodName() != second || second == first {
		t.Fatalf("thread %s got Pod %s, want the next member claimed ahead, %s", tb, b.PodName(), second)
	}
	if out, _ := execOut(t, b, "ls -A /mnt/user-data/workspace /mnt/user-data/uploads; cat /tmp/a 2>&1 || true"); strings.Contains(out, "a.txt") || strings.Contains(out, "up.txt") || strings.Contains(out, "secret-a") {
		t.Fatalf("thread %s sees thread %s's files: %q", tb, ta, out)
	}
	if out, _ := execOut(t, a, "cat /mnt/user-data/workspace/a.txt /tmp/a"); out != "from-a\nsecret-a\n" {
		t.Fatalf("thread %s's Pod changed: %q", ta, out)
	}
	waitFor(t, time.Minute, "the two threads' Pods and a member again", func() bool { return len(f.pods(t)) >= 3 })
}

// waitAhead waits until p's pool holds a member claimed ahead, its
// channel open, and names its Pod and its claim.
func waitAhead(t testing.TB, p *Provider) (pod, claim string) {
	t.Helper()
	a := p.pool.src.(*agentPool)
	waitFor(t, 2*time.Minute, "a member claimed ahead", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.ahead == nil || a.conns[a.ahead.pod].c == nil {
			return false
		}
		pod, claim = a.ahead.pod, a.ahead.claim
		return true
	})
	return pod, claim
}

// warmReady is a copy of p's pool's ready members.
func warmReady(p *Provider) map[string]warmPod {
	p.pool.mu.Lock()
	defer p.pool.mu.Unlock()
	out := map[string]warmPod{}
	for k, v := range p.pool.ready {
		out[k] = v
	}
	return out
}

// A drained pool (one member, two new threads at once): one claims the
// member, the other's claim gets a fresh Sandbox in the same call; both
// work, each in a Pod of its own, with its own files.
func TestAgentSandboxDrained(t *testing.T) {
	t.Parallel()
	requireAgentSandbox(t)
	cfg := agentConfig(t, 1)
	p := newAgentProvider(t, cfg)
	waitWarm(t, p, 1, false)
	n1, n2 := "d1-"+randomHex(4), "d2-"+randomHex(4)
	var s1, s2 *Sandbox
	var wg sync.WaitGroup
	wg.Go(func() { s1 = acquire(t, p, n1); execOut(t, s1, "echo one > /mnt/user-data/workspace/f.txt") })
	wg.Go(func() { s2 = acquire(t, p, n2); execOut(t, s2, "echo two > /mnt/user-data/workspace/f.txt") })
	wg.Wait()
	if s1.PodName() == s2.PodName() {
		t.Fatalf("two threads share Pod %s", s1.PodName())
	}
	for _, c := range []struct {
		sb   *Sandbox
		want string
	}{{s1, "one\n"}, {s2, "two\n"}} {
		if out, _ := execOut(t, c.sb, "cat /mnt/user-data/workspace/f.txt; ls -A /mnt/user-data/workspace"); out != c.want+"f.txt\n" {
			t.Fatalf("thread %s (Pod %s): %q", c.sb.key, c.sb.PodName(), out)
		}
	}
	fresh := 0
	for _, s := range []*Sandbox{s1, s2} {
		if s.PodName() == p.pool.src.(*agentPool).claimName(s.key) {
			fresh++
		}
	}
	t.Logf("Pods %s and %s (%d fresh Sandbox of a claim)", s1.PodName(), s2.PodName(), fresh)
}

// Two replicas claiming for one thread at once get one Pod: one creates
// the claim, the other waits for its directory.
func TestAgentSandboxReplicas(t *testing.T) {
	t.Parallel()
	requireAgentSandbox(t)
	cfg := agentConfig(t, 2)
	a := newAgentProvider(t, cfg)
	b := newProviderT(t, cfg)
	f := &fixture{p: a, cfg: cfg}
	waitWarm(t, a, 2, false)
	waitWarm(t, b, 2, false)
	if sa := oneThreadTwoReplicas(t, f, a, b, true); !a.isWarmName(sa.PodName()) {
		t.Fatalf("one thread on two replicas: Pod %s is no warm member", sa.PodName())
	}
}

// A claimed member's Pod, idled out or discarded, stays gone: agent-sandbox
// does not make it again. The thread's next Pod is the server's, by the
// recorded name, with the thread's files.
func TestAgentSandboxGoneForGood(t *testing.T) {
	t.Parallel()
	dyn := requireAgentSandbox(t)
	cfg := agentConfig(t, 1)
	cfg.IdleTimeout = 3 * time.Second
	p := newAgentProvider(t, cfg)
	waitWarm(t, p, 1, false)
	th := "g-" + randomHex(4)
	sb := acquireNow(t, p, th)
	name := sb.PodName()
	writeFile(t, sb, sandbox.WorkspaceDir+"/kept.txt", []byte("kept\n"))
	if !p.isWarmName(name) {
		t.Fatalf("thread %s did not claim a member: %s", th, name)
	}
	p.Release(th)
	gone := func() bool {
		_, err := cluster.cs.CoreV1().Pods(cfg.Namespace).Get(t.Context(), name, metav1.GetOptions{})
		return err != nil
	}
	waitFor(t, time.Minute, "the claimed Pod idled out", gone)
	time.Sleep(3 * time.Second)
	if !gone() || objectsNamed(t, dyn, sandboxGVR, cfg.Namespace, name) != 0 {
		t.Fatalf("Pod %s came back after it idled out (or its Sandbox is still there)", name)
	}
	sb = acquire(t, p, th)
	if sb.PodName() != name {
		t.Fatalf("thread %s came back in %s, want %s", th, sb.PodName(), name)
	}
	if out, _ := execOut(t, sb, "cat /mnt/user-data/workspace/kept.txt"); out != "kept\n" {
		t.Fatalf("after idle: %q", out)
	}
	if err := p.Discard(t.Context(), th); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	if !gone() {
		t.Fatalf("Pod %s came back after its thread's Discard", name)
	}
}

// With the pool empty (no member at all), a claim gets a fresh Sandbox,
// named as the claim, in the same call: the thread's Pod is started then,
// and claimed the same way (taken off agent-sandbox, its directory the
// thread's).
func TestAgentSandboxFresh(t *testing.T) {
	t.Parallel()
	dyn := requireAgentSandbox(t)
	cfg := agentConfig(t, 1)
	p := newAgentProvider(t, cfg)
	a := p.pool.src.(*agentPool)
	waitWarm(t, p, 1, false)
	waitAhead(t, p)
	// The pool's loop stops (it would keep replicas at 1, and claim a
	// member ahead), the member claimed ahead goes, and the pool is
	// drained.
	close(p.pool.stop)
	<-p.pool.done
	a.dropAhead(t.Context(), a.ahead, "the test drains the pool")
	if _, err := dyn.Resource(warmPoolGVR).Namespace(cfg.Namespace).Patch(t.Context(), a.name, "application/merge-patch+json", []byte(`{"spec":{"replicas":0}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "the pool drained", func() bool {
		list, err := cluster.cs.CoreV1().Pods(cfg.Namespace).List(t.Context(), metav1.ListOptions{LabelSelector: labelWarmPool + "=" + p.pool.spec})
		return err == nil && len(list.Items) == 0
	})
	th := "f-" + randomHex(4)
	sb := acquire(t, p, th)
	if out, res := execOut(t, sb, "echo fresh > /mnt/user-data/workspace/f.txt; id -u"); res.ExitCode != 0 || out != "1000\n" {
		t.Fatalf("in the fresh Pod: %q %+v", out, res)
	}
	if sb.PodName() != a.claimName(th) {
		t.Fatalf("thread %s ran in %s, want the claim's fresh Sandbox %s", th, sb.PodName(), a.claimName(th))
	}
	if b, err := os.ReadFile(filepath.Join(p.threadDir(th), "workspace", "f.txt")); err != nil || string(b) != "fresh\n" {
		t.Fatalf("the thread's node file: %q %v", b, err)
	}
	if got, err := p.podNameOf(t.Context(), th); err != nil || got != sb.PodName() {
		t.Fatalf("the record names %s", got)
	}
	p.pool.once.Do(func() {}) // stopped above
}

// A claim ahead lives as long as its replica: one that stops deletes it
// (its member goes with it), and another replica's sweep leaves a live one
// alone (leftClaim: once its warm-alive is stale, it goes).
func TestAgentSandboxAheadGoes(t *testing.T) {
	t.Parallel()
	dyn := requireAgentSandbox(t)
	cfg := agentConfig(t, 1)
	claims := dyn.Resource(claimGVR).Namespace(cfg.Namespace)
	other := cfg.PodPrefix + "-warm-" + randomHex(8)
	a := &agentPool{pool: &pool{p: &Provider{cfg: cfg}}, name: "none"}
	if _, err := claims.Create(t.Context(), a.newClaim(other, map[string]any{labelAhead: "other"}, map[string]any{annWarmAlive: time.Now().UTC().Format(time.RFC3339Nano)}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { claims.Delete(context.Background(), other, metav1.DeleteOptions{}) })

	cfg.Kubeconfig = kubeconfigWithout(t, "") // as a ServiceAccount whose Role is serverNeeds
	p := newAgentProvider(t, cfg)
	pod, claim := waitAhead(t, p) // after its first pass, which sweeps
	if objectsNamed(t, dyn, claimGVR, cfg.Namespace, other) != 1 {
		t.Fatalf("another replica's live claim ahead %s was swept", other)
	}
	// Its warm-alive is kept fresh.
	ap := p.pool.src.(*agentPool)
	ap.mu.Lock()
	ap.ahead.alive = time.Time{}
	ap.mu.Unlock()
	before := time.Now()
	ap.keepAhead(t.Context(), 0)
	got, err := claims.Get(t.Context(), claim, metav1.GetOptions{})
	if err != nil || aliveOf(got).Before(before.Add(-time.Second)) {
		t.Fatalf("the claim ahead's warm-alive was not refreshed: %v %v", got.GetAnnotations(), err)
	}
	p.pool.close(t.Context())
	waitFor(t, time.Minute, "the claim ahead and its member gone with their server", func() bool {
		_, err := cluster.cs.CoreV1().Pods(cfg.Namespace).Get(t.Context(), pod, metav1.GetOptions{})
		return objectsNamed(t, dyn, claimGVR, cfg.Namespace, claim) == 0 && err != nil
	})
}

// A Role from before claims ahead (no patch on SandboxClaims): the
// replica lets its claim ahead go once it cannot keep it fresh, says so,
// and claims for each first call as before.
func TestAgentSandboxAheadOldRole(t *testing.T) {
	t.Parallel()
	dyn := requireAgentSandbox(t)
	cfg := agentConfig(t, 1)
	cfg.Kubeconfig = kubeconfigAs(t, func(r authzResource, verb string) bool {
		return r.resource != claimGVR.Resource || verb != "patch"
	})
	p := newAgentProvider(t, cfg)
	_, claim := waitAhead(t, p)
	a := p.pool.src.(*agentPool)
	a.mu.Lock()
	a.ahead.alive = time.Time{}
	a.mu.Unlock()
	a.keepAhead(t.Context(), 1)
	a.mu.Lock()
	stopped, held := a.noAhead, a.ahead != nil
	a.mu.Unlock()
	if !stopped || held {
		t.Fatalf("claims ahead stopped %v, one held %v; want stopped, none", stopped, held)
	}
	waitFor(t, 30*time.Second, "the claim ahead deleted", func() bool { return objectsNamed(t, dyn, claimGVR, cfg.Namespace, claim) == 0 })
	waitWarm(t, p, 1, true)
	th := "old-" + randomHex(4)
	sb := acquire(t, p, th)
	if out, _ := execOut(t, sb, "echo ok"); out != "ok\n" || !p.isWarmName(sb.PodName()) {
		t.Fatalf("a new thread: %q in Pod %s, want a member", out, sb.PodName())
	}
	a.mu.Lock()
	held = a.ahead != nil || a.aheading
	a.mu.Unlock()
	if held {
		t.Fatal("a claim ahead was made again")
	}
}

func TestLeftClaim(t *testing.T) {
	t.Parallel()
	now := time.Now()
	claim := func(ahead bool, created, alive time.Time) *unstructured.Unstructured {
		c := &unstructured.Unstructured{Object: map[string]any{}}
		c.SetCreationTimestamp(metav1.NewTime(created))
		if ahead {
			c.SetLabels(map[string]string{labelAhead: "r"})
			c.SetAnnotations(map[string]string{annWarmAlive: alive.UTC().Format(time.RFC3339Nano)})
		}
		return c
	}
	old := now.Add(-time.Hour)
	for _, c := range []struct {
		what string
		c    *unstructured.Unstructured
		want bool
	}{
		{"a thread's claim of a minute", claim(false, now.Add(-time.Minute), time.Time{}), false},
		{"a thread's claim of three minutes", claim(false, now.Add(-3*time.Minute), time.Time{}), true},
		{"a claim ahead of an hour, kept alive", claim(true, old, now.Add(-warmAliveEvery)), false},
		{"a claim ahead of an hour, its replica gone", claim(true, old, now.Add(-warmStale)), true},
		{"a claim ahead of a second", claim(true, now.Add(-time.Second), now.Add(-time.Second)), false},
	} {
		if got := leftClaim(c.c, now); got != c.want {
			t.Errorf("%s: left %v, want %v", c.what, got, c.want)
		}
	}
}

// kubeconfigWithout is a kubeconfig acting as a ServiceAccount of the test
// namespace whose Role has every rule the provider needs (serverNeeds) but
// those of API group group: a Role from before them ("": all of them).
func kubeconfigWithout(t *testing.T, group string) string {
	t.Helper()
	return kubeconfigAs(t, func(r authzResource, _ string) bool { return group == "" || r.group != group })
}

// kubeconfigAs is kubeconfigWithout whose Role has the verbs of
// serverNeeds that keep says.
func kubeconfigAs(t *testing.T, keep func(r authzResource, verb string) bool) string {
	t.Helper()
	ctx := t.Context()
	sa := "old-role-" + randomHex(3)
	var rules []rbacv1.PolicyRule
	for r, all := range serverNeeds {
		var verbs []string
		for _, v := range all {
			if keep(r, v) {
				verbs = append(verbs, v)
			}
		}
		if len(verbs) == 0 {
			continue
		}
		res := r.resource
		if r.sub != "" {
			res += "/" + r.sub
		}
		rules = append(rules, rbacv1.PolicyRule{APIGroups: []string{r.group}, Resources: []string{res}, Verbs: verbs})
	}
	rbac := cluster.cs.RbacV1()
	if _, err := rbac.Roles(cluster.ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: sa}, Rules: rules}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: sa},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: sa},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: cluster.ns}}}
	if _, err := rbac.RoleBindings(cluster.ns).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		rbac.RoleBindings(cluster.ns).Delete(context.Background(), sa, metav1.DeleteOptions{})
		rbac.Roles(cluster.ns).Delete(context.Background(), sa, metav1.DeleteOptions{})
	})
	// The admin's kubeconfig, acting as that ServiceAccount.
	kc, err := clientcmd.LoadFromFile(os.Getenv("KUBECONFIG"))
	if err != nil {
		t.Fatal(err)
	}
	for _, ai := range kc.AuthInfos {
		ai.Impersonate = "system:serviceaccount:" + cluster.ns + ":" + sa
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, kubeconfig); err != nil {
		t.Fatal(err)
	}
	// The authorizer sees a new Role a moment after it is made.
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(rc)
	waitFor(t, 30*time.Second, "the Role in force", func() bool {
		_, err := cs.CoreV1().Pods(cluster.ns).List(ctx, metav1.ListOptions{Limit: 1})
		return err == nil
	})
	return kubeconfig
}

// A server whose Role is from before agent-sandbox (every rule the
// provider needs but extensions.agents.x-k8s.io's) on a cluster that
// serves the CRDs: warm_pool auto keeps the server's own warm Pods, which
// fill and are claimed, rather than a pool it may not make.
func TestAgentSandboxAutoWithoutTheRules(t *testing.T) {
	t.Parallel()
	requireAgentSandbox(t)
	kubeconfig := kubeconfigWithout(t, warmPoolGVR.Group)
	cfg := newConfig(t)
	cfg.Kubeconfig, cfg.Warm, cfg.WarmPool, cfg.Replicas = kubeconfig, 1, WarmPoolAuto, -1
	p := newProviderT(t, cfg)
	if _, ok := p.pool.src.(ownPods); !ok {
		t.Fatalf("warm_pool auto, the agent-sandbox rules missing: the pool's source is %T, want the server's own Pods", p.pool.src)
	}
	waitWarm(t, p, 1, false)
	sb := acquire(t, p, "old-"+randomHex(4))
	if out, _ := execOut(t, sb, "echo ok"); out != "ok\n" || !p.isWarmName(sb.PodName()) {
		t.Fatalf("a new thread: %q in Pod %s, want a claimed warm Pod", out, sb.PodName())
	}
}
