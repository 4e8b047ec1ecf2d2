package kubernetes

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sandbox-mcp/sandbox-mcp/internal/testkit"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox/sandboxtest"
)

// The tests take any cluster from KUBECONFIG. Without one they skip and
// say so, unless SANDBOX_MCP_REQUIRE_K8S=1 (CI with a cluster up): then
// they fail. SANDBOX_MCP_K8S_IMAGE picks the sandbox image (default
// local.test/busybox:1.35), SANDBOX_MCP_K8S_PULL its pull policy,
// SANDBOX_MCP_K8S_SUPERVISOR_IMAGE the server image the cluster has (the
// supervisor comes from it). deploy/kubernetes/dev/cluster.sh makes such a
// cluster on this machine, loads both images and prints these variables
// (its env). Pods use host_path storage under a temporary directory, so
// the node must be this machine.

var cluster struct {
	once sync.Once
	err  error
	cs   *k8s.Clientset
	rc   *rest.Config
	ns   string
}

// noCluster fails t when SANDBOX_MCP_REQUIRE_K8S=1 asks for a cluster,
// and skips it otherwise, saying why.
func noCluster(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv("SANDBOX_MCP_REQUIRE_K8S") == "1" {
		t.Fatalf(format, args...)
	}
	t.Skipf("SKIPPED: "+format, args...)
}

func requireCluster(t testing.TB) {
	t.Helper()
	if os.Getenv("KUBECONFIG") == "" {
		noCluster(t, "no cluster: set KUBECONFIG")
	}
	if os.Getenv("SANDBOX_MCP_K8S_SUPERVISOR_IMAGE") == "" {
		noCluster(t, "no supervisor image: set SANDBOX_MCP_K8S_SUPERVISOR_IMAGE (deploy/kubernetes/build-image.sh, loaded into the cluster)")
	}
	cluster.once.Do(func() {
		// Before any client-go call of the tests: klog's logger is set
		// once per process, by the first New otherwise, racing the
		// requests tests make beside it.
		quietKlog(slog.New(slog.DiscardHandler))
		rc, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
		if err != nil {
			cluster.err = err
			return
		}
		cs, err := k8s.NewForConfig(rc)
		if err != nil {
			cluster.err = err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		var b [4]byte
		rand.Read(b[:])
		ns := "smcp-test-" + hex.EncodeToString(b[:])
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			cluster.err = err
			return
		}
		// Without kube-controller-manager nobody makes the default
		// ServiceAccount, and Pods are refused without it.
		_, err = cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			cluster.err = err
			return
		}
		cluster.cs, cluster.rc, cluster.ns = cs, rc, ns
	})
	if cluster.err != nil {
		noCluster(t, "no cluster at KUBECONFIG: %v", cluster.err)
	}
}

func TestMain(m *testing.M) {
	code := m.Run()
	if cluster.cs != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		zero := int64(0)
		cluster.cs.CoreV1().Pods(cluster.ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{})
		cluster.cs.CoreV1().Namespaces().Delete(ctx, cluster.ns, metav1.DeleteOptions{})
		cancel()
	}
	os.Exit(code)
}

func testImage() (string, string) {
	img, pull := os.Getenv("SANDBOX_MCP_K8S_IMAGE"), os.Getenv("SANDBOX_MCP_K8S_PULL")
	if img == "" {
		img = "local.test/busybox:1.35"
	}
	if pull == "" {
		pull = "IfNotPresent"
	}
	return img, pull
}

type fixture struct {
	p   *Provider
	cfg Config
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// newConfig is a host_path configuration in the test namespace with a
// prefix of its own and a skills dir holding skill.md.
func newConfig(t testing.TB) Config {
	t.Helper()
	requireCluster(t)
	skills := t.TempDir()
	os.WriteFile(filepath.Join(skills, "skill.md"), []byte("skill\n"), 0o644)
	os.Chmod(skills, 0o755)
	img, pull := testImage()
	return Config{
		Kubeconfig:      os.Getenv("KUBECONFIG"),
		Namespace:       cluster.ns,
		Image:           img,
		SupervisorImage: os.Getenv("SANDBOX_MCP_K8S_SUPERVISOR_IMAGE"),
		ImagePullPolicy: pull,
		PodPrefix:       "t-" + randomHex(4),
		Storage:         Storage{Mode: StorageHostPath, HostPath: t.TempDir()},
		Resources:       Resources{CPU: "500m", Memory: "256Mi", EphemeralStorage: "256Mi"},
		SkillsDir:       skills,
		StateDir:        t.TempDir(),
		StartTimeout:    2 * time.Minute,
	}
}

func newProviderT(t testing.TB, cfg Config) *Provider {
	t.Helper()
	p, err := New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	pool := ""
	if p.pool != nil {
		if a, ok := p.pool.src.(*agentPool); ok {
			pool = a.name
		}
	}
	prefixes.Lock()
	prefixes.open[cfg.PodPrefix]++
	prefixes.Unlock()
	t.Cleanup(func() {
		p.Close()
		prefixes.Lock()
		prefixes.open[cfg.PodPrefix]--
		last := prefixes.open[cfg.PodPrefix] == 0
		prefixes.Unlock()
		if last {
			teardown(t, cfg.Namespace, cfg.PodPrefix, pool)
		}
	})
	return p
}

// prefixes counts the providers open per pod_prefix: a test may run two
// replicas of one configuration, and its objects go when the last closes.
var prefixes = struct {
	sync.Mutex
	open map[string]int
}{open: map[string]int{}}

// teardown removes what the providers of prefix left in the cluster, and
// waits until none of its Pods is left, before the test's directories go:
// a Pod that starts makes its directories under the test's hostPath, and
// one being stopped may still write there, racing the TempDir's removal
// ("directory not empty"). The agent-sandbox pool (if any) goes first, or
// its controller makes each member's Pod again. A Pod deleted with a grace
// period stays listed until the kubelet has stopped its containers (one
// deleted with none is unlisted at once, its containers still running),
// and a member's Pod may come again until the pool's Sandboxes are
// collected: each round deletes again.
func teardown(t testing.TB, ns, prefix, pool string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if pool != "" {
		if dyn, err := dynamic.NewForConfig(cluster.rc); err == nil {
			for _, gvr := range []schema.GroupVersionResource{warmPoolGVR, templateGVR} {
				dyn.Resource(gvr).Namespace(ns).Delete(ctx, pool, metav1.DeleteOptions{})
			}
		}
	}
	one := int64(1)
	sel := metav1.ListOptions{LabelSelector: labelPrefix + "=" + prefix}
	for {
		cluster.cs.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &one}, sel)
		list, err := cluster.cs.CoreV1().Pods(ns).List(ctx, sel)
		if err == nil && len(list.Items) == 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Logf("Pods of %s still there a minute after the test: %v", prefix, err)
			return
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func acquire(t testing.TB, p *Provider, thread string) *Sandbox {
	t.Helper()
	sb, err := p.Acquire(t.Context(), thread)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Release(thread) })
	return sb.(*Sandbox)
}

// container is spec's container name.
func container(t testing.TB, spec *corev1.PodSpec, name string) *corev1.Container {
	t.Helper()
	for i := range spec.Containers {
		if spec.Containers[i].Name == name {
			return &spec.Containers[i]
		}
	}
	t.Fatalf("no container %s", name)
	return nil
}

func execOut(t testing.TB, sb sandbox.Sandbox, cmd string) (string, sandbox.ExecResult) {
	t.Helper()
	var out bytes.Buffer
	res, err := sb.Exec(t.Context(), sandbox.ExecRequest{Command: cmd, Timeout: time.Minute, Output: &out})
	if err != nil {
		t.Fatalf("%s: %v", cmd, err)
	}
	return out.String(), res
}

func writeFile(t *testing.T, sb sandbox.Sandbox, name string, data []byte) {
	t.Helper()
	err := sb.FS().Edit(t.Context(), name, func([]byte, bool) ([]byte, error) { return data, nil })
	if err != nil {
		t.Fatalf("write %s: %v", name, err)
	}
}

func readFile(t *testing.T, sb sandbox.Sandbox, name string) []byte {
	t.Helper()
	f, err := sb.FS().Open(t.Context(), name)
	if err != nil {
		t.Fatalf("open %s: %v", name, err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatalf("read %s: %v", name, err)
	}
	return b
}

func (f *fixture) pods(t *testing.T) []corev1.Pod {
	t.Helper()
	list, err := cluster.cs.CoreV1().Pods(f.cfg.Namespace).List(t.Context(), metav1.ListOptions{LabelSelector: labelPrefix + "=" + f.cfg.PodPrefix})
	if err != nil {
		t.Fatal(err)
	}
	var live []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			live = append(live, p)
		}
	}
	return live
}

func TestContract(t *testing.T) {
	cfg := newConfig(t)
	cfg.Replicas = -1 // its subtests each hold a thread, as many at once as run in parallel
	p := newProviderT(t, cfg)
	sandboxtest.Run(t, sandboxtest.Options{ReadOnlyEnforced: true}, func(t *testing.T) sandbox.Sandbox {
		return acquire(t, p, "contract-"+randomHex(4))
	})
}

// TestPodShape checks the Pod's name, labels and annotation, and its
// hardening from inside: uid not 0, no capabilities, no service account
// token, no API server variables, a read-only root, limits set.
func TestPodShape(t *testing.T) {
	t.Parallel()
	cfg := newConfig(t)
	p := newProviderT(t, cfg)
	f := &fixture{p: p, cfg: cfg}
	thread := "shape-" + randomHex(4)
	sb := acquire(t, p, thread)
	out, res := execOut(t, sb, `id -u; grep CapEff /proc/self/status; grep NoNewPrivs /proc/self/status; ls /var/run/secrets/kubernetes.io/serviceaccount 2>&1 || echo no-token; env | grep -c '^KUBERNETES_' ; awk '$2=="/"{split($4,o,","); print "root-" o[1]}' /proc/mounts | tail -n 1; echo $HOME; pwd`)
	if res.ExitCode != 0 {
		t.Fatalf("exit %d: %s", res.ExitCode, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 8 {
		t.Fatalf("output %q", out)
	}
	checks := []struct{ what, got, want string }{
		{"uid", lines[0], strconv.Itoa(int(p.cfg.User))},
		{"CapEff", strings.Join(strings.Fields(lines[1]), " "), "CapEff: 0000000000000000"},
		{"NoNewPrivs", strings.Join(strings.Fields(lines[2]), " "), "NoNewPrivs: 1"},
		{"service account token", lines[len(lines)-5], "no-token"},
		{"KUBERNETES_* variables", lines[len(lines)-4], "0"},
		{"root file system mount", lines[len(lines)-3], "root-ro"},
		{"HOME", lines[len(lines)-2], sandbox.WorkspaceDir},
		{"cwd", lines[len(lines)-1], sandbox.WorkspaceDir},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: got %q, want %q (output %q)", c.what, c.got, c.want, out)
		}
	}
	pods := f.pods(t)
	if len(pods) != 1 {
		t.Fatalf("%d pods", len(pods))
	}
	pod := pods[0]
	if pod.Name != PodName(cfg.PodPrefix, thread) || pod.Labels[labelManagedBy] != "sandbox-mcp" || pod.Annotations[annThread] != thread {
		t.Errorf("pod meta: %s %v %v", pod.Name, pod.Labels, pod.Annotations)
	}
	spec := pod.Spec
	c := container(t, &spec, containerName)
	switch {
	case spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken,
		spec.EnableServiceLinks == nil || *spec.EnableServiceLinks,
		spec.SecurityContext.RunAsNonRoot == nil || !*spec.SecurityContext.RunAsNonRoot,
		spec.SecurityContext.SeccompProfile == nil || spec.SecurityContext.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault,
		c.SecurityContext.AllowPrivilegeEscalation == nil || *c.SecurityContext.AllowPrivilegeEscalation,
		len(c.SecurityContext.Capabilities.Drop) != 1 || c.SecurityContext.Capabilities.Drop[0] != "ALL",
		c.Resources.Limits.Memory().String() != "256Mi", c.Resources.Limits.Cpu().String() != "500m":
		t.Errorf("pod spec not hardened: %+v / %+v", spec.SecurityContext, c)
	}
	// The supervisor's installer is as hardened, first (started, and its
	// hook done, before the sandbox container), and has no more CPU than
	// the sandbox; its binary is read-only for commands.
	if len(spec.InitContainers) != 0 || len(spec.Containers) != 2 || spec.Containers[0].Name != installerName {
		t.Fatalf("containers: %d init, %d", len(spec.InitContainers), len(spec.Containers))
	}
	ic := spec.Containers[0]
	switch sc := ic.SecurityContext; {
	case ic.Image != cfg.SupervisorImage,
		sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation,
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem,
		sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL",
		ic.Resources.Limits.Cpu().Cmp(*c.Resources.Limits.Cpu()) > 0,
		ic.Lifecycle == nil || ic.Lifecycle.PostStart == nil || ic.Lifecycle.PostStart.Exec == nil:
		t.Errorf("installer not hardened: %+v", ic)
	}
	if pod.Annotations[annDefaultContainer] != containerName {
		t.Errorf("default container %q", pod.Annotations[annDefaultContainer])
	}
	if spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("restartPolicy %s", spec.RestartPolicy)
	}
	if out, _ := execOut(t, sb, "touch /.sandbox-mcp/x 2>/dev/null && echo writable; cat /proc/1/cmdline | tr '\\0' ' '"); !strings.HasPrefix(out, "/.sandbox-mcp/sandbox-mcp supervise --listen") {
		t.Errorf("supervisor dir writable, or PID 1 not the supervisor: %q", out)
	}
	// host_path layout: the thread's files on the node.
	writeFile(t, sb, sandbox.WorkspaceDir+"/on-node.txt", []byte("x"))
	if b, err := os.ReadFile(filepath.Join(cfg.Storage.HostPath, "threads", thread, "user-data", "workspace", "on-node.txt")); err != nil || string(b) != "x" {
		t.Errorf("file on node: %q %v", b, err)
	}
}

// TestTransfers moves large random files both ways; each is checked.
func TestTransfers(t *testing.T) {
	t.Parallel()
	cfg := newConfig(t)
	p := newProviderT(t, cfg)
	sb := acquire(t, p, "xfer-"+randomHex(4))
	for _, size := range []int{0, 1, 65537, 3 << 20} {
		data := make([]byte, size)
		rand.Read(data)
		name := fmt.Sprintf("%s/sub/dir/f%d.bin", sandbox.WorkspaceDir, size)
		writeFile(t, sb, name, data)
		if got := readFile(t, sb, name); !bytes.Equal(got, data) {
			t.Fatalf("size %d: read back %d bytes, differs", size, len(got))
		}
		sum := sha256.Sum256(data)
		out, _ := execOut(t, sb, fmt.Sprintf("sha256sum < sub/dir/f%d.bin", size))
		if !strings.HasPrefix(out, hex.EncodeToString(sum[:])) {
			t.Fatalf("size %d: in-Pod sha256 %q", size, out)
		}
		fi, err := sb.FS().Stat(t.Context(), name)
		if err != nil || fi.Size() != int64(size) || !fi.Mode().IsRegular() {
			t.Fatalf("stat: %v %v", fi, err)
		}
	}
	// Mode is kept across an edit; symlinks are listed as links.
	execOut(t, sb, "echo a > m.sh && chmod 750 m.sh && ln -s m.sh link && mkdir -p d")
	writeFile(t, sb, sandbox.WorkspaceDir+"/m.sh", []byte("b\n"))
	if out, _ := execOut(t, sb, "stat -c %a m.sh; cat m.sh"); out != "750\nb\n" {
		t.Fatalf("after edit: %q", out)
	}
	entries, err := sb.FS().ReadDir(t.Context(), sandbox.WorkspaceDir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() {
			n += "/"
		}
		if e.Type()&os.ModeSymlink != 0 {
			n += "@"
		}
		names = append(names, n)
	}
	if got := strings.Join(names, " "); got != "d/ link@ m.sh sub/" {
		t.Fatalf("ReadDir: %q", got)
	}
	// Errors name the virtual path and keep their class.
	if _, err := sb.FS().Open(t.Context(), sandbox.WorkspaceDir+"/nope"); !isErr(err, sandbox.ErrNotFound) {
		t.Fatalf("open missing: %v", err)
	}
	if _, err := sb.FS().ReadDir(t.Context(), sandbox.WorkspaceDir+"/m.sh"); !isErr(err, sandbox.ErrNotDir) {
		t.Fatalf("readdir file: %v", err)
	}
	if err := sb.FS().Edit(t.Context(), sandbox.WorkspaceDir+"/d", func(b []byte, _ bool) ([]byte, error) { return b, nil }); !isErr(err, sandbox.ErrIsDir) {
		t.Fatalf("edit dir: %v", err)
	}
	if f, err := sb.FS().Open(t.Context(), sandbox.WorkspaceDir+"/d"); err != nil {
		t.Fatalf("open dir: %v", err)
	} else if fi, _ := f.Stat(); !fi.IsDir() {
		t.Fatal("open dir: not a dir")
	}
	if err := sb.FS().Remove(t.Context(), sandbox.WorkspaceDir+"/link"); err != nil {
		t.Fatal(err)
	}
	if out, _ := execOut(t, sb, "ls"); out != "d\nm.sh\nsub\n" {
		t.Fatalf("after remove: %q", out)
	}
}

func isErr(err, target error) bool {
	for e := err; e != nil; {
		if e == target {
			return true
		}
		u, ok := e.(interface{ Unwrap() error })
		if !ok {
			return false
		}
		e = u.Unwrap()
	}
	return false
}

// TestReplicasShareThread: two providers (two server replicas) on one
// thread make one Pod, see the same files, and lose no update of 20
// concurrent edits split over them.
func TestReplicasShareThread(t *testing.T) {
	t.Parallel()
	cfg := newConfig(t)
	a, b := newProviderT(t, cfg), newProviderT(t, cfg)
	f := &fixture{p: a, cfg: cfg}
	thread := "shared-" + randomHex(4)
	sa, sb := acquire(t, a, thread), acquire(t, b, thread)
	const n = 20
	errs := make(chan error, 2*n)
	var wg sync.WaitGroup
	for i := range n {
		s := sandbox.Sandbox(sa)
		if i%2 == 1 {
			s = sb
		}
		wg.Go(func() {
			// The first calls race to make the Pod.
			errs <- s.FS().Edit(t.Context(), sandbox.WorkspaceDir+"/count", func(old []byte, _ bool) ([]byte, error) {
				return append(old, 'x'), nil
			})
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := readFile(t, sb, sandbox.WorkspaceDir+"/count"); len(got) != n {
		t.Fatalf("count has %d bytes, want %d", len(got), n)
	}
	if pods := f.pods(t); len(pods) != 1 {
		t.Fatalf("%d pods for one thread", len(pods))
	}
}

// TestPodDeletedBehindTheServersBack: the next call makes it again, with
// the thread's files intact.
func TestPodDeletedBehindTheServersBack(t *testing.T) {
	t.Parallel()
	cfg := newConfig(t)
	p := newProviderT(t, cfg)
	sb := acquire(t, p, "gone-"+randomHex(4))
	writeFile(t, sb, sandbox.OutputsDir+"/keep.txt", []byte("kept\n"))
	zero := int64(0)
	if err := cluster.cs.CoreV1().Pods(cfg.Namespace).Delete(t.Context(), sb.PodName(), metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, sb, sandbox.OutputsDir+"/keep.txt"); string(got) != "kept\n" {
		t.Fatalf("after delete: %q", got)
	}
	cluster.cs.CoreV1().Pods(cfg.Namespace).Delete(t.Context(), sb.PodName(), metav1.DeleteOptions{GracePeriodSeconds: &zero})
	if out, res := execOut(t, sb, "cat /mnt/user-data/outputs/keep.txt"); out != "kept\n" || res.ExitCode != 0 {
		t.Fatalf("bash after delete: %q %+v", out, res)
	}
}

// TestIdleAndReplicas: an idle Pod is deleted after IdleTimeout; beyond
// Replicas the least recently used goes (once its thread is released: a
// held one never goes); files stay either way.
func TestIdleAndReplicas(t *testing.T) {
	t.Parallel()
	cfg := newConfig(t)
	cfg.IdleTimeout = 20 * time.Second
	cfg.Replicas = 1
	p := newProviderT(t, cfg)
	f := &fixture{p: p, cfg: cfg}
	a, b := "lru-a-"+randomHex(4), "lru-b-"+randomHex(4)
	sa := acquireNow(t, p, a)
	writeFile(t, sa, sandbox.WorkspaceDir+"/a.txt", []byte("a"))
	p.Release(a)
	sb := acquireNow(t, p, b)
	execOut(t, sb, "true") // a second Pod: beyond replicas, a goes (long before it idles out)
	p.Release(b)
	waitFor(t, 5*time.Second, "least recently used Pod deleted", func() bool {
		pods := f.pods(t)
		return len(pods) == 1 && pods[0].Name == sb.PodName()
	})
	sa = acquireNow(t, p, a)
	if got := readFile(t, sa, sandbox.WorkspaceDir+"/a.txt"); string(got) != "a" {
		t.Fatalf("a after eviction: %q", got)
	}
	p.Release(a)
	// Now a is back and b is gone; a idles out.
	waitFor(t, 60*time.Second, "idle Pods deleted", func() bool { return len(f.pods(t)) == 0 })
}

// acquireNow is acquire without the release at the end: the test
// releases.
func acquireNow(t testing.TB, p *Provider, thread string) *Sandbox {
	t.Helper()
	sb, err := p.Acquire(t.Context(), thread)
	if err != nil {
		t.Fatal(err)
	}
	return sb.(*Sandbox)
}

func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	if !testkit.Poll(d, 200*time.Millisecond, cond) {
		t.Fatalf("timed out waiting: %s", what)
	}
}

// TestAPIServerDown: a call gets a clear error at once, not a hang.
func TestAPIServerDown(t *testing.T) {
	t.Parallel()
	cfg := newConfig(t)
	cfg.IdleTimeout = -1 // no reaper listing while the client is swapped
	p := newProviderT(t, cfg)
	dead := rest.CopyConfig(p.rest)
	dead.Host = "https://127.0.0.1:1"
	cs, err := k8s.NewForConfig(dead)
	if err != nil {
		t.Fatal(err)
	}
	p.rest, p.cs = dead, cs
	sb := acquire(t, p, "down-"+randomHex(4))
	start := time.Now()
	_, err = sb.Exec(t.Context(), sandbox.ExecRequest{Command: "true", Timeout: time.Minute, Output: io.Discard})
	if err == nil || !strings.Contains(err.Error(), "unavailable") || time.Since(start) > 10*time.Second {
		t.Fatalf("exec with the API server down: %v after %v", err, time.Since(start))
	}
	_, err = sb.FS().Stat(t.Context(), sandbox.WorkspaceDir)
	if err == nil || !strings.Contains(err.Error(), "unavailable") {
		t.Fatalf("stat with the API server down: %v", err)
	}
	if _, err := New(t.Context(), Config{Kubeconfig: writeDeadKubeconfig(t), Namespace: "x", Storage: Storage{Mode: StoragePVC}}); err == nil || !strings.Contains(err.Error(), "unavailable") {
		t.Fatalf("New with the API server down: %v", err)
	}
}

func writeDeadKubeconfig(t *testing.T) string {
	name := filepath.Join(t.TempDir(), "kubeconfig")
	os.WriteFile(name, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600)
	return name
}

// TestMeasure writes down, in one run: cold first call (Pod create ->
// Running -> first exec), warm `true` through the provider and through
// kubectl exec, and a small read.
func TestMeasure(t *testing.T) {
	cfg := newConfig(t)
	p := newProviderT(t, cfg)
	sb := acquire(t, p, "measure-"+randomHex(4))
	start := time.Now()
	execOut(t, sb, "true")
	cold := time.Since(start)
	const n = 10
	start = time.Now()
	for range n {
		execOut(t, sb, "true")
	}
	warm := time.Since(start) / n
	writeFile(t, sb, sandbox.WorkspaceDir+"/small.txt", []byte("hello\n"))
	start = time.Now()
	for range n {
		readFile(t, sb, sandbox.WorkspaceDir+"/small.txt")
	}
	read := time.Since(start) / n
	start = time.Now()
	for range n {
		writeFile(t, sb, sandbox.WorkspaceDir+"/small.txt", []byte("hello\n"))
	}
	edit := time.Since(start) / n
	kubectl := "n/a"
	if bin, err := exec.LookPath("kubectl"); err == nil {
		start = time.Now()
		ok := true
		for range n {
			if out, err := exec.Command(bin, "-n", cfg.Namespace, "exec", sb.PodName(), "--", "true").CombinedOutput(); err != nil {
				t.Logf("kubectl exec: %v %s", err, out)
				ok = false
				break
			}
		}
		if ok {
			kubectl = (time.Since(start) / n).Round(time.Millisecond).String()
		}
	}
	t.Logf("MEASURE cold first call (create->Running->exec): %v; warm bash true: %v; kubectl exec true: %s; read_file small: %v; write (locked edit) small: %v",
		cold.Round(time.Millisecond), warm.Round(time.Millisecond), kubectl, read.Round(time.Millisecond), edit.Round(time.Millisecond))
}

// TestPVCStorage: a claim per thread (<pod>-data), bound here to a static
// hostPath PersistentVolume of a class of the test's own (binding needs
// kube-controller-manager); the files outlive the Pod.
func TestPVCStorage(t *testing.T) {
	t.Parallel()
	cfg := pvcConfig(t, newConfig(t), 1)
	p := newProviderT(t, cfg)
	thread := "pvc-" + randomHex(4)
	sb := acquire(t, p, thread)
	writeFile(t, sb, sandbox.UploadsDir+"/in-claim.txt", []byte("claim\n"))
	claim, err := cluster.cs.CoreV1().PersistentVolumeClaims(cfg.Namespace).Get(t.Context(), sb.PodName()+"-data", metav1.GetOptions{})
	if err != nil || claim.Annotations[annThread] != thread || claim.Spec.VolumeName != cfg.Storage.StorageClass+"-0" {
		t.Fatalf("claim: %v %v", claim, err)
	}
	if b, err := os.ReadFile(filepath.Join(volumeDir(t, cfg.Namespace, claim.Name), "uploads", "in-claim.txt")); err != nil || string(b) != "claim\n" {
		t.Fatalf("file in the volume: %q %v", b, err)
	}
	zero := int64(0)
	cluster.cs.CoreV1().Pods(cfg.Namespace).Delete(t.Context(), sb.PodName(), metav1.DeleteOptions{GracePeriodSeconds: &zero})
	if out, res := execOut(t, sb, "cat ../uploads/in-claim.txt; ls -d /mnt/user-data/*"); res.ExitCode != 0 || out != "claim\n/mnt/user-data/outputs\n/mnt/user-data/uploads\n/mnt/user-data/workspace\n" {
		t.Fatalf("after the Pod was deleted: %q %+v", out, res)
	}
}

func resourceMust(s string) resource.Quantity { return resource.MustParse(s) }

// pvcConfig is cfg in storage mode pvc, its claims bound to n static
// hostPath PersistentVolumes of a class of the test's own (the test
// cluster has no provisioner; binding needs kube-controller-manager), each
// a directory of the Pods' user. The claims of cfg's prefix and the
// volumes go when the test ends.
func pvcConfig(t testing.TB, cfg Config, n int) Config {
	t.Helper()
	class := "smcp-pvc-" + randomHex(4)
	for i := range n {
		dir := t.TempDir()
		os.Chown(dir, 1000, 1000)
		hostPathPV(t, t.Context(), cluster.cs, fmt.Sprintf("%s-%d", class, i), class, dir, map[string]string{"smcp-test-class": class})
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cluster.cs.CoreV1().PersistentVolumeClaims(cfg.Namespace).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: labelPrefix + "=" + cfg.PodPrefix})
		cluster.cs.CoreV1().PersistentVolumes().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "smcp-test-class=" + class})
	})
	cfg.Storage = Storage{Mode: StoragePVC, StorageClass: class, Size: "1Gi"}
	return cfg
}

// hostPathPV makes the 1 GiB PersistentVolume name of storage class
// class on node directory dir, with labels; the caller deletes it.
func hostPathPV(t testing.TB, ctx context.Context, cs *k8s.Clientset, name, class, dir string, labels map[string]string) {
	t.Helper()
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resourceMust("1Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName:              class,
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir}},
		},
	}
	if _, err := cs.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// volumeDir is the node directory of the volume claim name is bound to.
func volumeDir(t testing.TB, ns, name string) string {
	t.Helper()
	var c *corev1.PersistentVolumeClaim
	waitFor(t, time.Minute, "claim "+name+" bound", func() bool {
		var err error
		c, err = cluster.cs.CoreV1().PersistentVolumeClaims(ns).Get(t.Context(), name, metav1.GetOptions{})
		return err == nil && c.Spec.VolumeName != ""
	})
	pv, err := cluster.cs.CoreV1().PersistentVolumes().Get(t.Context(), c.Spec.VolumeName, metav1.GetOptions{})
	if err != nil || pv.Spec.HostPath == nil {
		t.Fatalf("claim %s's volume %s: %v", name, c.Spec.VolumeName, err)
	}
	return pv.Spec.HostPath.Path
}

// t26821 and t49091 share the first 8 hex of their sha256, the length of
// the names the provider once used.
func TestPodNamesOfCollidingThreads(t *testing.T) {
	if a, b := PodName("sandbox-mcp", "t26821"), PodName("sandbox-mcp", "t49091"); a == b || len(a) != len("sandbox-mcp-")+16 {
		t.Fatalf("t26821 -> %s, t49091 -> %s", a, b)
	}
}

// Each of two threads whose 8-hex names collide gets its own Pod and
// files; a Pod under a thread's name whose annotation names another thread
// is never used for it (a clear error on each call, the Pod left alone).
func TestPodOfAnotherThreadIsRefused(t *testing.T) {
	t.Parallel()
	cfg := newConfig(t)
	p := newProviderT(t, cfg)
	f := &fixture{p: p, cfg: cfg}
	a, b := acquire(t, p, "t26821"), acquire(t, p, "t49091")
	execOut(t, a, "echo secret > secret.txt")
	if out, _ := execOut(t, b, "cat secret.txt 2>/dev/null || echo absent"); out != "absent\n" {
		t.Fatalf("t49091 sees t26821's files: %q", out)
	}
	if pods := f.pods(t); len(pods) != 2 {
		t.Fatalf("%d Pods for two threads", len(pods))
	}

	// Another thread's Pod under c's name.
	c := acquire(t, p, "victim-"+randomHex(4))
	other := p.podSpec(b)
	other.Name = c.PodName()
	created, err := cluster.cs.CoreV1().Pods(cfg.Namespace).Create(t.Context(), other, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		_, err := c.Exec(t.Context(), sandbox.ExecRequest{Command: "true", Timeout: time.Minute, Output: io.Discard})
		if err == nil || !strings.Contains(err.Error(), "another thread") || !strings.Contains(err.Error(), c.PodName()) {
			t.Fatalf("exec in another thread's Pod: err = %v", err)
		}
	}
	got, err := cluster.cs.CoreV1().Pods(cfg.Namespace).Get(t.Context(), c.PodName(), metav1.GetOptions{})
	if err != nil || got.UID != created.UID || got.DeletionTimestamp != nil {
		t.Fatalf("the other thread's Pod was disturbed: %v", err)
	}
}

// A timeout kills only its own command: another one running in the same
// Pod goes on and ends normally (the kill runs with the image's sh: dash
// on Debian images, busybox sh on busybox).
func TestTimeoutKillsOnlyItsCommand(t *testing.T) {
	t.Parallel()
	cfg := newConfig(t)
	p := newProviderT(t, cfg)
	sandboxtest.TimeoutKillsOnlyItsCommand(t, acquire(t, p, "two-calls-"+randomHex(4)))
}

func ptr[T any](v T) *T { return &v }
