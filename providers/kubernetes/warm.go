package kubernetes

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sandbox-mcp/sandbox-mcp/providers/internal/rename"
	"github.com/sandbox-mcp/sandbox-mcp/providers/internal/supervised"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor"
)

// The warm Pods (kubernetes.warm: N, SPEC §14): N Pods started, hardened
// and answering, made with this server's settings, that belong to no
// thread yet. A new thread's first call claims one instead of waiting for
// a Pod to be scheduled, its images' containers made and its supervisor
// installed.
//
// A Pod's volumes are fixed when it is made, so a warm Pod cannot mount
// the storage of a thread to come. In storage mode pvc each is made with a
// fresh claim of its own, <pod>-data, owned by the Pod until the claim that
// makes it a thread's, after which the thread's record names the Pod, and
// so the claim (records.go; the record's create is what makes one Pod per
// thread across replicas there, as the rename below does for host_path).
// In host_path mode each is made with user-data directories of its own,
// <host_path>/warm/<pod>/user-data, mounted at /mnt/user-data as a
// thread's are, and a record, <host_path>/warm/<pod>/pod, naming it (out of
// the Pod's reach). The claim renames
// <host_path>/warm/<pod> to the thread's <host_path>/threads/<key> — a bind
// mount follows its directory, not its path — so those very directories
// become the thread's, and the record with them. Only a thread with no
// directory yet claims: a thread that has files keeps them where they are
// and its Pod is made as before. The rename (RENAME_NOREPLACE) is what
// makes one Pod per thread across replicas: of two claims for one thread,
// or a claim and a first call that made the thread's directory, one
// rename fails, and its Pod goes.
//
// A claimed Pod keeps its name, <pod_prefix>-warm-<16 hex>: the record in
// the thread's directory names it, and every replica names the thread's
// Pod by it from then on (podNameOf) — a Pod made again for the thread
// after an idle one went included, which mounts the thread's directory
// as any thread's Pod does. The claim also writes the thread on the Pod
// (its annotation, which mine checks, and the thread label), so that the
// thread's Pod is found by label as by name.
//
// The pool is the replicas': warm Pods are listed by label, and any
// replica with the same settings (labelWarm, a hash of the Pod spec)
// claims any of them. Two replicas claiming one Pod meet at the API: the
// claim is a patch with the Pod's resourceVersion as precondition, so one
// wins and the other tries the next Pod or falls back. Each replica keeps
// the pool at N by what it lists (two refilling at once may make one Pod
// too many each; the last ones by name then go), refreshes the warm-alive
// annotation of the Pods of its settings, and removes those whose
// annotation went stale: Pods of settings no live server has. A replica
// dials the supervisors of the Pods it made as they start, so that its
// own claim hands the thread a channel already open. A replica that stops
// removes the unclaimed Pods it made; one that died leaves them to the
// others (or to the next server).
//
// A warm Pod serves one thread, once: it never goes back to the pool, so
// nothing of one thread reaches another through it.
const (
	labelWarm    = "sandbox-mcp/warm"       // a warm Pod: the hash of its settings (warmSpec)
	annWarmAlive = "sandbox-mcp/warm-alive" // when a server of its settings last said it keeps it
	annWarmMaker = "sandbox-mcp/warm-maker" // the replica that made it (its id)

	maxWarm    = 64    // bounds kubernetes.warm
	warmRecord = "pod" // the file beside user-data naming a claimed Pod
)

// How often a replica refreshes the warm-alive annotation of the Pods of
// its settings, and how old it is when no server keeps them (variables:
// the tests shorten them).
var (
	warmAliveEvery = 15 * time.Second
	warmStale      = 90 * time.Second
)

type pool struct {
	p    *Provider
	size int
	spec string     // labelWarm's value for this server's settings
	src  warmSource // where its members come from: its own Pods, or agent-sandbox's
	kick chan struct{}
	stop chan struct{}
	done chan struct{}
	once sync.Once

	mu      sync.Mutex
	ready   map[string]warmPod   // running, unclaimed, of these settings, as last listed
	made    map[string]types.UID // made here, not known claimed
	conns   map[string]warmConn  // channels dialed to Pods made here
	dialing map[string]bool
	taking  map[string]bool      // being claimed here
	claimed map[string]types.UID // claimed here, not used yet
	handed  map[string]warmConn  // channels of Pods claimed here, for their first call
	swept   time.Time
	stopped bool
}

type warmPod struct {
	uid types.UID
	rv  string
}

type warmConn struct {
	c   *supervisor.Conn
	uid types.UID
	at  time.Time // claimed (handed)
}

// warmSource is where a pool's members come from (the pool's own warm
// Pods, ownPods, or the agent-sandbox SandboxWarmPool, agentPool): the
// rest of a claim — the rename of the member's directory to the thread's,
// its record, the channel dialed beforehand — is the pool's, one code for
// both.
type warmSource interface {
	// pass looks at the members once and keeps them coming; it says when
	// to look again.
	pass() (time.Duration, error)
	// take claims a running member for thread key at the API: no other
	// replica can claim it from then on. errClaiming: another replica
	// claims one for key.
	take(ctx context.Context, key string) (name string, uid types.UID, err error)
	// dir is the node directory of member name's files, which its claim
	// renames to the thread's, record included.
	dir(name string) string
	// lost: member name, taken, is no one's (the thread got a directory
	// meanwhile): it goes, and its directory.
	lost(ctx context.Context, name string, uid types.UID)
	// close: the server stops.
	close(ctx context.Context)
}

// errClaiming: another replica claims a member for the thread; its
// directory comes soon.
var errClaiming = errors.New("another replica claims a warm Pod for this thread")

func newPool(p *Provider, size int) *pool {
	w := &pool{p: p, size: size, spec: p.warmSpec(),
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
		ready: map[string]warmPod{}, made: map[string]types.UID{}, conns: map[string]warmConn{},
		dialing: map[string]bool{}, taking: map[string]bool{}, claimed: map[string]types.UID{}, handed: map[string]warmConn{}}
	w.src = ownPods{w}
	return w
}

// ownPods are the pool's own warm Pods: made, kept and claimed by the
// replicas (the pool's methods).
type ownPods struct{ *pool }

func (o ownPods) dir(name string) string { return filepath.Join(o.p.warmRoot(), name) }

// take tries up to three ready Pods, one with a channel open first.
func (o ownPods) take(ctx context.Context, key string) (string, types.UID, error) {
	for attempt := 0; attempt < 3; attempt++ {
		name, wp, ok := o.next()
		if !ok {
			return "", "", errors.New("no warm Pod ready")
		}
		if uid, ok := o.patchFor(ctx, name, wp, key); ok {
			return name, uid, nil
		}
		o.untake(name)
	}
	return "", "", errors.New("every warm Pod tried was claimed meanwhile")
}

func (o ownPods) lost(ctx context.Context, name string, uid types.UID) {
	o.p.deletePod(context.WithoutCancel(ctx), name, uid)
	if o.p.cfg.Storage.Mode == StorageHostPath {
		os.RemoveAll(o.dir(name))
	}
	// pvc: its claim, still the Pod's, goes with it (owner reference).
}

// close removes the unclaimed Pods made here (the other replicas refill).
func (o ownPods) close(ctx context.Context) {
	o.mu.Lock()
	made := o.made
	o.made = map[string]types.UID{}
	o.mu.Unlock()
	pods := o.p.cs.CoreV1().Pods(o.p.cfg.Namespace)
	for name, uid := range made {
		pod, err := pods.Get(ctx, name, metav1.GetOptions{})
		if err == nil && pod.UID == uid && pod.Annotations[annThread] == "" {
			o.p.removeWarm(ctx, pod, "its server stops")
		}
	}
}

// warmSpec hashes what makes two servers' warm Pods alike: the Pod spec
// but for the Pod's own directory or claim, and in pvc mode the claim's
// class and size.
func (p *Provider) warmSpec() string {
	pod := p.podFor("x", "", "")
	b, _ := json.Marshal(pod.Spec)
	if p.cfg.Storage.Mode == StoragePVC {
		c, _ := json.Marshal(p.newClaim("x", nil, nil).Spec)
		b = append(b, c...)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// warmRoot is the node directory of the warm Pods' directories.
func (p *Provider) warmRoot() string { return filepath.Join(p.cfg.Storage.HostPath, "warm") }

// newWarmName is a fresh warm name: <pod_prefix>-warm-<16 random hex>
// (a warm Pod of the pool's own, or a claim ahead, whose fresh Sandbox's
// Pod is named so).
func (p *Provider) newWarmName() string {
	b := make([]byte, 8)
	rand.Read(b)
	return p.cfg.PodPrefix + "-warm-" + hex.EncodeToString(b)
}

// isWarmName says whether name is one this prefix's warm Pods have:
// <pod_prefix>-warm-<16 hex> (the pool's own, or an agent-sandbox claim's
// fresh Sandbox), or <pod_prefix>-warm-<16 hex>-<5 [a-z0-9]> (a member of
// the agent-sandbox SandboxWarmPool of that name).
func (p *Provider) isWarmName(name string) bool {
	rest, ok := strings.CutPrefix(name, p.cfg.PodPrefix+"-warm-")
	if !ok {
		return false
	}
	if len(rest) == 22 && rest[16] == '-' {
		for _, c := range rest[17:] {
			if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
				return false
			}
		}
		rest = rest[:16]
	}
	if len(rest) != 16 {
		return false
	}
	_, err := hex.DecodeString(rest)
	return err == nil && strings.ToLower(rest) == rest
}

// claimedPod is the warm Pod thread key claimed, as the record in its
// directory says; "" when it claimed none.
func (p *Provider) claimedPod(key string) string {
	if sandbox.ValidThreadKey(key) != nil {
		return ""
	}
	b, err := os.ReadFile(filepath.Join(filepath.Dir(p.threadDir(key)), warmRecord))
	if err != nil {
		return ""
	}
	if name := strings.TrimSpace(string(b)); p.isWarmName(name) {
		return name
	}
	return ""
}

// run keeps the pool full: a pass at once, again after each claim, soon
// while Pods are starting, and every warmAliveEvery otherwise. A pass that
// fails is tried again after a pause that grows, so a broken cluster or
// image is not hammered.
func (w *pool) run() {
	defer close(w.done)
	pause := time.Second
	for {
		next, err := w.src.pass()
		if err != nil {
			w.p.log.Warn("kubernetes provider: warm Pods", "err", err)
			next = pause
			pause = min(2*pause, time.Minute)
		} else {
			pause = time.Second
		}
		select {
		case <-w.stop:
			return
		case <-w.kick:
		case <-time.After(next):
		}
	}
}

// pass looks at the warm Pods of this prefix once: removes those no
// server keeps, those that cannot start and those beyond N, refreshes the
// others' warm-alive annotation, dials the supervisors of the ones made
// here, and makes as many as are missing. It says when to look again.
func (w *pool) pass() (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pods := w.p.cs.CoreV1().Pods(w.p.cfg.Namespace)
	list, err := pods.List(ctx, metav1.ListOptions{LabelSelector: w.p.selector() + "," + labelWarm})
	if err != nil {
		return 0, apiError(err)
	}
	listed := map[string]bool{}
	claimed := map[string]bool{}
	var ours []*corev1.Pod // unclaimed, of these settings
	var broken error
	for i := range list.Items {
		pod := &list.Items[i]
		listed[pod.Name] = true
		switch {
		case pod.DeletionTimestamp != nil || !w.p.isWarmName(pod.Name):
		case pod.Annotations[annThread] != "":
			claimed[pod.Name] = true // a thread's Pod now
		case pod.Labels[labelWarm] != w.spec:
			if time.Since(warmAlive(pod)) >= warmStale {
				w.p.removeWarm(ctx, pod, "no server of its settings keeps it")
			}
		case initFailed(pod) != "" || sandboxEnded(pod) || stuckWaiting(pod) != "":
			why := initFailed(pod) + " " + stuckWaiting(pod)
			if sandboxEnded(pod) {
				why += " " + ended(pod)
			}
			broken = fmt.Errorf("a warm Pod cannot start (image %s, kubernetes.supervisor_image %s): %s", w.p.cfg.Image, w.p.cfg.SupervisorImage, oneLine(why))
			w.p.removeWarm(ctx, pod, "it cannot start")
		case !running(pod) && time.Since(pod.CreationTimestamp.Time) > w.p.cfg.StartTimeout:
			broken = fmt.Errorf("a warm Pod is not running after %s: %s", w.p.cfg.StartTimeout, pod.Status.Phase)
			w.p.removeWarm(ctx, pod, "not running after kubernetes.start_timeout")
		default:
			if time.Since(warmAlive(pod)) >= warmAliveEvery {
				w.p.refreshWarm(ctx, pod)
			}
			ours = append(ours, pod)
		}
	}
	// Beyond N, the last by name go: every replica picks the same ones.
	sort.Slice(ours, func(i, j int) bool { return ours[i].Name < ours[j].Name })
	for _, pod := range ours[min(len(ours), w.size):] {
		w.p.removeWarm(ctx, pod, "beyond kubernetes.warm")
	}
	ours = ours[:min(len(ours), w.size)]
	ready := map[string]warmPod{}
	starting := false
	for _, pod := range ours {
		if running(pod) {
			ready[pod.Name] = warmPod{uid: pod.UID, rv: pod.ResourceVersion}
		} else {
			starting = true
		}
	}
	sweep, stopped := w.track(ready, func(name string) bool { return w.made[name] != "" }, func(name string) bool { return !listed[name] || claimed[name] })
	if stopped {
		return 0, nil
	}
	if broken != nil {
		return 0, broken // made again after a pause that grows
	}
	for n := len(ours); n < w.size; n++ {
		if err := w.make(ctx); err != nil {
			return 0, err
		}
		starting = true
	}
	if sweep {
		w.sweep(listed)
	}
	if starting {
		return 200 * time.Millisecond, nil
	}
	return warmAliveEvery, nil
}

// track makes ready (running members claimed by nobody, as just listed)
// the pool's, closes the channels of members no longer in it (claimed by
// another replica, or gone) and of claims whose thread made no call,
// forgets the Pods made here that gone says went, and dials the members
// dialable says this replica dials. It says whether it is time for a
// sweep, and whether the pool stopped.
func (w *pool) track(ready map[string]warmPod, dialable, gone func(name string) bool) (sweep, stopped bool) {
	w.mu.Lock()
	if w.stopped {
		w.mu.Unlock()
		return false, true
	}
	for name := range ready {
		if w.taking[name] || w.claimed[name] != "" {
			delete(ready, name) // listed before this replica's claim
		}
	}
	w.ready = ready
	var closing []*supervisor.Conn
	for name, c := range w.conns {
		if _, ok := ready[name]; !ok && !w.taking[name] {
			closing = append(closing, c.c) // claimed by another replica, or gone
			delete(w.conns, name)
		}
	}
	for name, c := range w.handed {
		if time.Since(c.at) > time.Minute {
			closing = append(closing, c.c) // its thread made no call
			delete(w.handed, name)
		}
	}
	for name := range w.made {
		if gone(name) {
			delete(w.made, name)
		}
	}
	dial := map[string]types.UID{}
	for name, wp := range ready {
		if dialable(name) && w.conns[name].c == nil && !w.dialing[name] {
			w.dialing[name] = true
			dial[name] = wp.uid
		}
	}
	sweep = time.Since(w.swept) > 30*time.Second
	if sweep {
		w.swept = time.Now()
	}
	w.mu.Unlock()
	for _, c := range closing {
		c.Close()
	}
	for name, uid := range dial {
		go w.dial(name, uid)
	}
	return sweep, false
}

// warmAlive is when a server last said it keeps warm Pod pod.
func warmAlive(pod *corev1.Pod) time.Time {
	t, err := time.Parse(time.RFC3339Nano, pod.Annotations[annWarmAlive])
	if err != nil || t.Before(pod.CreationTimestamp.Time) {
		return pod.CreationTimestamp.Time
	}
	return t
}

// stuckWaiting says why the Pod's sandbox container waits for good, or "".
func stuckWaiting(pod *corev1.Pod) string {
	for _, cs := range pod.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil && stuck[w.Reason] {
			return w.Reason + ": " + w.Message
		}
	}
	return ""
}

// make makes one warm Pod: host_path, its directories and record, then
// the Pod; pvc, the Pod, then its fresh claim (makeWarmClaim).
func (w *pool) make(ctx context.Context) error {
	name := w.p.newWarmName()
	hostPath := w.p.cfg.Storage.Mode == StorageHostPath
	dir := filepath.Join(w.p.warmRoot(), name)
	if hostPath {
		if err := w.p.makeWarmDir(dir, name); err != nil {
			os.RemoveAll(dir)
			return fmt.Errorf("kubernetes.storage.host_path: %w", err)
		}
	}
	pod := w.p.podFor(name, "", filepath.Join(dir, "user-data"))
	pod.Labels[labelWarm] = w.spec
	pod.Annotations[annWarmAlive] = time.Now().UTC().Format(time.RFC3339Nano)
	pod.Annotations[annWarmMaker] = w.p.id
	if w.p.mutatePod != nil {
		w.p.mutatePod(pod)
	}
	created, err := w.p.cs.CoreV1().Pods(w.p.cfg.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		if hostPath {
			os.RemoveAll(dir)
		}
		return apiError(err)
	}
	if !hostPath {
		if err := w.p.makeWarmClaim(ctx, created, w.spec); err != nil {
			w.p.deletePod(context.WithoutCancel(ctx), name, created.UID)
			return fmt.Errorf("warm Pod %s's claim: %w", name, apiError(err))
		}
	}
	w.mu.Lock()
	w.made[name] = created.UID
	w.mu.Unlock()
	w.p.log.Debug("kubernetes provider: warm Pod created", "pod", name)
	return nil
}

// makeWarmDir makes warm Pod name's directory: user-data with its three
// directories, owned by the Pods' user, and the record naming the Pod.
func (p *Provider) makeWarmDir(dir, name string) error {
	if err := os.MkdirAll(p.warmRoot(), 0o700); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	dirs := []string{dir, filepath.Join(dir, "user-data")}
	for _, d := range []string{sandbox.WorkspaceDir, sandbox.UploadsDir, sandbox.OutputsDir} {
		dirs = append(dirs, filepath.Join(dir, "user-data", filepath.Base(d)))
	}
	for _, d := range dirs[1:] {
		if err := os.Mkdir(d, 0o755); err != nil {
			return err
		}
	}
	if os.Geteuid() == 0 {
		for _, d := range dirs {
			if err := os.Lchown(d, int(p.cfg.User), int(p.cfg.User)); err != nil {
				return err
			}
		}
	}
	return rename.Record(filepath.Join(dir, warmRecord), name, 0o644)
}

// dial opens a channel to the supervisor of warm Pod name, made here,
// warms its shell (supervised.WarmShell) and keeps it for the claim
// (channel).
func (w *pool) dial(name string, uid types.UID) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := w.p.connect(ctx, name, w.p.wrapRelay)
	if err == nil {
		supervised.WarmShell(ctx, c)
	}
	w.mu.Lock()
	delete(w.dialing, name)
	if err == nil && !w.stopped && w.conns[name].c == nil && (w.ready[name].uid == uid || w.taking[name]) {
		w.conns[name] = warmConn{c: c, uid: uid}
		c = nil
	}
	w.mu.Unlock()
	if err != nil {
		w.p.log.Debug("kubernetes provider: warm Pod's supervisor", "pod", name, "err", err)
	}
	if c != nil {
		c.Close()
	}
}

// refreshWarm says that a server of its settings keeps warm Pod pod.
func (p *Provider) refreshWarm(ctx context.Context, pod *corev1.Pod) {
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
		"resourceVersion": pod.ResourceVersion,
		"annotations":     map[string]any{annWarmAlive: time.Now().UTC().Format(time.RFC3339Nano)},
	}})
	got, err := p.cs.CoreV1().Pods(p.cfg.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err == nil {
		*pod = *got
	}
}

// removeWarm deletes an unclaimed warm Pod, unless it changed since it was
// listed (claimed meanwhile), and its directory.
func (p *Provider) removeWarm(ctx context.Context, pod *corev1.Pod, why string) {
	grace := int64(1)
	uid, rv := pod.UID, pod.ResourceVersion
	err := p.cs.CoreV1().Pods(p.cfg.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: &grace,
		Preconditions:      &metav1.Preconditions{UID: &uid, ResourceVersion: &rv},
	})
	switch {
	case err == nil:
		p.log.Info("kubernetes provider: warm Pod deleted ("+why+")", "pod", pod.Name)
	case apierrors.IsNotFound(err):
	default:
		if !apierrors.IsConflict(err) {
			p.log.Warn("kubernetes provider: delete warm Pod", "pod", pod.Name, "err", err)
		}
		return
	}
	// Unclaimed until it went (a claim renames the directory, or takes
	// the claim, only after its patch, which the precondition would have
	// seen).
	switch {
	case !p.isWarmName(pod.Name):
	case p.cfg.Storage.Mode == StorageHostPath:
		os.RemoveAll(filepath.Join(p.warmRoot(), pod.Name))
	default:
		p.deleteWarmClaim(ctx, pod)
	}
}

// removeStaleWarm, for a server that keeps no warm Pods, removes those no
// server keeps any more.
func (p *Provider) removeStaleWarm(ctx context.Context) {
	list, err := p.cs.CoreV1().Pods(p.cfg.Namespace).List(ctx, metav1.ListOptions{LabelSelector: p.selector() + "," + labelWarm})
	if err != nil {
		return
	}
	for i := range list.Items {
		pod := &list.Items[i]
		if pod.DeletionTimestamp == nil && pod.Annotations[annThread] == "" && p.isWarmName(pod.Name) && time.Since(warmAlive(pod)) >= warmStale {
			p.removeWarm(ctx, pod, "no server of its settings keeps it")
		}
	}
}

// sweep removes the directories of warm Pods that are no more (a server
// that died between making one and its Pod, or a Pod claimed by a server
// that died before the rename, and since deleted).
func (w *pool) sweep(listed map[string]bool) {
	if w.p.cfg.Storage.Mode != StorageHostPath {
		return // a warm Pod's claim goes with it (owner reference)
	}
	ents, _ := os.ReadDir(w.p.warmRoot())
	for _, e := range ents {
		if !e.IsDir() || !w.p.isWarmName(e.Name()) || listed[e.Name()] {
			continue
		}
		if info, err := e.Info(); err == nil && time.Since(info.ModTime()) > 2*time.Minute {
			os.RemoveAll(filepath.Join(w.p.warmRoot(), e.Name()))
		}
	}
}

// claim hands a warm Pod to thread key, a thread with no storage yet (its
// caller asked: unstored, and in pvc mode recorded), and returns its
// name; "" when the thread got storage meanwhile or no warm Pod could be
// claimed (the thread's Pod is then made as without a pool). When another
// replica claims one for the thread, it waits for that claim's directory,
// which names the thread's Pod from then on (podNameOf).
func (w *pool) claim(ctx context.Context, key string) string {
	if w == nil || sandbox.ValidThreadKey(key) != nil {
		return ""
	}
	defer w.refill()
	name, uid, err := w.src.take(ctx, key)
	if errors.Is(err, errClaiming) {
		w.await(ctx, filepath.Dir(w.p.threadDir(key)))
		return ""
	}
	if err != nil {
		w.p.log.Debug("kubernetes provider: no warm Pod claimed", "thread", key, "err", err)
		return ""
	}
	// Its storage becomes the thread's, unless the thread got some
	// meanwhile (another replica's claim, or a first call without a warm
	// Pod): then this Pod is no one's, and goes.
	if err := w.adopt(ctx, key, name, uid); err != nil {
		if !errors.Is(err, fs.ErrExist) && !errors.Is(err, errRecorded) {
			w.p.log.Warn("kubernetes provider: a warm Pod could not be claimed", "pod", name, "err", err)
		}
		w.src.lost(ctx, name, uid)
		w.drop(name)
		w.untake(name)
		return ""
	}
	w.mu.Lock()
	delete(w.taking, name)
	delete(w.ready, name)
	w.claimed[name] = uid
	delete(w.made, name)
	if c := w.conns[name]; c.c != nil {
		c.at = time.Now()
		w.handed[name] = c
		delete(w.conns, name)
	}
	w.mu.Unlock()
	w.p.log.Info("kubernetes provider: warm Pod claimed", "pod", name, "thread", key)
	return name
}

// unstored says whether thread key has no storage yet, so that a warm
// Pod's may become its own: host_path, no directory; pvc, no claim by its
// own name (one from before records; the caller found no record).
func (p *Provider) unstored(ctx context.Context, key string) bool {
	if p.cfg.Storage.Mode == StorageHostPath {
		_, err := os.Lstat(filepath.Dir(p.threadDir(key)))
		return errors.Is(err, fs.ErrNotExist)
	}
	_, err := p.cs.CoreV1().PersistentVolumeClaims(p.cfg.Namespace).Get(ctx, claimName(PodName(p.cfg.PodPrefix, key)), metav1.GetOptions{})
	return apierrors.IsNotFound(err)
}

// adopt makes the storage of member name (uid), just taken for thread key,
// the thread's. host_path: its directory is renamed to the thread's
// (RENAME_NOREPLACE: fs.ErrExist when the thread has one). pvc: its claim
// is taken (takeWarmClaim), then the thread's record made naming the Pod
// (errRecorded, the claim deleted again, when another replica recorded
// first).
func (w *pool) adopt(ctx context.Context, key, name string, uid types.UID) error {
	if w.p.cfg.Storage.Mode == StorageHostPath {
		target := filepath.Dir(w.p.threadDir(key))
		if err := w.p.makeThreadDir(filepath.Dir(target)); err != nil {
			return err
		}
		return rename.NoReplace(w.src.dir(name), target)
	}
	claim, err := w.p.takeWarmClaim(ctx, name, uid, w.spec, key)
	if err != nil {
		return err
	}
	got, err := w.p.record(ctx, key, name)
	if err == nil && got == name {
		return nil
	}
	if derr := w.p.deleteClaimOf(context.WithoutCancel(ctx), claimName(name), key, claim); derr != nil {
		w.p.log.Warn("kubernetes provider: a warm Pod's claim taken for nothing could not be deleted", "claim", claimName(name), "err", derr)
	}
	if err == nil {
		err = errRecorded
	}
	return err
}

// await waits, within kubernetes.start_timeout, until the thread's
// directory target exists: another replica's claim renames its warm Pod's
// there.
func (w *pool) await(ctx context.Context, target string) {
	ctx, cancel := context.WithTimeout(ctx, w.p.cfg.StartTimeout)
	defer cancel()
	for {
		if _, err := os.Lstat(target); !errors.Is(err, fs.ErrNotExist) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// next takes a ready Pod off the pool's list: one with a channel open
// first.
func (w *pool) next() (string, warmPod, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	best := ""
	for name := range w.ready {
		if best == "" || (w.conns[name].c != nil && w.conns[best].c == nil) || (w.conns[name].c != nil) == (w.conns[best].c != nil) && name < best {
			best = name
		}
	}
	if best == "" {
		return "", warmPod{}, false
	}
	wp := w.ready[best]
	delete(w.ready, best)
	w.taking[best] = true
	return best, wp, true
}

// patchFor claims warm Pod name for thread key at the API: a patch that names
// the thread, with the resourceVersion it was listed at as precondition;
// written since (a warm-alive refresh, or another replica's claim), it
// is looked at again. It reports the Pod's uid, and whether it is key's.
func (w *pool) patchFor(ctx context.Context, name string, wp warmPod, key string) (types.UID, bool) {
	pods := w.p.cs.CoreV1().Pods(w.p.cfg.Namespace)
	for attempt := 0; attempt < 3; attempt++ {
		now := time.Now().UTC().Format(time.RFC3339Nano)
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
			"resourceVersion": wp.rv,
			"labels":          map[string]any{labelThread: threadHash(key)},
			"annotations":     map[string]any{annThread: key, annLastUsed: now, w.p.inUseKey(): now},
		}})
		got, err := pods.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
		if err == nil {
			return got.UID, got.UID == wp.uid
		}
		if !apierrors.IsConflict(err) {
			w.drop(name)
			return "", false
		}
		pod, err := pods.Get(ctx, name, metav1.GetOptions{})
		if err != nil || pod.UID != wp.uid || pod.DeletionTimestamp != nil || pod.Annotations[annThread] != "" || !running(pod) {
			w.drop(name)
			return "", false // claimed by another replica, or going
		}
		wp.rv = pod.ResourceVersion
	}
	return "", false
}

// untake: Pod name is no longer being claimed here.
func (w *pool) untake(name string) {
	w.mu.Lock()
	delete(w.taking, name)
	w.mu.Unlock()
}

// drop forgets warm Pod name's channel (closed).
func (w *pool) drop(name string) {
	w.mu.Lock()
	c := w.conns[name].c
	delete(w.conns, name)
	w.mu.Unlock()
	if c != nil {
		c.Close()
	}
}

// claimedHere returns the uid of Pod name when it was just claimed here
// and not used yet: its first use needs not ask the API.
func (w *pool) claimedHere(name string) (types.UID, bool) {
	if w == nil {
		return "", false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	uid, ok := w.claimed[name]
	delete(w.claimed, name)
	return uid, ok
}

// channel returns the channel this replica dialed to Pod name with uid
// while it was warm, if it is still open: a claim's first call only uses
// it.
func (w *pool) channel(name string, uid types.UID) *supervisor.Conn {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	c := w.handed[name]
	delete(w.handed, name)
	w.mu.Unlock()
	if c.c == nil {
		return nil
	}
	if c.uid != uid || c.c.Err() != nil {
		c.c.Close()
		return nil
	}
	return c.c
}

// source is the pool's warmSource; nil without a pool.
func (w *pool) source() warmSource {
	if w == nil {
		return nil
	}
	return w.src
}

// refill wakes run.
func (w *pool) refill() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// Ready is how many warm Pods are running, claimed by nobody, as last
// listed here.
func (w *pool) Ready() int {
	if w == nil {
		return 0
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.ready)
}

// close stops the pool, closes its channels and tells its source (the
// pool's own Pods: the unclaimed ones made here go; the other replicas
// refill).
func (w *pool) close(ctx context.Context) {
	w.once.Do(func() {
		close(w.stop)
		<-w.done
		w.mu.Lock()
		w.stopped = true
		conns := w.conns
		for name, c := range w.handed {
			conns[name+"\x00handed"] = c
		}
		w.conns, w.ready, w.handed = map[string]warmConn{}, map[string]warmPod{}, map[string]warmConn{}
		w.mu.Unlock()
		for _, c := range conns {
			c.c.Close()
		}
		w.src.close(ctx)
	})
}
