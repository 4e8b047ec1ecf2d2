package kubernetes

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"gopkg.in/yaml.v3"
	appsv1 "k8s.io/api/apps/v1"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"

	"github.com/sandbox-mcp/sandbox-mcp/internal/testkit"
)

// TestDeploy (issue 9 item 7): deploy/kubernetes/ on a real cluster. It
// builds the server image offline (build-image.sh --save: a static binary
// FROM scratch) and loads it into the cluster, applies every manifest with
// server-side apply into a fresh namespace smcp-test-<hex> (never the real
// sandbox-mcp one), waits for the Deployment's Pods to be Ready, GETs
// /healthz of each through the API server's pod proxy, makes one bash call
// through a replica (so the server, as its ServiceAccount, makes a sandbox
// Pod and its claim and execs into it), and shows with SubjectAccessReviews
// that the ServiceAccount's Role grants exactly what the provider calls and
// nothing else: no secrets, no ConfigMaps, leases only to get, make and
// delete (the threads' records), nothing outside its namespace, nothing
// cluster-wide.
//
// Like the other tests here it takes the cluster from KUBECONFIG, and skips
// without one unless SANDBOX_MCP_REQUIRE_K8S=1. The image step needs docker
// (else it says SKIPPED, or fails with SANDBOX_MCP_REQUIRE_DOCKER=1) and a
// way into the cluster's image store: SANDBOX_MCP_K8S_LOAD (a command the
// tarball is appended to, e.g. "kind load image-archive"), or
// SANDBOX_MCP_K8S_SERVER_IMAGE naming a server image the cluster already has
// (deploy/kubernetes/dev/cluster.sh loads one, and its env names it). The sandbox image is SANDBOX_MCP_K8S_IMAGE, as for the other tests.
//
// Adaptations for a test cluster, all made here on the parsed objects (the
// manifests' files are only read): the namespace (objects, RoleBinding
// subject, the server's config), the server image (pullPolicy Never), a
// random token in the Secret, in the server's config the sandbox image,
// sandbox limits of 500m/256Mi and the claims' storage class (a static
// hostPath PersistentVolume of the test's own), and — only
// when the API server listens on loopback, as deploy/kubernetes/dev/cluster.sh's does, so that
// Pods cannot reach it through the kubernetes Service — a TCP relay on the
// node's address (this machine) that the Pods reach as kubernetes.default.svc
// (a hostAlias and KUBERNETES_SERVICE_HOST/PORT), so that the server still
// connects the in-cluster way, with its ServiceAccount token.
func TestDeploy(t *testing.T) {
	rc, cs := deployCluster(t)
	began := time.Now()
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute+30*time.Second)
	defer cancel()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	manifests := readManifests(t, filepath.Join(root, "deploy", "kubernetes"))
	m := checkManifests(t, manifests)

	suffix := randomHex(4)
	ns := "smcp-test-" + suffix
	class := "smcp-test-" + suffix // the claims' storage class, and its one PersistentVolume
	if _, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("namespace %s: want a fresh one, got %v", ns, err)
	}
	volume := t.TempDir()
	os.Chown(volume, 1000, 1000) // the sandbox Pods' default uid
	t.Cleanup(func() { cleanupDeploy(t, cs, ns, class) })

	stepStart := time.Now()
	image, imageNote := serverImage(t, ctx, root)
	t.Logf("DEPLOY image: %s (%v)", imageNote, time.Since(stepStart).Round(time.Millisecond))

	relay := apiRelay(t, ctx, cs, rc)
	sandboxImage, sandboxPull := testImage()
	token := randomHex(16)
	objs := adapt(t, manifests, m, adaptation{
		ns: ns, image: image, token: token, class: class,
		sandboxImage: sandboxImage, sandboxPull: sandboxPull, relay: relay,
	})

	hostPathPV(t, ctx, cs, class, class, volume, map[string]string{"sandbox-mcp/test": ns})

	stepStart = time.Now()
	applyAll(t, ctx, rc, cs, objs)
	applied := time.Now()
	t.Logf("DEPLOY server-side apply of %d objects into %s: %v", len(objs), ns, time.Since(stepStart).Round(time.Millisecond))

	t.Run("LeastPrivilege", func(t *testing.T) {
		start := time.Now()
		n := checkRole(t, ctx, rc, ns, m.serviceAccount)
		t.Logf("DEPLOY %d SubjectAccessReviews as system:serviceaccount:%s:%s: %v", n, ns, m.serviceAccount, time.Since(start).Round(time.Millisecond))
	})

	t.Run("Ready", func(t *testing.T) {
		if image == "" {
			t.Skipf("SKIPPED: no server image (%s)", imageNote)
		}
		pods := waitDeploymentReady(t, ctx, cs, ns, m.deployment)
		t.Logf("DEPLOY apply -> %d Pods Ready: %v", len(pods), time.Since(applied).Round(time.Millisecond))
		for _, pod := range pods {
			body, err := cs.CoreV1().Pods(ns).ProxyGet("http", pod.Name, m.port, "/healthz", nil).DoRaw(ctx)
			if err != nil || string(body) != "ok\n" {
				t.Errorf("GET /healthz of %s through the pod proxy: %q %v", pod.Name, body, err)
			}
		}
		if t.Failed() {
			return
		}
		t.Logf("DEPLOY /healthz of %d Pods through the pod proxy: ok", len(pods))

		// One tool call through a replica: the server, with its own
		// ServiceAccount token, makes the thread's claim and Pod and execs.
		start := time.Now()
		out := bashThroughReplica(t, ctx, rc, ns, pods[0].Name, m.port, token,
			"id -u; ls /mnt/user-data; echo from-the-deployment > /mnt/user-data/outputs/deployed.txt")
		if out != "1000\noutputs\nuploads\nworkspace\n[exit code 0]" {
			t.Fatalf("bash through %s: %q", pods[0].Name, out)
		}
		t.Logf("DEPLOY first bash call through a replica (claim + sandbox Pod + exec, as the ServiceAccount): %v", time.Since(start).Round(time.Millisecond))
		// That replica's metrics, as Prometheus scrapes them (the Pod's
		// annotated port, through the pod proxy): the call, and the Pod it
		// made for it.
		raw, err := cs.CoreV1().Pods(ns).ProxyGet("http", pods[0].Name, m.metricsPort, "/metrics", nil).DoRaw(ctx)
		if err != nil {
			t.Fatalf("GET /metrics of %s: %v", pods[0].Name, err)
		}
		parser := expfmt.NewTextParser(model.LegacyValidation)
		fams, err := parser.TextToMetricFamilies(bytes.NewReader(raw))
		if err != nil {
			t.Fatalf("GET /metrics of %s: the text parser: %v", pods[0].Name, err)
		}
		if got := metricValue(fams, "sandbox_mcp_tool_calls_total", "outcome", "ok", "tool", "bash"); got != 1 {
			t.Errorf("metrics: bash calls ok = %v, want 1", got)
		}
		if got := metricValue(fams, "sandbox_mcp_sandbox_start_duration_seconds", "provider", "kubernetes"); got != 1 {
			t.Errorf("metrics: Pods started = %v, want 1", got)
		}
		if got := metricValue(fams, "sandbox_mcp_sandboxes", "provider", "kubernetes", "state", "running"); got != 1 {
			t.Errorf("metrics: Pods running = %v, want 1", got)
		}
		sandboxes, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: labelManagedBy + "=" + managedBy})
		if err != nil || len(sandboxes.Items) != 1 {
			t.Fatalf("sandbox Pods: %v %v", sandboxes, err)
		}
		claims, err := cs.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{})
		if err != nil || len(claims.Items) != 1 || claims.Items[0].Spec.VolumeName != class {
			t.Fatalf("claims: %v %v", claims, err)
		}
		if relay != nil { // the node is this machine: the file is in the volume
			if b, err := os.ReadFile(filepath.Join(volume, "outputs", "deployed.txt")); err != nil || string(b) != "from-the-deployment\n" {
				t.Errorf("file in the claim's volume: %q %v", b, err)
			}
		}
		// The rest of what the server did as its ServiceAccount: the
		// deny-all NetworkPolicy at start, the last-used annotation (a
		// patch), and nothing refused on the way.
		nps, err := cs.NetworkingV1().NetworkPolicies(ns).List(ctx, metav1.ListOptions{})
		if err != nil || len(nps.Items) != 1 || !strings.HasSuffix(nps.Items[0].Name, "-deny-all") {
			t.Errorf("NetworkPolicies made by the server: %v %v", nps, err)
		}
		sandbox := sandboxes.Items[0].Name
		deadline := time.Now().Add(20 * time.Second)
		for {
			p, err := cs.CoreV1().Pods(ns).Get(ctx, sandbox, metav1.GetOptions{})
			if err == nil && p.Annotations[annLastUsed] != "" {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("sandbox Pod %s: no %s annotation from the server after 20 s: %v", sandbox, annLastUsed, err)
				break
			}
			time.Sleep(250 * time.Millisecond)
		}
		for _, pod := range pods {
			raw, err := cs.CoreV1().Pods(ns).GetLogs(pod.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
			if err != nil {
				t.Errorf("logs of %s: %v", pod.Name, err)
			} else if strings.Contains(strings.ToLower(string(raw)), "forbidden") {
				t.Errorf("server %s was refused something by the API server:\n%s", pod.Name, raw)
			}
		}
	})
	t.Logf("DEPLOY total (before cleanup): %v", time.Since(began).Round(time.Millisecond))
}

// metricValue is the value of the series of family name with exactly the
// labels kv (name, value, ...): a counter's or a gauge's, a histogram's
// count; -1 when there is none.
func metricValue(fams map[string]*dto.MetricFamily, name string, kv ...string) float64 {
	f := fams[name]
	if f == nil {
		return -1
	}
	for _, m := range f.Metric {
		if len(m.Label) != len(kv)/2 {
			continue
		}
		match := true
		for i := 0; i+1 < len(kv); i += 2 {
			found := false
			for _, l := range m.Label {
				found = found || l.GetName() == kv[i] && l.GetValue() == kv[i+1]
			}
			match = match && found
		}
		switch {
		case !match:
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount())
		}
	}
	return -1
}

// The manifests hang together (checkManifests), without a cluster.
func TestDeployManifests(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	m := checkManifests(t, readManifests(t, filepath.Join(root, "deploy", "kubernetes")))
	if m.port != "8080" || m.metricsPort != "9090" {
		t.Errorf("ports %s and %s, want 8080 and 9090 (the docs name them)", m.port, m.metricsPort)
	}
}

// deployCluster is requireCluster's rule (skip without KUBECONFIG, fail
// with SANDBOX_MCP_REQUIRE_K8S=1) without its shared namespace.
func deployCluster(t *testing.T) (*rest.Config, *k8s.Clientset) {
	t.Helper()
	if os.Getenv("KUBECONFIG") == "" {
		noCluster(t, "no cluster: set KUBECONFIG")
	}
	rc, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		noCluster(t, "no cluster at KUBECONFIG: %v", err)
	}
	rc.QPS, rc.Burst = 100, 200
	cs, err := k8s.NewForConfig(rc)
	if err != nil {
		noCluster(t, "no cluster at KUBECONFIG: %v", err)
	}
	probe := rest.CopyConfig(rc)
	probe.Timeout = 10 * time.Second
	pcs, err := k8s.NewForConfig(probe)
	if err == nil {
		_, err = pcs.Discovery().ServerVersion()
	}
	if err != nil {
		noCluster(t, "no cluster at KUBECONFIG: %v", err)
	}
	return rc, cs
}

// cleanupDeploy deletes the test namespace (its Pods at once) and the
// PersistentVolume, and waits a bounded time for both to go.
func cleanupDeploy(t *testing.T, cs *k8s.Clientset, ns, pv string) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := time.Now()
	zero := int64(0)
	cs.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{})
	if err := cs.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("cleanup: delete namespace %s: %v", ns, err)
	}
	if err := cs.CoreV1().PersistentVolumes().Delete(ctx, pv, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("cleanup: delete PersistentVolume %s: %v", pv, err)
	}
	for {
		_, errNS := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		_, errPV := cs.CoreV1().PersistentVolumes().Get(ctx, pv, metav1.GetOptions{})
		if apierrors.IsNotFound(errNS) && apierrors.IsNotFound(errPV) {
			t.Logf("DEPLOY cleanup: namespace %s and PersistentVolume %s gone in %v", ns, pv, time.Since(start).Round(time.Millisecond))
			return
		}
		select {
		case <-ctx.Done():
			t.Logf("cleanup: namespace %s (%v) or PersistentVolume %s (%v) still there after %v; deletion goes on in the cluster",
				ns, errNS, pv, errPV, time.Since(start).Round(time.Millisecond))
			return
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// readManifests decodes every document of deploy/kubernetes/*.yaml.
func readManifests(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in %s: %v", dir, err)
	}
	sort.Strings(files)
	var objs []*unstructured.Unstructured
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
		for {
			var obj map[string]any
			if err := dec.Decode(&obj); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if len(obj) == 0 {
				continue
			}
			u := &unstructured.Unstructured{Object: obj}
			if u.GetKind() == "" || u.GetName() == "" {
				t.Fatalf("%s: a document without kind or name: %v", f, obj)
			}
			objs = append(objs, u)
		}
	}
	return objs
}

// manifestFacts are what the test needs to know of the manifests.
type manifestFacts struct {
	namespace      string // the one they all live in (sandbox-mcp)
	deployment     string
	serviceAccount string
	configMap      string
	secret         string
	tokenKey       string
	port           string // the server's container port, numeric
	metricsPort    string // its --metrics port, numeric, which Prometheus scrapes
}

func typed[T any](t *testing.T, u *unstructured.Unstructured) *T {
	t.Helper()
	var v T
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, &v, true); err != nil {
		t.Fatalf("%s %s: %v", u.GetKind(), u.GetName(), err)
	}
	return &v
}

// checkManifests checks that the manifests hang together: one namespace,
// which the server's config names too; the RoleBinding binds the Role to
// the ServiceAccount the Deployment runs as; the Secret and ConfigMap the
// Deployment uses are there; the Service selects the Deployment's Pods; the
// server runs --http with /healthz as its readiness probe.
func checkManifests(t *testing.T, objs []*unstructured.Unstructured) manifestFacts {
	t.Helper()
	by := map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		key := o.GetKind() + "/" + o.GetName()
		if by[key] != nil {
			t.Fatalf("manifests: %s twice", key)
		}
		by[key] = o
	}
	var f manifestFacts
	for _, o := range objs {
		if o.GetKind() == "Namespace" {
			if f.namespace != "" {
				t.Fatalf("manifests: two Namespaces")
			}
			f.namespace = o.GetName()
		}
	}
	if f.namespace == "" {
		t.Fatal("manifests: no Namespace")
	}
	count := map[string]int{}
	for _, o := range objs {
		count[o.GetKind()]++
		if o.GetKind() != "Namespace" && o.GetNamespace() != f.namespace {
			t.Errorf("manifests: %s %s in namespace %q, want %q", o.GetKind(), o.GetName(), o.GetNamespace(), f.namespace)
		}
	}
	for _, kind := range []string{"ServiceAccount", "Role", "RoleBinding", "Deployment", "Service", "ConfigMap", "Secret"} {
		if count[kind] != 1 {
			t.Fatalf("manifests: %d %s objects, want 1", count[kind], kind)
		}
	}
	for _, kind := range []string{"ClusterRole", "ClusterRoleBinding"} {
		if count[kind] != 0 {
			t.Errorf("manifests: a %s: the server needs nothing cluster-wide", kind)
		}
	}
	var dep *appsv1.Deployment
	var svc *corev1.Service
	var rb *rbacv1.RoleBinding
	var role *rbacv1.Role
	var cm *corev1.ConfigMap
	var sa *corev1.ServiceAccount
	var secret *corev1.Secret
	for _, o := range objs {
		switch o.GetKind() {
		case "Deployment":
			dep = typed[appsv1.Deployment](t, o)
		case "Service":
			svc = typed[corev1.Service](t, o)
		case "RoleBinding":
			rb = typed[rbacv1.RoleBinding](t, o)
		case "Role":
			role = typed[rbacv1.Role](t, o)
		case "ConfigMap":
			cm = typed[corev1.ConfigMap](t, o)
		case "ServiceAccount":
			sa = typed[corev1.ServiceAccount](t, o)
		case "Secret":
			secret = typed[corev1.Secret](t, o)
		}
	}
	f.deployment, f.serviceAccount, f.configMap, f.secret = dep.Name, sa.Name, cm.Name, secret.Name
	if rb.RoleRef.Kind != "Role" || rb.RoleRef.Name != role.Name || len(rb.Subjects) != 1 ||
		rb.Subjects[0].Kind != "ServiceAccount" || rb.Subjects[0].Name != sa.Name || rb.Subjects[0].Namespace != f.namespace {
		t.Errorf("manifests: RoleBinding %s does not bind Role %s to ServiceAccount %s/%s: %+v", rb.Name, role.Name, f.namespace, sa.Name, rb)
	}
	spec := dep.Spec.Template.Spec
	if spec.ServiceAccountName != sa.Name {
		t.Errorf("manifests: the Deployment runs as ServiceAccount %q, the Role is bound to %q", spec.ServiceAccountName, sa.Name)
	}
	if sel, err := metav1.LabelSelectorAsSelector(dep.Spec.Selector); err != nil || !sel.Matches(labels.Set(dep.Spec.Template.Labels)) {
		t.Errorf("manifests: the Deployment's selector does not select its Pods: %v", err)
	}
	if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(dep.Spec.Template.Labels)) || len(svc.Spec.Selector) == 0 {
		t.Errorf("manifests: Service %s does not select the Deployment's Pods", svc.Name)
	}
	if dep.Spec.Replicas == nil || *dep.Spec.Replicas < 2 {
		t.Errorf("manifests: the Deployment wants 2 replicas (SPEC §14)")
	}
	if len(spec.Containers) != 1 {
		t.Fatalf("manifests: %d containers in the server Pod", len(spec.Containers))
	}
	c := spec.Containers[0]
	if !slices.Contains(c.Args, "--http") {
		t.Errorf("manifests: the server does not run --http: %v", c.Args)
	}
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != "/healthz" {
		t.Errorf("manifests: no /healthz readiness probe")
	}
	for _, p := range c.Ports {
		if c.ReadinessProbe != nil && c.ReadinessProbe.HTTPGet != nil && (p.Name == c.ReadinessProbe.HTTPGet.Port.String() || p.ContainerPort == c.ReadinessProbe.HTTPGet.Port.IntVal) {
			f.port = fmt.Sprint(p.ContainerPort)
		}
	}
	if f.port == "" {
		t.Fatalf("manifests: the readiness probe's port is none of the container's ports")
	}
	// --metrics on a port of the container, which the Pods' annotations
	// tell Prometheus to scrape at /metrics.
	if i := slices.Index(c.Args, "--metrics"); i < 0 || i+1 >= len(c.Args) {
		t.Errorf("manifests: the server does not serve --metrics: %v", c.Args)
	} else if host, port, err := net.SplitHostPort(c.Args[i+1]); err != nil || host == "127.0.0.1" || host == "localhost" {
		t.Errorf("manifests: --metrics %q: want an address the Pod's IP reaches (0.0.0.0:PORT)", c.Args[i+1])
	} else {
		for _, p := range c.Ports {
			if fmt.Sprint(p.ContainerPort) == port && p.Name == "metrics" {
				f.metricsPort = port
			}
		}
		if f.metricsPort == "" {
			t.Errorf("manifests: --metrics's port %s is not the container's port named metrics: %v", port, c.Ports)
		}
		ann := dep.Spec.Template.Annotations
		if ann["prometheus.io/scrape"] != "true" || ann["prometheus.io/port"] != port || ann["prometheus.io/path"] != "/metrics" {
			t.Errorf("manifests: the Pods' prometheus.io annotations %v: want scrape \"true\", port %q, path /metrics", ann, port)
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			ref := e.ValueFrom.SecretKeyRef
			if e.Name != "SANDBOX_MCP_AUTH_TOKEN" || ref.Name != secret.Name {
				t.Errorf("manifests: env %s from Secret %s: want SANDBOX_MCP_AUTH_TOKEN from %s", e.Name, ref.Name, secret.Name)
			}
			f.tokenKey = ref.Key
		}
	}
	if _, ok := secret.StringData[f.tokenKey]; !ok || f.tokenKey == "" {
		t.Errorf("manifests: Secret %s has no key %q for SANDBOX_MCP_AUTH_TOKEN", secret.Name, f.tokenKey)
	}
	usesConfig := false
	for _, v := range spec.Volumes {
		if v.ConfigMap != nil && v.ConfigMap.Name == cm.Name {
			usesConfig = true
		}
	}
	if !usesConfig {
		t.Errorf("manifests: the Deployment does not mount ConfigMap %s", cm.Name)
	}
	var cfg struct {
		Provider   string `yaml:"provider"`
		Kubernetes struct {
			Namespace       string `yaml:"namespace"`
			SupervisorImage string `yaml:"supervisor_image"`
		} `yaml:"kubernetes"`
	}
	if err := yaml.Unmarshal([]byte(cm.Data["config.yaml"]), &cfg); err != nil {
		t.Fatalf("manifests: ConfigMap %s config.yaml: %v", cm.Name, err)
	}
	if img := spec.Containers[0].Image; cfg.Kubernetes.SupervisorImage != img {
		t.Errorf("manifests: kubernetes.supervisor_image %q is not the server's image %q (the sandbox Pods' supervisor comes from it)", cfg.Kubernetes.SupervisorImage, img)
	}
	if cfg.Provider != "kubernetes" || cfg.Kubernetes.Namespace != f.namespace {
		t.Errorf("manifests: the server's config says provider %q, namespace %q: want kubernetes, %q (the Role is only there)",
			cfg.Provider, cfg.Kubernetes.Namespace, f.namespace)
	}
	return f
}

// adaptation is what a test cluster needs changed.
type adaptation struct {
	ns, image, token, class   string
	sandboxImage, sandboxPull string
	relay                     *relay
}

// adapt copies the manifests into the test namespace with the test's
// image, token, storage class and API access, and refuses to go on if any
// object would still land in the real namespace.
func adapt(t *testing.T, objs []*unstructured.Unstructured, m manifestFacts, a adaptation) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	for _, o := range objs {
		o = o.DeepCopy()
		switch o.GetKind() {
		case "Namespace":
			o.SetName(a.ns)
		default:
			o.SetNamespace(a.ns)
		}
		switch o.GetKind() {
		case "RoleBinding":
			subjects, _, _ := unstructured.NestedSlice(o.Object, "subjects")
			for _, s := range subjects {
				s.(map[string]any)["namespace"] = a.ns
			}
			unstructured.SetNestedSlice(o.Object, subjects, "subjects")
		case "Secret":
			unstructured.SetNestedField(o.Object, a.token, "stringData", m.tokenKey)
		case "ConfigMap":
			text, _, _ := unstructured.NestedString(o.Object, "data", "config.yaml")
			var cfg map[string]any
			if err := yaml.Unmarshal([]byte(text), &cfg); err != nil {
				t.Fatal(err)
			}
			k, _ := cfg["kubernetes"].(map[string]any)
			if k == nil {
				k = map[string]any{}
				cfg["kubernetes"] = k
			}
			k["namespace"] = a.ns
			k["image"] = a.sandboxImage
			if a.image != "" {
				k["supervisor_image"] = a.image // the server's image, as in the manifests
			}
			k["image_pull_policy"] = a.sandboxPull
			k["resources"] = map[string]any{"cpu": "500m", "memory": "256Mi", "ephemeral_storage": "256Mi"}
			st, _ := k["storage"].(map[string]any)
			if st == nil {
				st = map[string]any{}
				k["storage"] = st
			}
			st["storage_class"] = a.class
			b, err := yaml.Marshal(cfg)
			if err != nil {
				t.Fatal(err)
			}
			unstructured.SetNestedField(o.Object, string(b), "data", "config.yaml")
		case "Deployment":
			podSpec, _, _ := unstructured.NestedMap(o.Object, "spec", "template", "spec")
			containers, _ := podSpec["containers"].([]any)
			c := containers[0].(map[string]any)
			if a.image != "" {
				c["image"] = a.image
				c["imagePullPolicy"] = "Never"
			}
			if a.relay != nil {
				env, _ := c["env"].([]any)
				c["env"] = append(env,
					map[string]any{"name": "KUBERNETES_SERVICE_HOST", "value": relayHost},
					map[string]any{"name": "KUBERNETES_SERVICE_PORT", "value": fmt.Sprint(a.relay.port)})
				podSpec["hostAliases"] = []any{map[string]any{"ip": a.relay.ip, "hostnames": []any{relayHost}}}
			}
			unstructured.SetNestedMap(o.Object, podSpec, "spec", "template", "spec")
		}
		if o.GetNamespace() == m.namespace || (o.GetKind() == "Namespace" && o.GetName() == m.namespace) {
			t.Fatalf("adapt: %s %s would land in the real namespace %s", o.GetKind(), o.GetName(), m.namespace)
		}
		out = append(out, o)
	}
	// The Namespace first; the rest in the manifests' order.
	sort.SliceStable(out, func(i, j int) bool { return out[i].GetKind() == "Namespace" && out[j].GetKind() != "Namespace" })
	return out
}

// applyAll applies the objects with server-side apply (field manager
// sandbox-mcp-test) through the dynamic client, then checks that the
// apiserver kept what it was given (the Role's rules, the replicas).
func applyAll(t *testing.T, ctx context.Context, rc *rest.Config, cs *k8s.Clientset, objs []*unstructured.Unstructured) {
	t.Helper()
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(cs.Discovery()))
	for _, o := range objs {
		gvk := o.GroupVersionKind()
		mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatalf("%s: %v", gvk, err)
		}
		var ri dynamic.ResourceInterface = dyn.Resource(mapping.Resource)
		if mapping.Scope.Name() == "namespace" {
			ri = dyn.Resource(mapping.Resource).Namespace(o.GetNamespace())
		}
		got, err := ri.Apply(ctx, o.GetName(), o, metav1.ApplyOptions{FieldManager: "sandbox-mcp-test", Force: true})
		if err != nil {
			t.Fatalf("apply %s %s: %v", o.GetKind(), o.GetName(), err)
		}
		managed := false
		for _, f := range got.GetManagedFields() {
			if f.Manager == "sandbox-mcp-test" && f.Operation == metav1.ManagedFieldsOperationApply {
				managed = true
			}
		}
		if !managed {
			t.Errorf("apply %s %s: no Apply entry of sandbox-mcp-test in managedFields", o.GetKind(), o.GetName())
		}
	}
}

// serverImage is the server image the cluster can run ("" when none can be
// had here, with why), built with build-image.sh --save and loaded.
func serverImage(t *testing.T, ctx context.Context, root string) (image, note string) {
	t.Helper()
	if img := os.Getenv("SANDBOX_MCP_K8S_SERVER_IMAGE"); img != "" {
		return img, "SANDBOX_MCP_K8S_SERVER_IMAGE=" + img
	}
	var loader []string
	if l := strings.Fields(os.Getenv("SANDBOX_MCP_K8S_LOAD")); len(l) > 0 {
		loader = l
	}
	dctx, dcancel := context.WithTimeout(ctx, 15*time.Second)
	derr := exec.CommandContext(dctx, "docker", "version").Run()
	dcancel()
	switch {
	case derr != nil:
		if os.Getenv("SANDBOX_MCP_REQUIRE_DOCKER") == "1" {
			t.Fatalf("build the server image: no docker engine answers: %v", derr)
		}
		return "", "SKIPPED build: no docker engine answers (" + derr.Error() + ")"
	case loader == nil:
		msg := "no way to load an image into the cluster: set SANDBOX_MCP_K8S_LOAD (e.g. \"kind load image-archive\") or SANDBOX_MCP_K8S_SERVER_IMAGE"
		if os.Getenv("SANDBOX_MCP_REQUIRE_K8S") == "1" {
			t.Fatal(msg)
		}
		return "", "SKIPPED build: " + msg
	}
	const tag = "sandbox-mcp:deploy-test"
	tarball := filepath.Join(t.TempDir(), "sandbox-mcp.tar")
	bctx, bcancel := context.WithTimeout(ctx, 3*time.Minute)
	defer bcancel()
	start := time.Now()
	out, err := exec.CommandContext(bctx, "bash", filepath.Join(root, "deploy", "kubernetes", "build-image.sh"), "--save", tarball, tag).CombinedOutput()
	if err != nil {
		t.Fatalf("build-image.sh: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		exec.CommandContext(c, "docker", "rmi", "-f", tag).Run()
	})
	built := time.Since(start)
	start = time.Now()
	if out, err := exec.CommandContext(bctx, loader[0], append(loader[1:], tarball)...).CombinedOutput(); err != nil {
		t.Fatalf("load %s into the cluster (%s): %v\n%s", tarball, strings.Join(loader, " "), err, out)
	}
	fi, _ := os.Stat(tarball)
	var size int64
	if fi != nil {
		size = fi.Size()
	}
	return "docker.io/library/" + tag, fmt.Sprintf("built %s with build-image.sh --save in %v (%.1f MB tarball), loaded with %s in %v",
		tag, built.Round(time.Millisecond), float64(size)/(1<<20), filepath.Base(loader[0]), time.Since(start).Round(time.Millisecond))
}

// relayHost is the name the Pods reach the API server by through the
// relay: one of the names in the API server's serving certificate.
const relayHost = "kubernetes.default.svc"

// relay forwards TCP from the node's address to an API server that
// listens on loopback only.
type relay struct {
	ip   string
	port int
	ln   net.Listener
	wg   sync.WaitGroup
	mu   sync.Mutex
	conn map[net.Conn]bool
}

// apiRelay returns nil when Pods can reach the API server the usual way
// (in-cluster config through the kubernetes Service). When the API server
// is on loopback (deploy/kubernetes/dev/cluster.sh), it starts a relay on the node's
// InternalIP, which must then be an address of this machine.
func apiRelay(t *testing.T, ctx context.Context, cs *k8s.Clientset, rc *rest.Config) *relay {
	t.Helper()
	u, err := url.Parse(rc.Host)
	if err != nil {
		t.Fatal(err)
	}
	host := u.Hostname()
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil
	}
	target := u.Host
	if u.Port() == "" {
		target = net.JoinHostPort(host, "443")
	}
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var tried []string
	for _, n := range nodes.Items {
		for _, a := range n.Status.Addresses {
			if a.Type != corev1.NodeInternalIP {
				continue
			}
			ln, err := net.Listen("tcp", net.JoinHostPort(a.Address, "0"))
			if err != nil {
				tried = append(tried, a.Address+": "+err.Error())
				continue
			}
			r := &relay{ip: a.Address, port: ln.Addr().(*net.TCPAddr).Port, ln: ln, conn: map[net.Conn]bool{}}
			r.wg.Go(func() { r.serve(target) })
			t.Cleanup(r.close)
			t.Logf("DEPLOY the API server (%s) listens on loopback: Pods reach it through a relay on the node's address %s:%d as %s",
				target, r.ip, r.port, relayHost)
			return r
		}
	}
	t.Fatalf("the API server %s listens on loopback, and no node InternalIP is an address of this machine (%v): Pods could not reach it", target, tried)
	return nil
}

func (r *relay) serve(target string) {
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		r.wg.Go(func() {
			defer c.Close()
			up, err := net.DialTimeout("tcp", target, 5*time.Second)
			if err != nil {
				return
			}
			defer up.Close()
			if !r.track(c, up) {
				return
			}
			defer r.untrack(c, up)
			done := make(chan struct{}, 2)
			go func() { io.Copy(up, c); up.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
			go func() { io.Copy(c, up); c.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
			<-done
			<-done
		})
	}
}

func (r *relay) track(cs ...net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.conn == nil {
		return false
	}
	for _, c := range cs {
		r.conn[c] = true
	}
	return true
}

func (r *relay) untrack(cs ...net.Conn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range cs {
		delete(r.conn, c)
	}
}

func (r *relay) close() {
	r.ln.Close()
	r.mu.Lock()
	for c := range r.conn {
		c.Close()
	}
	r.conn = nil
	r.mu.Unlock()
	r.wg.Wait()
}

// waitDeploymentReady waits (bounded) until the Deployment has all its
// replicas Ready, and returns their Pods. On timeout it says why.
func waitDeploymentReady(t *testing.T, ctx context.Context, cs *k8s.Clientset, ns, name string) []corev1.Pod {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var pods []corev1.Pod
	var last string
	for {
		dep, err := cs.AppsV1().Deployments(ns).Get(wctx, name, metav1.GetOptions{})
		if err == nil {
			sel, _ := metav1.LabelSelectorAsSelector(dep.Spec.Selector)
			list, lerr := cs.CoreV1().Pods(ns).List(wctx, metav1.ListOptions{LabelSelector: sel.String()})
			err = lerr
			if lerr == nil {
				pods = pods[:0]
				for _, p := range list.Items {
					if p.DeletionTimestamp == nil && podReady(&p) {
						pods = append(pods, p)
					}
				}
				want := 1
				if dep.Spec.Replicas != nil {
					want = int(*dep.Spec.Replicas)
				}
				last = fmt.Sprintf("%d of %d Pods Ready, Deployment readyReplicas %d", len(pods), want, dep.Status.ReadyReplicas)
				if len(pods) == want && int(dep.Status.ReadyReplicas) == want {
					return pods
				}
			}
		}
		if err != nil {
			last = err.Error()
		}
		select {
		case <-wctx.Done():
			t.Fatalf("Deployment %s/%s not Ready in time: %s\n%s", ns, name, last, diagnose(cs, ns))
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// diagnose says what the namespace's Pods, their logs and events show.
func diagnose(cs *k8s.Clientset, ns string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	var b strings.Builder
	if list, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, p := range list.Items {
			fmt.Fprintf(&b, "pod %s: phase %s", p.Name, p.Status.Phase)
			for _, c := range p.Status.ContainerStatuses {
				fmt.Fprintf(&b, " ready=%v restarts=%d", c.Ready, c.RestartCount)
				if w := c.State.Waiting; w != nil {
					fmt.Fprintf(&b, " waiting %s: %s", w.Reason, w.Message)
				}
				if term := c.LastTerminationState.Terminated; term != nil {
					fmt.Fprintf(&b, " last exit %d %s", term.ExitCode, term.Reason)
				}
			}
			b.WriteString("\n")
			if raw, err := cs.CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{TailLines: ptr(int64(15))}).DoRaw(ctx); err == nil {
				fmt.Fprintf(&b, "  log: %s\n", strings.ReplaceAll(strings.TrimSpace(string(raw)), "\n", "\n  log: "))
			}
			if raw, err := cs.CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{TailLines: ptr(int64(15)), Previous: true}).DoRaw(ctx); err == nil {
				fmt.Fprintf(&b, "  previous log: %s\n", strings.ReplaceAll(strings.TrimSpace(string(raw)), "\n", "\n  previous log: "))
			}
		}
	}
	if ev, err := cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, e := range ev.Items {
			if e.Type != corev1.EventTypeNormal {
				fmt.Fprintf(&b, "event %s %s: %s\n", e.InvolvedObject.Name, e.Reason, e.Message)
			}
		}
	}
	return b.String()
}

// bashThroughReplica makes one MCP bash call through one server Pod,
// reached by port-forward (the pod proxy cannot carry the bearer token:
// the API server drops the Authorization header it authenticated).
func bashThroughReplica(t *testing.T, ctx context.Context, rc *rest.Config, ns, pod, port, token, command string) string {
	t.Helper()
	rt, upgrader, err := spdy.RoundTripperFor(rc)
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(strings.TrimSuffix(rc.Host, "/") + fmt.Sprintf("/api/v1/namespaces/%s/pods/%s/portforward", ns, pod))
	if err != nil {
		t.Fatal(err)
	}
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: rt}, http.MethodPost, u)
	fctx, stop := context.WithCancel(ctx)
	ready := make(chan struct{})
	var errOut testkit.Buffer
	fw, err := portforward.NewOnAddressesWithContext(fctx, dialer, []string{"127.0.0.1"}, []string{"0:" + port}, ready, io.Discard, &errOut)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- fw.ForwardPorts() }()
	defer func() { stop(); <-done }()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("port-forward to %s: %v", pod, err)
	case <-time.After(30 * time.Second):
		t.Fatalf("port-forward to %s: not ready in 30 s", pod)
	}
	ports, err := fw.GetPorts()
	if err != nil || len(ports) != 1 {
		t.Fatalf("port-forward ports: %v %v", ports, err)
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	endpoint := fmt.Sprintf("http://127.0.0.1:%d/mcp", ports[0].Local)
	hc := &http.Client{Transport: headerRT{"Authorization": "Bearer " + token, "X-Thread-ID": "deploy-test"}}
	session, err := mcp.NewClient(&mcp.Implementation{Name: "deploy-test", Version: "1"}, nil).Connect(cctx,
		&mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: hc, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatalf("MCP connect through port-forward to %s: %v", pod, err)
	}
	defer session.Close()
	res, err := session.CallTool(cctx, &mcp.CallToolParams{Name: "bash", Arguments: map[string]any{"command": command}})
	if err != nil {
		t.Fatalf("bash through %s: %v", pod, err)
	}
	if len(res.Content) != 1 {
		t.Fatalf("bash through %s: %d contents", pod, len(res.Content))
	}
	text, _ := res.Content[0].(*mcp.TextContent)
	if text == nil {
		t.Fatalf("bash through %s: %T", pod, res.Content[0])
	}
	return text.Text
}

type headerRT map[string]string

func (h headerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h {
		r.Header.Set(k, v)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// serverNeeds is every call the provider makes (kubernetes.go, pods.go,
// exec.go), by resource: the Role must grant exactly these.
var serverNeeds = map[authzResource][]string{
	{"", "pods", ""}: {"create", "delete", "get", "list", "patch"},
	// A WebSocket exec is a GET, and create is checked on top of it
	// (AuthorizePodWebsocketUpgradeCreatePermission); SPDY is a POST.
	{"", "pods", "exec"}: {"create", "get"},
	// Claims: a thread's made and deleted (Discard), a warm Pod's made
	// and taken for a thread (a patch); records: pvc (records.go).
	{"", "persistentvolumeclaims", ""}:           {"create", "delete", "get", "patch"},
	{"coordination.k8s.io", "leases", ""}:        {"create", "delete", "get"},
	{"networking.k8s.io", "networkpolicies", ""}: {"create"},
	// The agent-sandbox warm pool (agentsandbox.go).
	{"extensions.agents.x-k8s.io", "sandboxtemplates", ""}: {"create", "delete", "get", "list", "patch"},
	{"extensions.agents.x-k8s.io", "sandboxwarmpools", ""}: {"create", "delete", "get", "list", "patch"},
	{"extensions.agents.x-k8s.io", "sandboxclaims", ""}:    {"create", "delete", "get", "list", "patch", "watch"},
}

type authzResource struct{ group, resource, sub string }

func (r authzResource) String() string {
	s := r.resource
	if r.sub != "" {
		s += "/" + r.sub
	}
	if r.group != "" {
		s += "." + r.group
	}
	return s
}

var allVerbs = []string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection", "bind", "escalate", "impersonate"}

// checkRole asks the authorizer, as the ServiceAccount would be seen, about
// every verb on the resources the server uses and on the ones it must not
// touch: in its namespace exactly serverNeeds is allowed; in other
// namespaces and cluster-wide nothing. It returns how many reviews it made.
func checkRole(t *testing.T, ctx context.Context, rc *rest.Config, ns, sa string) int {
	t.Helper()
	rc = rest.CopyConfig(rc)
	rc.QPS, rc.Burst = 1000, 1000
	cs, err := k8s.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	type review struct {
		ns    string
		res   authzResource
		verb  string
		want  bool
		got   bool
		err   error
		cause string
	}
	var reviews []*review
	inNS := []authzResource{
		{"", "pods", ""}, {"", "pods", "exec"}, {"", "pods", "attach"}, {"", "pods", "portforward"}, {"", "pods", "log"},
		{"", "pods", "ephemeralcontainers"}, {"", "pods", "status"}, {"", "pods", "eviction"}, {"", "pods", "proxy"},
		{"", "persistentvolumeclaims", ""}, {"", "secrets", ""}, {"", "configmaps", ""}, {"", "serviceaccounts", ""},
		{"", "serviceaccounts", "token"}, {"", "services", ""}, {"", "services", "proxy"}, {"", "endpoints", ""}, {"", "events", ""},
		{"", "resourcequotas", ""}, {"", "replicationcontrollers", ""},
		{"networking.k8s.io", "networkpolicies", ""}, {"coordination.k8s.io", "leases", ""},
		{"rbac.authorization.k8s.io", "roles", ""}, {"rbac.authorization.k8s.io", "rolebindings", ""},
		{"apps", "deployments", ""}, {"apps", "statefulsets", ""}, {"apps", "daemonsets", ""},
		{"batch", "jobs", ""}, {"discovery.k8s.io", "endpointslices", ""}, {"policy", "poddisruptionbudgets", ""},
		{"authorization.k8s.io", "localsubjectaccessreviews", ""},
		{"extensions.agents.x-k8s.io", "sandboxtemplates", ""}, {"extensions.agents.x-k8s.io", "sandboxwarmpools", ""},
		{"extensions.agents.x-k8s.io", "sandboxclaims", ""}, {"agents.x-k8s.io", "sandboxes", ""},
	}
	for res := range serverNeeds {
		if !slices.Contains(inNS, res) {
			t.Fatalf("checkRole: %s is not in the list checked", res)
		}
	}
	for _, res := range inNS {
		for _, verb := range allVerbs {
			reviews = append(reviews, &review{ns: ns, res: res, verb: verb, want: slices.Contains(serverNeeds[res], verb)})
			// The same in another namespace, and across all of them.
			for _, other := range []string{"default", "kube-system", ns + "-other", ""} {
				reviews = append(reviews, &review{ns: other, res: res, verb: verb})
			}
		}
	}
	clusterScoped := []authzResource{
		{"", "nodes", ""}, {"", "nodes", "proxy"}, {"", "namespaces", ""}, {"", "persistentvolumes", ""},
		{"rbac.authorization.k8s.io", "clusterroles", ""}, {"rbac.authorization.k8s.io", "clusterrolebindings", ""},
		{"storage.k8s.io", "storageclasses", ""}, {"certificates.k8s.io", "certificatesigningrequests", ""},
		{"apiextensions.k8s.io", "customresourcedefinitions", ""}, {"admissionregistration.k8s.io", "validatingwebhookconfigurations", ""},
		{"admissionregistration.k8s.io", "mutatingwebhookconfigurations", ""}, {"node.k8s.io", "runtimeclasses", ""},
		{"", "users", ""}, {"", "groups", ""}, {"authentication.k8s.io", "tokenreviews", ""},
	}
	for _, res := range clusterScoped {
		for _, verb := range allVerbs {
			reviews = append(reviews, &review{res: res, verb: verb})
		}
	}
	user := "system:serviceaccount:" + ns + ":" + sa
	groups := []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}
	work := make(chan *review)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for r := range work {
				sar := &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
					User: user, Groups: groups,
					ResourceAttributes: &authzv1.ResourceAttributes{Namespace: r.ns, Verb: r.verb, Group: r.res.group, Resource: r.res.resource, Subresource: r.res.sub},
				}}
				got, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
				if err != nil {
					r.err = err
					continue
				}
				r.got = got.Status.Allowed
				r.cause = got.Status.Reason + got.Status.EvaluationError
			}
		})
	}
	for _, r := range reviews {
		work <- r
	}
	close(work)
	wg.Wait()
	allowed, nAllowed := map[string][]string{}, 0
	for _, r := range reviews {
		where := r.ns
		if where == "" {
			where = "cluster-wide"
		}
		switch {
		case r.err != nil:
			t.Fatalf("SubjectAccessReview %s %s in %s: %v", r.verb, r.res, where, r.err)
		case r.got && !r.want:
			t.Errorf("not least privilege: %s may %s %s in %s (%s)", user, r.verb, r.res, where, r.cause)
		case !r.got && r.want:
			t.Errorf("too little: %s may not %s %s in %s, and the provider does that", user, r.verb, r.res, where)
		}
		if r.got {
			nAllowed++
			allowed[r.res.String()] = append(allowed[r.res.String()], r.verb)
		}
	}
	var summary []string
	for res, verbs := range allowed {
		summary = append(summary, res+": "+strings.Join(verbs, ","))
	}
	sort.Strings(summary)
	t.Logf("DEPLOY allowed for %s (in %s only): %s; denied: the other %d of %d verb/resource/namespace combinations (secrets, configmaps, other namespaces, cluster-wide among them)",
		user, ns, strings.Join(summary, "; "), len(reviews)-nAllowed, len(reviews))
	return len(reviews)
}
