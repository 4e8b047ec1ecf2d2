package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// A thread's claim in storage mode pvc, and the record that says which it
// is.
//
// A thread's files are the claim <pod>-data of its Pod's name. Its Pod was
// always named from the thread's hash, <pod_prefix>-<16 hex>; a warm Pod
// (warm.go) is made with a fresh claim of its own, under its own name,
// mounted as a thread's is, and a claim cannot be renamed. So which Pod
// name, and with it which claim, is a thread's is kept in the API, in a
// record per thread: a coordination.k8s.io Lease named as the thread's
// claim would be from its hash, <pod_prefix>-<16 hex>-data, whose
// annotation names the thread (sandbox-mcp/thread, checked as a Pod's is:
// mine) and whose holderIdentity names the thread's Pod. Every replica
// reads it (podNameOf, the one way a thread's Pod and claim are named:
// Acquire, Exists, Discard), after a restart too.
//
// The record is made before the thread has a claim, by the call that
// gives it one: a warm claim names the warm Pod, any other first call the
// thread's own hash name. Create is atomic: of two warm claims for one new
// thread, or a warm claim and a first call without one, on two replicas,
// exactly one record is made; the other replica uses the Pod and claim it
// names, and a warm Pod it took goes, with its claim. A thread whose claim
// is older than records (made by a server before them) has none: it never
// takes a warm Pod (its claim exists), and gets a record naming its own
// name on its next acquire. A record never expires (no duration, nobody
// renews it); it goes with the thread's claim (Discard).
//
// Why a Lease: the record is a name that must be created exactly once, and
// a Lease is the API's object for such a thing; the server's Role gets
// leases (get, create, delete) in its namespace, where it needs them for
// nothing else. A ConfigMap would do as well, but the Role would then
// reach the namespace's ConfigMaps, the server's own configuration among
// them.
//
// A Role from before records (no leases) still serves pvc without warm
// Pods: the server then reads and writes no records (p.records false, a
// warning at start), and kubernetes.warm with pvc stops start-up. A server
// from before records makes a new thread's claim without one: during a
// rolling upgrade, a first call there and a warm claim on a new replica at
// the same moment could give the thread two claims (docs/providers.md says
// to turn warm on once every replica has records).

// recordOf is thread key's record naming Pod pod.
func (p *Provider) recordOf(key, pod string) *coordinationv1.Lease {
	labels := p.labels()
	labels[labelThread] = threadHash(key)
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: p.recordName(key), Namespace: p.cfg.Namespace, Labels: labels, Annotations: map[string]string{annThread: key}},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &pod},
	}
}

// recordName is the name of thread key's record: the name of the claim
// its Pod has when it took no warm Pod's.
func (p *Provider) recordName(key string) string {
	return claimName(PodName(p.cfg.PodPrefix, key))
}

// recorded reads thread key's record: the Pod it names, and true; the
// thread's own Pod name and false when it has none (a new thread, or one
// older than records).
func (p *Provider) recorded(ctx context.Context, key string) (string, bool, error) {
	own := PodName(p.cfg.PodPrefix, key)
	if !p.records {
		return own, false, nil
	}
	l, err := p.cs.CoordinationV1().Leases(p.cfg.Namespace).Get(ctx, p.recordName(key), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return own, false, nil
	}
	if err != nil {
		return "", false, apiError(err)
	}
	name, err := p.recordPod(l, key)
	return name, err == nil, err
}

// recordPod is the Pod record l names, once it is checked to be thread
// key's and to name one of this prefix's Pod names: the thread's own, or
// a warm Pod's.
func (p *Provider) recordPod(l *coordinationv1.Lease, key string) (string, error) {
	if err := p.mine(l.ObjectMeta, "record (Lease)", key); err != nil {
		return "", err
	}
	name := ""
	if l.Spec.HolderIdentity != nil {
		name = *l.Spec.HolderIdentity
	}
	if name != PodName(p.cfg.PodPrefix, key) && !p.isWarmName(name) {
		return "", fmt.Errorf("kubernetes provider: record (Lease) %s/%s names %q, no Pod of this pod_prefix; left alone, so this thread has no sandbox until it is removed", p.cfg.Namespace, l.Name, name)
	}
	return name, nil
}

// record makes thread key's record, naming Pod pod, unless the thread has
// one, and returns the Pod the record names: pod, or the one another
// replica recorded first.
func (p *Provider) record(ctx context.Context, key, pod string) (string, error) {
	if !p.records {
		return pod, nil
	}
	leases := p.cs.CoordinationV1().Leases(p.cfg.Namespace)
	for attempt := 0; ; attempt++ {
		_, err := leases.Create(ctx, p.recordOf(key, pod), metav1.CreateOptions{})
		if err == nil {
			return pod, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return "", apiError(err)
		}
		l, err := leases.Get(ctx, p.recordName(key), metav1.GetOptions{})
		switch {
		case err == nil:
			return p.recordPod(l, key)
		case !apierrors.IsNotFound(err) || attempt == 2:
			return "", apiError(err)
		}
		// Deleted since (the thread discarded): make it again.
	}
}

// deleteRecord deletes thread key's record, if it is the thread's.
func (p *Provider) deleteRecord(ctx context.Context, key string) error {
	if !p.records {
		return nil
	}
	leases := p.cs.CoordinationV1().Leases(p.cfg.Namespace)
	l, err := leases.Get(ctx, p.recordName(key), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return apiError(err)
	case p.mine(l.ObjectMeta, "record (Lease)", key) != nil:
		return nil
	}
	uid := l.UID
	err = leases.Delete(ctx, l.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) {
		return apiError(err)
	}
	return nil
}

// mayKeepRecords says whether this server may read and make records: false
// only when the API says it is forbidden (a Role from before them); any
// other failure is the calls' to report.
func (p *Provider) mayKeepRecords(ctx context.Context) bool {
	_, err := p.cs.CoordinationV1().Leases(p.cfg.Namespace).Get(ctx, p.cfg.PodPrefix+"-records", metav1.GetOptions{})
	return !apierrors.IsForbidden(err)
}

// newClaim is a claim of this server's settings, named name: a thread's
// (annotated with it) or a warm Pod's.
func (p *Provider) newClaim(name string, labels, annotations map[string]string) *corev1.PersistentVolumeClaim {
	var class *string
	if p.cfg.Storage.StorageClass != "" {
		sc := p.cfg.Storage.StorageClass
		class = &sc
	}
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: p.cfg.Namespace, Labels: labels, Annotations: annotations},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: class,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: p.size}},
		},
	}
}

// makeWarmClaim makes warm Pod pod's claim: fresh (AlreadyExists is an
// error: a name is never reused), labelled as the pool's, and owned by the
// Pod, so that it goes with the Pod, whoever deletes it, until a claim
// makes it a thread's (takeWarmClaim). The Pod is made first (it waits,
// Pending, for its claim), so that the claim can name its owner's uid.
func (p *Provider) makeWarmClaim(ctx context.Context, pod *corev1.Pod, spec string) error {
	labels := p.labels()
	labels[labelWarm] = spec
	c := p.newClaim(claimName(pod.Name), labels, map[string]string{annWarmMaker: p.id})
	c.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID}}
	_, err := p.cs.CoreV1().PersistentVolumeClaims(p.cfg.Namespace).Create(ctx, c, metav1.CreateOptions{})
	return err
}

// deleteWarmClaim deletes the claim of warm Pod pod, deleted unclaimed: it
// goes with the Pod (its owner reference), and here at once rather than
// when the garbage collector gets to it. Only the pool's claim owned by
// that very Pod is deleted.
func (p *Provider) deleteWarmClaim(ctx context.Context, pod *corev1.Pod) {
	claims := p.cs.CoreV1().PersistentVolumeClaims(p.cfg.Namespace)
	c, err := claims.Get(ctx, claimName(pod.Name), metav1.GetOptions{})
	if err != nil || c.Labels[labelWarm] == "" || c.Annotations[annThread] != "" || len(c.OwnerReferences) != 1 || c.OwnerReferences[0].UID != pod.UID {
		return
	}
	uid, rv := c.UID, c.ResourceVersion
	err = claims.Delete(ctx, c.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &rv}})
	if err != nil && !apierrors.IsNotFound(err) {
		p.log.Debug("kubernetes provider: delete warm Pod's claim", "claim", c.Name, "err", err)
	}
}

// takeWarmClaim makes the claim of warm Pod name (uid), just claimed for
// thread key, the thread's: it names the thread (its annotation, which
// mine checks, and the thread label), is no longer the pool's and no
// longer goes with the Pod. One JSON patch, whose tests make it apply only
// to the fresh claim of that very Pod, still the pool's: a claim taken
// once is never taken again. It returns the claim's uid.
func (p *Provider) takeWarmClaim(ctx context.Context, name string, uid types.UID, spec, key string) (types.UID, error) {
	patch, _ := json.Marshal([]map[string]any{
		{"op": "test", "path": "/metadata/ownerReferences/0/uid", "value": string(uid)},
		{"op": "test", "path": "/metadata/labels/" + jsonPointer(labelWarm), "value": spec},
		{"op": "remove", "path": "/metadata/ownerReferences"},
		{"op": "remove", "path": "/metadata/labels/" + jsonPointer(labelWarm)},
		{"op": "add", "path": "/metadata/labels/" + jsonPointer(labelThread), "value": threadHash(key)},
		{"op": "add", "path": "/metadata/annotations/" + jsonPointer(annThread), "value": key},
	})
	c, err := p.cs.CoreV1().PersistentVolumeClaims(p.cfg.Namespace).Patch(ctx, claimName(name), types.JSONPatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return "", fmt.Errorf("warm Pod %s's claim: %w", name, apiError(err))
	}
	return c.UID, nil
}

// jsonPointer escapes s as one token of a JSON pointer (RFC 6901).
func jsonPointer(s string) string { return strings.NewReplacer("~", "~0", "/", "~1").Replace(s) }

// deleteClaimOf deletes thread key's claim name, if it is the thread's
// (uid, when given, the one just taken).
func (p *Provider) deleteClaimOf(ctx context.Context, name, key string, uid types.UID) error {
	claims := p.cs.CoreV1().PersistentVolumeClaims(p.cfg.Namespace)
	if uid == "" {
		c, err := claims.Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return nil
		case err != nil:
			return apiError(err)
		case p.mine(c.ObjectMeta, "claim", key) != nil:
			return nil
		}
		uid = c.UID
	}
	err := claims.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) {
		return apiError(err)
	}
	return nil
}

// errRecorded: a thread's record names another Pod than the warm one just
// taken for it (another replica recorded first).
var errRecorded = errors.New("the thread's record names another Pod")
