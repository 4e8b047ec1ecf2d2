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
//   - A first call takes the member its replica claimed ahead (below:
//     "The claim ahead"), when it holds one; else it creates the
//     SandboxClaim <pod_prefix>-warm-<thread hash>.
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
	labelClaimUID      = "agents.x-k8s.io/claim-uid"         // on a Pod: the claim that adopted its Sandbox
	labelAhead         = "sandbox-mcp/claimed-ahead"         // on a claim made ahead of a thread: the replica's id
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

	// Under the pool's mu: the member claimed ahead (nil: none yet, or
	// taken), whether a claim ahead is under way, and whether claims
	// ahead stopped (a Role that may not patch SandboxClaims).
	ahead    *held
	aheading bool
	noAhead  bool
}

// held is a member this replica claimed ahead: its SandboxClaim, adopted,
// and the member's Pod, still agent-sandbox's (and marked taking in the
// pool, so that its channel stays open for the claim to come).
type held struct {
	claim    string
	claimUID types.UID
	pod      string
	alive    time.Time // the claim's warm-alive, last written
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
	a.mu.Lock()
	h := a.ahead
	a.mu.Unlock()
	listed := map[string]bool{}
	ready := map[string]warmPod{}
	starting, heldUp := false, false
	var broken error
	for i := range list.Items {
		pod := &list.Items[i]
		listed[pod.Name] = true
		if h != nil && pod.Name == h.pod {
			heldUp = pod.DeletionTimestamp == nil && running(pod) && ownedBySandbox(pod) && pod.Annotations[annThread] == ""
			continue
		}
		if pod.Labels[labelWarmPool] != a.spec || pod.DeletionTimestamp != nil || pod.Annotations[annThread] != "" || !ownedBySandbox(pod) ||
			pod.Labels[labelClaimUID] != "" { // adopted: claimed ahead, or mid-claim
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
	members := len(ready)
	sweep, stopped := a.track(ready, func(string) bool { return true }, func(string) bool { return true })
	if stopped {
		return 0, nil
	}
	if h != nil && !heldUp {
		a.dropAhead(ctx, h, "its Pod does not run")
	}
	claiming := a.keepAhead(ctx, members)
	if sweep {
		a.sweep(ctx, listed)
	}
	if broken != nil {
		return 0, broken
	}
	if starting || !full || claiming { // a claim ahead takes a member: the controller makes another
		return 200 * time.Millisecond, nil
	}
	return warmAliveEvery, nil
}

// sweep removes the claims of this prefix older than two minutes (a
// replica's claim lives for as long as it takes its Pod: one that died
// mid-claim left it) and the claims ahead no replica keeps any more
// (warm-alive stale), the pools no server keeps, and the member
// directories whose Pod is no more.
func (a *agentPool) sweep(ctx context.Context, listed map[string]bool) {
	claims, err := a.dyn.Resource(claimGVR).Namespace(a.p.cfg.Namespace).List(ctx, metav1.ListOptions{LabelSelector: a.p.selector()})
	if err == nil {
		for i := range claims.Items {
			if c := &claims.Items[i]; leftClaim(c, time.Now()) {
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

// leftClaim says whether claim c of this prefix was left by a replica
// that stopped: a thread's claim older than two minutes (it lives for as
// long as it takes its Pod), a claim ahead whose warm-alive is stale.
func leftClaim(c *unstructured.Unstructured, now time.Time) bool {
	if c.GetDeletionTimestamp() != nil {
		return false
	}
	if c.GetLabels()[labelAhead] != "" {
		return now.Sub(aliveOf(c)) >= warmStale
	}
	return now.Sub(c.GetCreationTimestamp().Time) > 2*time.Minute
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

// take claims a member for thread key: the one this replica claimed
// ahead when it holds one, else one its own SandboxClaim gets. Either
// way it takes the member's Pod off agent-sandbox and makes its directory
// ready to be the thread's.
func (a *agentPool) take(ctx context.Context, key string) (string, types.UID, error) {
	if h := a.takeAhead(); h != nil {
		pod, err := a.takePod(ctx, h.pod, key)
		if err == nil {
			go a.release(h.claim, h.claimUID)
			a.refill() // the next one ahead
			return a.taken(ctx, pod, key, "ahead")
		}
		a.p.log.Debug("kubernetes provider: the member claimed ahead could not be taken", "pod", h.pod, "err", err)
		a.letGo(context.WithoutCancel(ctx), h)
	}
	claims := a.dyn.Resource(claimGVR).Namespace(a.p.cfg.Namespace)
	name := a.claimName(key)
	claim := a.newClaim(name, map[string]any{labelThread: threadHash(key)}, map[string]any{annThread: key})
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
	sandbox, err := a.assigned(ctx, created)
	var pod *corev1.Pod
	if err == nil {
		pod, err = a.takePod(ctx, sandbox, key)
	}
	if err != nil {
		a.deleteClaim(context.WithoutCancel(ctx), name, created.GetUID())
		return "", "", err
	}
	// The Pod is ours now: the claim and its Sandbox go, once the
	// controller has finished the adoption.
	go a.release(name, created.GetUID())
	return a.taken(ctx, pod, key, "claim")
}

// taken makes member pod, just taken for thread key, ready to be the
// thread's; it goes when it cannot be.
func (a *agentPool) taken(ctx context.Context, pod *corev1.Pod, key, how string) (string, types.UID, error) {
	if err := a.ready(ctx, pod); err != nil {
		a.lost(ctx, pod.Name, pod.UID)
		return "", "", err
	}
	a.p.log.Debug("kubernetes provider: agent-sandbox member taken", "pod", pod.Name, "thread", key, "from", how)
	return pod.Name, pod.UID, nil
}

// newClaim is a SandboxClaim of this pool's members, with the server's
// labels and labels'.
func (a *agentPool) newClaim(name string, labels, annotations map[string]any) *unstructured.Unstructured {
	for k, v := range a.p.labels() {
		labels[k] = v
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": claimGVR.GroupVersion().String(), "kind": "SandboxClaim",
		"metadata": map[string]any{"name": name, "namespace": a.p.cfg.Namespace, "labels": labels, "annotations": annotations},
		"spec":     map[string]any{"warmPoolRef": map[string]any{"name": a.name}},
	}}
}

// The claim ahead. A SandboxClaim waits for agent-sandbox's controller
// to pick a member — tens of milliseconds, more when it is busy — so each
// replica keeps one member claimed before a thread needs it: a claim of
// its own (<pod_prefix>-warm-<16 random hex>, labelled with the replica's
// id, its warm-alive kept fresh), adopted, its member's Pod left as the
// controllers made it and its channel dialed. A thread's first call takes
// that Pod as it takes any member (takePod) and deletes the claim; the
// next pass claims the next one. A replica claims ahead only when the
// pool has a ready member (never a fresh Sandbox started for it), and
// holds one at most; it deletes it when it stops, and a replica that died
// leaves it to the others' sweep once its warm-alive is stale. The
// member's Sandbox belongs to the claim meanwhile, so agent-sandbox's
// controller refills the pool: kubernetes.warm members in the pool, and
// one more held by each replica.

// takeAhead takes the member held ahead, if any: it stays marked taking
// (the pool's claim, or the caller, ends that).
func (a *agentPool) takeAhead() *held {
	a.mu.Lock()
	defer a.mu.Unlock()
	h := a.ahead
	a.ahead = nil
	return h
}

// keepAhead claims a member ahead when none is held or being claimed and
// the pool had one ready (members), and keeps the held claim's
// warm-alive fresh. It says whether a claim ahead is under way.
func (a *agentPool) keepAhead(ctx context.Context, members int) bool {
	a.mu.Lock()
	h, start := a.ahead, a.ahead == nil && !a.aheading && !a.noAhead && members > 0 && !a.stopped
	if start {
		a.aheading = true
	}
	claiming := a.aheading
	fresh := h == nil || time.Since(h.alive) < warmAliveEvery
	a.mu.Unlock()
	if start {
		go a.claimAhead()
	}
	if fresh {
		return claiming
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{annWarmAlive: time.Now().UTC().Format(time.RFC3339Nano)}}})
	if _, err := a.dyn.Resource(claimGVR).Namespace(a.p.cfg.Namespace).Patch(ctx, h.claim, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		if apierrors.IsForbidden(err) {
			// A Role from before claims ahead: the other replicas would
			// sweep it as left. Each first call claims for itself, as before.
			a.p.log.Warn("kubernetes provider: no agent-sandbox member is claimed ahead: this server may not patch SandboxClaims "+
				"(the extensions.agents.x-k8s.io rule of deploy/kubernetes/rbac.yaml); a thread's first call waits for agent-sandbox's controller", "err", apiError(err))
			a.mu.Lock()
			a.noAhead = true
			a.mu.Unlock()
			a.dropAhead(ctx, h, "this server may not keep it")
			return false
		}
		a.p.log.Warn("kubernetes provider: the claim ahead's warm-alive could not be written", "claim", h.claim, "err", apiError(err))
		return claiming
	}
	a.mu.Lock()
	if a.ahead == h {
		h.alive = time.Now()
	}
	a.mu.Unlock()
	return claiming
}

// claimAhead makes a claim ahead, waits for its member, and holds it with
// its channel dialed; the claim goes when that fails or the pool stopped
// meanwhile.
func (a *agentPool) claimAhead() {
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	name, now := a.p.newWarmName(), time.Now()
	created, err := a.dyn.Resource(claimGVR).Namespace(a.p.cfg.Namespace).Create(ctx,
		a.newClaim(name, map[string]any{labelAhead: a.p.id}, map[string]any{annWarmAlive: now.UTC().Format(time.RFC3339Nano)}), metav1.CreateOptions{})
	var pod *corev1.Pod
	if err == nil {
		var sandbox string
		if sandbox, err = a.assigned(ctx, created); err == nil {
			pod, err = a.member(ctx, sandbox)
		}
		if err == nil && !running(pod) {
			_, err = a.p.waitRunning(ctx, pod.Name, pod.UID, true)
		}
	}
	a.mu.Lock()
	a.aheading = false
	keep := err == nil && !a.stopped
	dial := false
	if keep {
		a.ahead = &held{claim: name, claimUID: created.GetUID(), pod: pod.Name, alive: now}
		a.taking[pod.Name] = true
		delete(a.pool.ready, pod.Name) // listed before its adoption
		// Dialed already while it was a member (or being dialed): one
		// channel, one relay in the Pod.
		if dial = a.conns[pod.Name].c == nil && !a.dialing[pod.Name]; dial {
			a.dialing[pod.Name] = true
		}
	}
	a.mu.Unlock()
	a.refill() // the pool as it is now: one member fewer
	switch {
	case keep:
		a.p.log.Debug("kubernetes provider: agent-sandbox member claimed ahead", "claim", name, "pod", pod.Name)
		if dial {
			a.dial(pod.Name, pod.UID)
		}
	case err != nil && created != nil:
		a.p.log.Debug("kubernetes provider: no member claimed ahead", "claim", name, "err", err)
		fallthrough
	case created != nil:
		a.deleteClaim(context.WithoutCancel(ctx), name, created.GetUID())
	default:
		a.p.log.Debug("kubernetes provider: no member claimed ahead", "err", apiError(err))
	}
}

// dropAhead lets the member held ahead go (its claim deleted, with its
// Sandbox and Pod), unless it was taken meanwhile.
func (a *agentPool) dropAhead(ctx context.Context, h *held, why string) {
	a.mu.Lock()
	mine := a.ahead == h
	if mine {
		a.ahead = nil
	}
	a.mu.Unlock()
	if mine {
		a.p.log.Debug("kubernetes provider: the member claimed ahead goes", "pod", h.pod, "why", why)
		a.letGo(ctx, h)
	}
}

// letGo ends member h, no longer held: its channel closed, its claim
// deleted (its Sandbox and Pod go with it).
func (a *agentPool) letGo(ctx context.Context, h *held) {
	a.untake(h.pod)
	a.drop(h.pod)
	a.deleteClaim(ctx, h.claim, h.claimUID)
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

// assigned waits for claim's Sandbox — a member adopted (the claim's
// annotation names it, the moment the controller picks it) or a fresh one
// (its status names it) — and names it.
func (a *agentPool) assigned(ctx context.Context, claim *unstructured.Unstructured) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	w, err := a.dyn.Resource(claimGVR).Namespace(a.p.cfg.Namespace).Watch(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", claim.GetName()).String(), ResourceVersion: claim.GetResourceVersion()})
	if err != nil {
		return "", apiError(err)
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return "", errors.New("the SandboxClaim got no Sandbox within 30 s (is agent-sandbox's controller running, with --extensions?)")
		case ev, ok := <-w.ResultChan():
			if !ok {
				return "", errors.New("the SandboxClaim's watch ended")
			}
			if ev.Type == watch.Deleted {
				return "", errors.New("the SandboxClaim was deleted")
			}
			if u, ok := ev.Object.(*unstructured.Unstructured); ok {
				sandbox := u.GetAnnotations()[annAssignedSandbox]
				if sandbox == "" {
					sandbox, _, _ = unstructured.NestedString(u.Object, "status", "sandbox", "name")
				}
				if sandbox != "" {
					return sandbox, nil
				}
			}
		}
	}
}

// member gets the Pod of Sandbox name, an unclaimed member of this pool
// (a fresh Sandbox's Pod is made a moment after it).
func (a *agentPool) member(ctx context.Context, name string) (*corev1.Pod, error) {
	for {
		pod, err := a.p.cs.CoreV1().Pods(a.p.cfg.Namespace).Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("the SandboxClaim's Pod %s was not made within 30 s", name)
			case <-time.After(20 * time.Millisecond):
			}
			continue
		case err != nil:
			return nil, apiError(err)
		case pod.Labels[labelWarmPool] != a.spec || !ownedBySandbox(pod) || pod.Annotations[annThread] != "" || pod.DeletionTimestamp != nil:
			return nil, fmt.Errorf("the SandboxClaim's Pod %s is not an unclaimed member of this pool", name)
		case !a.p.isWarmName(pod.Name):
			return nil, fmt.Errorf("the SandboxClaim's Pod %s is not named as a member of this pool", name)
		}
		return pod, nil
	}
}

// takePod takes member name's Pod off agent-sandbox for thread key: one
// patch, with the resourceVersion it read as precondition, that names the
// thread and removes the Pod's owner and the Sandbox controller's
// tracking label.
func (a *agentPool) takePod(ctx context.Context, name, key string) (*corev1.Pod, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	pods := a.p.cs.CoreV1().Pods(a.p.cfg.Namespace)
	for attempt := 0; ; attempt++ {
		pod, err := a.member(ctx, name)
		if err != nil {
			return nil, err
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

// close deletes the claim ahead; the pool stays the other replicas'; no
// server keeping it, the next one of this prefix removes it
// (removeStalePools).
func (a *agentPool) close(ctx context.Context) {
	a.mu.Lock()
	h := a.ahead
	a.mu.Unlock()
	if h != nil {
		a.dropAhead(ctx, h, "its server stops")
	}
}
