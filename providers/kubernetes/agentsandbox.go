package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/providers/internal/rename"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
)

// The agent-sandbox warm pool (kubernetes.warm with kubernetes.warm_pool
// agent-sandbox, or auto where the cluster serves the CRDs of
// kubernetes-sigs/agent-sandbox's extensions): the members are kept by
// agent-sandbox's controller, not by the replicas, and a thread's first
// call claims one through a SandboxClaim. The claim's directory, rename
// and record are the pool's own (warm.go); only where the member comes
// from differs (agentPool, a warmSource).
//
//   - The replicas of one set of settings share a SandboxTemplate (the warm
//     Pod spec, podFor's) and a SandboxWarmPool of kubernetes.warm members,
//     both named <pod_prefix>-warm-<warmSpec>, made by the first replica
//     that finds them missing. Members are named by the controller,
//     <pool>-<5 random>, so a member cannot mount a directory named in
//     advance: its volume is <host_path>/pool, and each mount of it a
//     subPathExpr under the Pod's own name (the downward API), which the
//     kubelet makes (with the pool directory's mode, 0777, so that the
//     installer, as the Pods' user, makes user-data's directories in it).
//   - A first call creates the SandboxClaim <pod_prefix>-warm-<thread hash>.
//     Create is atomic: of two replicas claiming for one thread, one gets
//     AlreadyExists and waits for the other's directory (errClaiming). The
//     controller adopts a ready member (or, the pool drained, makes a fresh
//     Sandbox named as the claim: a Pod started as without a pool, then
//     claimed the same way) and says which on the claim: its
//     agents.x-k8s.io/sandbox-name annotation as it picks a member, its
//     status for a fresh one. The replica watches the claim for either.
//   - The replica then takes the member's Pod off agent-sandbox: one patch,
//     with the resourceVersion it read as precondition, that names the
//     thread (as the pool's own claims do) and removes the Pod's owner (the
//     Sandbox) and the Sandbox controller's tracking label, so that nothing
//     re-adopts it; then, once the claim's status says the adoption is
//     complete, deletes the claim (in the background), whose Sandbox goes
//     with it. The
//     thread's Pod is from then on a Pod of ours like any other: idled out,
//     capped, discarded, deleted by its name as recorded, and never made
//     again by the controller (the thread's next Pod is made by this server
//     as for a claimed warm Pod of its own, mounting the thread's
//     directory). The member's directory, with its record written and made
//     the Pods' user's, is renamed to the thread's.
//   - Every replica lists the members of its settings and dials the
//     supervisors of the ready ones, so that a claim's first call finds a
//     channel open; refreshes the warm-alive annotation of its pool; and
//     removes pools and templates of this prefix no server keeps any more
//     (their members go with them), claims left by a replica that died
//     mid-claim, and member directories whose Pod is no more.
//
// A member serves one thread, once: it leaves the pool with its claim and
// never returns to it.
// mayUseAgentPools says whether this server may list SandboxWarmPools in
// ns: false only when the API says it is forbidden (a Role from before
// agent-sandbox); any other failure is the pool's passes' to report.
func mayUseAgentPools(ctx context.Context, dyn dynamic.Interface, ns string) bool {
	_, err := dyn.Resource(warmPoolGVR).Namespace(ns).List(ctx, metav1.ListOptions{Limit: 1})
	return !apierrors.IsForbidden(err)
}

var (
	templateGVR = schema.GroupVersionResource{Group: "extensions.agents.x-k8s.io", Version: "v1beta1", Resource: "sandboxtemplates"}
	warmPoolGVR = schema.GroupVersionResource{Group: "extensions.agents.x-k8s.io", Version: "v1beta1", Resource: "sandboxwarmpools"}
	claimGVR    = schema.GroupVersionResource{Group: "extensions.agents.x-k8s.io", Version: "v1beta1", Resource: "sandboxclaims"}
)

const (
	labelWarmPool      = "sandbox-mcp/warm-pool"             // an agent-sandbox member: the warmSpec of its settings
	labelSandboxHash   = "agents.x-k8s.io/sandbox-name-hash" // the Sandbox controller's tracking label on its Pods
	annAssignedSandbox = "agents.x-k8s.io/sandbox-name"      // on a claim: the member the controller adopts for it
	podNameEnv         = "SANDBOX_MCP_POD"                   // a member's own name (downward API), its directory's
	poolRootMode       = os.FileMode(0o777)                  // not sticky: a server not root renames the kubelet's directories too

	// Backends of kubernetes.warm_pool.
	WarmPoolAuto         = "auto"
	WarmPoolPods         = "pods"
	WarmPoolAgentSandbox = "agent-sandbox"
)

// agentSandboxInstalled says whether the cluster serves the agent-sandbox
// extensions' SandboxTemplate, SandboxWarmPool and SandboxClaim, in the
// version this server speaks (v1beta1, their stored version since v0.5).
func agentSandboxInstalled(ctx context.Context, d discovery.DiscoveryInterface) bool {
	list, err := d.ServerResourcesForGroupVersion(claimGVR.GroupVersion().String())
	if err != nil || list == nil {
		return false
	}
	found := 0
	for _, r := range list.APIResources {
		switch r.Name {
		case templateGVR.Resource, warmPoolGVR.Resource, claimGVR.Resource:
			found++
		}
	}
	return found == 3
}

// agentPool is a pool's warmSource on agent-sandbox.
type agentPool struct {
	*pool
	dyn  dynamic.Interface
	name string // the template's and the SandboxWarmPool's
}

func newAgentPool(w *pool, dyn dynamic.Interface) *agentPool {
	return &agentPool{pool: w, dyn: dyn, name: w.p.cfg.PodPrefix + "-warm-" + w.spec}
}

// poolRoot is the node directory of the agent-sandbox members' directories.
func (p *Provider) poolRoot() string { return filepath.Join(p.cfg.Storage.HostPath, "pool") }

func (a *agentPool) dir(name string) string { return filepath.Join(a.p.poolRoot(), name) }

// claimName is thread key's SandboxClaim: <pod_prefix>-warm-<thread hash>.
func (a *agentPool) claimName(key string) string {
	return a.p.cfg.PodPrefix + "-warm-" + threadHash(key)
}

// memberSpec is the members' Pod spec: a warm Pod's (podFor), its
// directory found by its own name. The user-data volume is the pool
// directory, and each mount of it a subPathExpr under $(SANDBOX_MCP_POD),
// which both containers get from the downward API (the supervisor keeps it
// from commands: --keep-env).
func (p *Provider) memberSpec() corev1.PodSpec {
	spec := p.podFor("x", "", filepath.Join(p.poolRoot(), "x", "user-data")).Spec
	for i := range spec.Volumes {
		if v := &spec.Volumes[i]; v.Name == "user-data" && v.HostPath != nil {
			v.HostPath.Path = p.poolRoot()
		}
	}
	env := corev1.EnvVar{Name: podNameEnv, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}
	for i := range spec.Containers {
		c := &spec.Containers[i]
		for j := range c.VolumeMounts {
			if m := &c.VolumeMounts[j]; m.Name == "user-data" {
				m.SubPathExpr = path.Join("$("+podNameEnv+")", m.SubPath)
				m.SubPath = ""
			}
		}
		c.Env = append(c.Env, env)
	}
	return spec
}

// objects are the template and the SandboxWarmPool of these settings.
func (a *agentPool) objects() (template, warmPool *unstructured.Unstructured, err error) {
	podSpec := a.p.memberSpec()
	spec, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&podSpec)
	if err != nil {
		return nil, nil, err
	}
	podLabels := map[string]any{labelWarmPool: a.spec}
	for k, v := range a.p.labels() {
		podLabels[k] = v
	}
	meta := func() map[string]any {
		labels := map[string]any{labelWarmPool: a.spec}
		for k, v := range a.p.labels() {
			labels[k] = v
		}
		return map[string]any{"name": a.name, "namespace": a.p.cfg.Namespace, "labels": labels,
			"annotations": map[string]any{annWarmAlive: time.Now().UTC().Format(time.RFC3339Nano)}}
	}
	template = &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": templateGVR.GroupVersion().String(), "kind": "SandboxTemplate", "metadata": meta(),
		"spec": map[string]any{
			"podTemplate": map[string]any{
				"metadata": map[string]any{"labels": podLabels, "annotations": map[string]any{annDefaultContainer: containerName}},
				"spec":     spec,
			},
			// The server keeps its own deny-all policy (network_policy),
			// and the Pods' DNS as it made them.
			"networkPolicyManagement": "Unmanaged",
		},
	}}
	warmPool = &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": warmPoolGVR.GroupVersion().String(), "kind": "SandboxWarmPool", "metadata": meta(),
		"spec": map[string]any{"replicas": int64(a.size), "sandboxTemplateRef": map[string]any{"name": a.name}},
	}}
	return template, warmPool, nil
}

// ensure makes the template and the SandboxWarmPool of these settings
// unless they exist, and says that a server keeps them (warm-alive).
func (a *agentPool) ensure(ctx context.Context) error {
	template, warmPool, err := a.objects()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(a.p.poolRoot(), 0o755); err != nil {
		return fmt.Errorf("kubernetes.storage.host_path: %w", err)
	}
	if err := os.Chmod(a.p.poolRoot(), poolRootMode); err != nil {
		return fmt.Errorf("kubernetes.storage.host_path: %w", err)
	}
	for _, o := range []struct {
		gvr schema.GroupVersionResource
		obj *unstructured.Unstructured
	}{{templateGVR, template}, {warmPoolGVR, warmPool}} {
		res := a.dyn.Resource(o.gvr).Namespace(a.p.cfg.Namespace)
		got, err := res.Get(ctx, a.name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = res.Create(ctx, o.obj, metav1.CreateOptions{})
			if err == nil {
				a.p.log.Info("kubernetes provider: agent-sandbox "+o.obj.GetKind()+" created", "name", a.name)
			}
			if err == nil || apierrors.IsAlreadyExists(err) {
				continue
			}
		}
		if err != nil {
			return apiError(err)
		}
		if got.GetLabels()[labelWarmPool] != a.spec {
			return fmt.Errorf("kubernetes provider: %s %s/%s is not this server's (label %s); left alone", o.obj.GetKind(), a.p.cfg.Namespace, a.name, labelWarmPool)
		}
		replicas, _, _ := unstructured.NestedInt64(got.Object, "spec", "replicas")
		stale := time.Since(aliveOf(got)) >= warmAliveEvery
		if !stale && (o.gvr != warmPoolGVR || replicas == int64(a.size)) {
			continue
		}
		patch := map[string]any{"metadata": map[string]any{"annotations": map[string]any{annWarmAlive: time.Now().UTC().Format(time.RFC3339Nano)}}}
		if o.gvr == warmPoolGVR {
			patch["spec"] = map[string]any{"replicas": int64(a.size)}
		}
		b, _ := json.Marshal(patch)
		if _, err := res.Patch(ctx, a.name, types.MergePatchType, b, metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return apiError(err)
		}
	}
	return nil
}

// aliveOf is when a server last said it keeps agent-sandbox object o.
func aliveOf(o *unstructured.Unstructured) time.Time {
	t, err := time.Parse(time.RFC3339Nano, o.GetAnnotations()[annWarmAlive])
	if err != nil || t.Before(o.GetCreationTimestamp().Time) {
		return o.GetCreationTimestamp().Time
	}
	return t
}

// ownedBySandbox reports whether pod's controller is an agent-sandbox
// Sandbox: a member still the controller's.
func ownedBySandbox(pod *corev1.Pod) bool {
	ref := metav1.GetControllerOf(pod)
	return ref != nil && ref.Kind == "Sandbox" && ref.Name == pod.Name
}

// pass makes sure the pool exists, lists its members, dials the ready ones
// and, every 30 s, sweeps.
func (a *agentPool) pass() (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := a.ensure(ctx); err != nil {
		return 0, err
	}
	list, err := a.p.cs.CoreV1().Pods(a.p.cfg.Namespace).List(ctx, metav1.ListOptions{LabelSelector: a.p.selector() + "," + labelWarmPool})
	if err != nil {
		return 0, apiError(err)
	}
	listed := map[string]bool{}
	ready := map[string]warmPod{}
	starting := false
	var broken error
	for i := range list.Items {
		pod := &list.Items[i]
		listed[pod.Name] = true
		if pod.Labels[labelWarmPool] != a.spec || pod.DeletionTimestamp != nil || pod.Annotations[annThread] != "" || !ownedBySandbox(pod) {
			continue
		}
		switch {
		case running(pod):
			ready[pod.Name] = warmPod{uid: pod.UID, rv: pod.ResourceVersion}
		case initFailed(pod) != "" || stuckWaiting(pod) != "" || sandboxEnded(pod):
			// The controller replaces it; say why, once a pass.
			broken = fmt.Errorf("an agent-sandbox warm Pod cannot start (image %s, kubernetes.supervisor_image %s): %s %s %s",
				a.p.cfg.Image, a.p.cfg.SupervisorImage, oneLine(initFailed(pod)), oneLine(stuckWaiting(pod)), pod.Status.Phase)
		default:
			starting = true
		}
	}
	full := len(ready) >= a.size // read before ready is the pool's
	sweep, stopped := a.track(ready, func(string) bool { return true }, func(string) bool { return true })
	if stopped {
		return 0, nil
	}
	if sweep {
		a.sweep(ctx, listed)
	}
	if broken != nil {
		return 0, broken
	}
	if starting || !full {
		return 200 * time.Millisecond, nil
	}
	return warmAliveEvery, nil
}

// sweep removes the claims of this prefix older than two minutes (a
// replica's claim lives for as long as it takes its Pod: one that died
// mid-claim left it), the pools no server keeps, and the member
// directories whose Pod is no more.
func (a *agentPool) sweep(ctx context.Context, listed map[string]bool) {
	claims, err := a.dyn.Resource(claimGVR).Namespace(a.p.cfg.Namespace).List(ctx, metav1.ListOptions{LabelSelector: a.p.selector()})
	if err == nil {
		for i := range claims.Items {
			c := &claims.Items[i]
			if c.GetDeletionTimestamp() == nil && time.Since(c.GetCreationTimestamp().Time) > 2*time.Minute {
				a.deleteClaim(ctx, c.GetName(), c.GetUID())
			}
		}
	}
	a.p.removeStalePools(ctx, a.dyn, a.name)
	ents, _ := os.ReadDir(a.p.poolRoot())
	for _, e := range ents {
		if !e.IsDir() || !a.p.isWarmName(e.Name()) || listed[e.Name()] {
			continue
		}
		if info, err := e.Info(); err == nil && time.Since(info.ModTime()) > 2*time.Minute {
			os.RemoveAll(a.dir(e.Name()))
		}
	}
}

// removeStalePools deletes the SandboxWarmPools and SandboxTemplates of
// this prefix, but keep's, that no server keeps any more (warm-alive
// stale): their members go with them.
func (p *Provider) removeStalePools(ctx context.Context, dyn dynamic.Interface, keep string) {
	for _, gvr := range []schema.GroupVersionResource{warmPoolGVR, templateGVR} {
		res := dyn.Resource(gvr).Namespace(p.cfg.Namespace)
		list, err := res.List(ctx, metav1.ListOptions{LabelSelector: p.selector() + "," + labelWarmPool})
		if err != nil {
			continue
		}
		for i := range list.Items {
			o := &list.Items[i]
			if o.GetName() == keep || o.GetDeletionTimestamp() != nil || time.Since(aliveOf(o)) < warmStale {
				continue
			}
			uid := o.GetUID()
			if err := res.Delete(ctx, o.GetName(), metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}); err == nil {
				p.log.Info("kubernetes provider: agent-sandbox "+o.GetKind()+" deleted (no server of its settings keeps it)", "name", o.GetName())
			}
		}
	}
}

// deleteClaim deletes a SandboxClaim, and with it (background) what it
// still owns.
func (a *agentPool) deleteClaim(ctx context.Context, name string, uid types.UID) {
	bg := metav1.DeletePropagationBackground
	opts := metav1.DeleteOptions{PropagationPolicy: &bg}
	if uid != "" {
		opts.Preconditions = &metav1.Preconditions{UID: &uid}
	}
	err := a.dyn.Resource(claimGVR).Namespace(a.p.cfg.Namespace).Delete(ctx, name, opts)
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		a.p.log.Warn("kubernetes provider: delete SandboxClaim", "claim", name, "err", err)
	}
}

// take claims a member for thread key through a SandboxClaim, takes its
// Pod off agent-sandbox and makes its directory ready to be the thread's.
func (a *agentPool) take(ctx context.Context, key string) (string, types.UID, error) {
	claims := a.dyn.Resource(claimGVR).Namespace(a.p.cfg.Namespace)
	name := a.claimName(key)
	labels := map[string]any{labelThread: threadHash(key)}
	for k, v := range a.p.labels() {
		labels[k] = v
	}
	claim := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": claimGVR.GroupVersion().String(), "kind": "SandboxClaim",
		"metadata": map[string]any{"name": name, "namespace": a.p.cfg.Namespace, "labels": labels, "annotations": map[string]any{annThread: key}},
		"spec":     map[string]any{"warmPoolRef": map[string]any{"name": a.name}},
	}}
	t0 := time.Now()
	created, err := claims.Create(ctx, claim, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		got, err := claims.Get(ctx, name, metav1.GetOptions{})
		switch {
		case err != nil || got.GetAnnotations()[annThread] != key:
			return "", "", fmt.Errorf("SandboxClaim %s is another thread's or another program's", name)
		case time.Since(got.GetCreationTimestamp().Time) > time.Minute:
			// A claim lives as long as its Pod takes to be taken: this
			// one a replica that died mid-claim left. It goes; this call
			// makes the thread's Pod as without a pool.
			a.deleteClaim(ctx, name, got.GetUID())
			return "", "", fmt.Errorf("SandboxClaim %s was left by a replica that stopped mid-claim", name)
		}
		return "", "", errClaiming
	}
	if err != nil {
		return "", "", apiError(err)
	}
	t1 := time.Now()
	pod, err := a.adopted(ctx, created, key)
	t2 := time.Now()
	if err != nil {
		a.deleteClaim(context.WithoutCancel(ctx), name, created.GetUID())
		return "", "", err
	}
	// The Pod is ours now: the claim and its Sandbox go, once the
	// controller has finished the adoption.
	go a.release(name, created.GetUID())
	if err := a.ready(ctx, pod); err != nil {
		a.lost(ctx, pod.Name, pod.UID)
		return "", "", err
	}
	a.p.log.Debug("kubernetes provider: SandboxClaim's Pod taken", "pod", pod.Name, "thread", key,
		"create", t1.Sub(t0), "adopted", t2.Sub(t1), "ready", time.Since(t2))
	return pod.Name, pod.UID, nil
}

// release deletes claim once the controller says, in its status, which
// Sandbox it has (within 30 s): the adoption complete, the Sandbox goes
// with the claim. Deleted before, a controller mid-adoption could leave
// the member's Sandbox in the pool, Pod-less (it would replace it).
func (a *agentPool) release(claim string, uid types.UID) {
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	claims := a.dyn.Resource(claimGVR).Namespace(a.p.cfg.Namespace)
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		c, err := claims.Get(ctx, claim, metav1.GetOptions{})
		if err != nil {
			break
		}
		if name, _, _ := unstructured.NestedString(c.Object, "status", "sandbox", "name"); name != "" {
			break
		}
	}
	a.deleteClaim(ctx, claim, uid)
}

// adopted waits for claim's Sandbox — a member adopted (the claim's
// annotation names it, the moment the controller picks it) or a fresh one
// (its status names it) — then takes its Pod off agent-sandbox for thread
// key.
func (a *agentPool) adopted(ctx context.Context, claim *unstructured.Unstructured, key string) (*corev1.Pod, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	w, err := a.dyn.Resource(claimGVR).Namespace(a.p.cfg.Namespace).Watch(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", claim.GetName()).String(), ResourceVersion: claim.GetResourceVersion()})
	if err != nil {
		return nil, apiError(err)
	}
	sandbox := ""
	for sandbox == "" {
		select {
		case <-ctx.Done():
			w.Stop()
			return nil, errors.New("the SandboxClaim got no Sandbox within 30 s (is agent-sandbox's controller running, with --extensions?)")
		case ev, ok := <-w.ResultChan():
			if !ok {
				return nil, errors.New("the SandboxClaim's watch ended")
			}
			if ev.Type == watch.Deleted {
				w.Stop()
				return nil, errors.New("the SandboxClaim was deleted")
			}
			if u, ok := ev.Object.(*unstructured.Unstructured); ok {
				sandbox = u.GetAnnotations()[annAssignedSandbox]
				if sandbox == "" {
					sandbox, _, _ = unstructured.NestedString(u.Object, "status", "sandbox", "name")
				}
			}
		}
	}
	w.Stop()
	// A fresh Sandbox's Pod is made a moment after it.
	pods := a.p.cs.CoreV1().Pods(a.p.cfg.Namespace)
	for attempt := 0; ; attempt++ {
		pod, err := pods.Get(ctx, sandbox, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("the SandboxClaim's Pod %s was not made within 30 s", sandbox)
			case <-time.After(20 * time.Millisecond):
			}
			continue
		case err != nil:
			return nil, apiError(err)
		case pod.Labels[labelWarmPool] != a.spec || !ownedBySandbox(pod) || pod.Annotations[annThread] != "" || pod.DeletionTimestamp != nil:
			return nil, fmt.Errorf("the SandboxClaim's Pod %s is not an unclaimed member of this pool", sandbox)
		case !a.p.isWarmName(pod.Name):
			return nil, fmt.Errorf("the SandboxClaim's Pod %s is not named as a member of this pool", sandbox)
		}
		now := time.Now().UTC().Format(time.RFC3339Nano)
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
			"resourceVersion": pod.ResourceVersion,
			"ownerReferences": nil,
			"labels":          map[string]any{labelSandboxHash: nil, labelThread: threadHash(key)},
			"annotations":     map[string]any{annThread: key, annLastUsed: now, a.p.inUseKey(): now},
		}})
		got, err := pods.Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{})
		if err == nil {
			return got, nil
		}
		if !apierrors.IsConflict(err) || attempt > 5 {
			return nil, apiError(err)
		}
		// The controllers wrote it meanwhile (the adoption's labels): again.
	}
}

// ready waits, within kubernetes.start_timeout, until member pod runs
// (an adopted member does already), then writes its record beside
// user-data and, as root, makes its directory the Pods' user's, 0755, as
// a thread's (the kubelet made it, as root, with the pool directory's
// mode).
func (a *agentPool) ready(ctx context.Context, pod *corev1.Pod) error {
	if !running(pod) {
		ctx, cancel := context.WithTimeout(ctx, a.p.cfg.StartTimeout)
		defer cancel()
		if _, err := a.p.waitRunning(ctx, pod.Name, pod.UID, true); err != nil {
			return err
		}
	}
	dir := a.dir(pod.Name)
	if err := rename.Record(filepath.Join(dir, warmRecord), pod.Name, 0o644); err != nil {
		return fmt.Errorf("kubernetes.storage.host_path: %w", err)
	}
	if os.Geteuid() != 0 {
		return nil
	}
	if err := os.Lchown(dir, int(a.p.cfg.User), int(a.p.cfg.User)); err != nil {
		return err
	}
	return os.Chmod(dir, 0o755)
}

// lost deletes member pod (ours since take) and its directory.
func (a *agentPool) lost(ctx context.Context, pod string, uid types.UID) {
	a.p.deletePod(context.WithoutCancel(ctx), pod, uid)
	os.RemoveAll(a.dir(pod))
}

// close: the pool stays the other replicas'; no server keeping it, the
// next one of this prefix removes it (removeStalePools).
func (a *agentPool) close(context.Context) {}
