package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sandbox-mcp/sandbox-mcp/providers/internal/replicas"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor"
)

// The supervisor in a sandbox Pod: a container of
// kubernetes.supervisor_image (this server's image), the Pod's first,
// copies the supervisor daemon (installerBin) into an emptyDir (supervise
// --install, then --hold), mounted read-only at supervisor.BinaryDir in the
// sandbox container, whose main process it is; it listens on a socket in a
// second, writable emptyDir. The installer's postStart hook (supervise
// --await) returns once the daemon is in place, and the kubelet starts the
// sandbox container only then. The sandbox's image needs nothing of ours.
const (
	installerBin   = "/" + supervisor.DaemonName // the daemon in the server's image, beside /sandbox-mcp
	supervisorBin  = supervisor.BinaryDir + "/sandbox-mcp"
	supervisorRun  = "/.sandbox-mcp-run"
	supervisorSock = supervisorRun + "/sock"

	installerName = "install-supervisor"
)

// The thread's volume in the Pod (SPEC §14, §18). It holds the thread's
// three directories and its checkpoint store, which must outlive the Pod
// (an idle Pod is deleted, the volume stays) but lie outside what the
// agent's tools see and outside the tree a checkpoint saves. So the volume
// is not mounted whole: each directory is a subPath mounted at its virtual
// path (/mnt/user-data itself is the image's, read-only with the root file
// system), and the store a subPath mounted at ckptDir.
//
//	pvc        the claim's root: workspace, uploads, outputs (the layout of
//	           claims made before, which keep working) and ckptSubPath
//	host_path  <host_path>/threads/<thread>: user-data/{workspace,uploads,
//	           outputs} (as before) and checkpoints (as the local and docker
//	           providers keep it on the host)
//
// The kubelet makes a missing subPath directory as root, which the Pod's
// user could then not restore the times and modes of: the installer
// container, which runs as the Pod's user and starts first, mounts the
// volume whole at installerVolume and makes them (--mkdir) before it
// installs the supervisor, so they exist, the user's, when the sandbox
// container's mounts are made.
//
// Commands run as the supervisor's user and can reach the store (/proc,
// the mount): the checkpoint engine checks every object against its hash
// and every name against its path rules, so a tampered store makes a
// restore or a read fail, never write outside user-data.
const (
	ckptDir         = "/.sandbox-mcp-checkpoints"
	ckptSubPath     = ".sandbox-mcp-checkpoints"
	installerVolume = "/.sandbox-mcp-volume"
)

// volumeSubPaths are the subPaths of the thread's volume: user-data's
// three directories (by virtual path) and the checkpoint store.
func (p *Provider) volumeSubPaths() (dirs map[string]string, store string) {
	prefix, store := "", ckptSubPath
	if p.cfg.Storage.Mode == StorageHostPath {
		prefix, store = "user-data/", "checkpoints"
	}
	dirs = map[string]string{}
	for _, d := range []string{sandbox.WorkspaceDir, sandbox.UploadsDir, sandbox.OutputsDir} {
		dirs[d] = prefix + path.Base(d)
	}
	return dirs, store
}

// supervisorArgs is the sandbox container's command: the supervisor, which
// keeps the thread's checkpoints in the store mounted at ckptDir and only
// the variables commands may see (the runtime adds KUBERNETES_SERVICE_HOST
// and others).
func (p *Provider) supervisorArgs() []string {
	return []string{supervisorBin, "supervise", "--listen", supervisorSock,
		"--checkpoints", ckptDir, "--user-data", sandbox.UserDataDir,
		"--keep-env", p.keep}
}

// installerArgs is the installer container's command: make the volume's
// subPath directories (as the Pod's user), then install the supervisor.
func (p *Provider) installerArgs() []string {
	args := []string{installerBin, "supervise", "--install", supervisorBin}
	dirs, store := p.volumeSubPaths()
	for _, d := range []string{sandbox.WorkspaceDir, sandbox.UploadsDir, sandbox.OutputsDir} {
		args = append(args, "--mkdir", installerVolume+"/"+dirs[d])
	}
	return append(args, "--mkdir", installerVolume+"/"+store, "--hold")
}

// ensure makes sure the sandbox's Pod runs and marks it busy until done is
// called (replicas.Table.Ensure). Concurrent first uses in this replica
// wait for one creator; creators in other replicas meet at the API:
// AlreadyExists means use that Pod.
func (p *Provider) ensure(ctx context.Context, sb *Sandbox) (done func(), err error) {
	start := func(admit func() error) (string, error) {
		uid, err := p.startPod(ctx, sb, admit)
		return string(uid), err
	}
	_, done, err = p.boxes.Ensure(ctx, sb.name, sb.key, start, p.room(ctx, sb))
	if errors.Is(err, replicas.ErrFull) {
		p.log.Info("kubernetes provider: no Pod may go to make room (replicas)", "pod", sb.name, "replicas", p.cfg.Replicas)
	}
	return done, err
}

// heartbeat is how often the annotations of a Pod in use are written at
// most: often enough that no replica takes a Pod in use for idle or for
// the replicas cap, rarely enough to cost little.
func (p *Provider) heartbeat() time.Duration {
	if p.cfg.IdleTimeout < 0 {
		return 10 * time.Second
	}
	return min(max(p.cfg.IdleTimeout/4, 200*time.Millisecond), 10*time.Second)
}

// inUseKey is the annotation by which this replica says it uses a Pod: a
// call in flight here. Each replica has its own, set as a call begins
// (kept fresh every heartbeat) and removed a heartbeat after its last call
// ended (one write, not two, per call of a busy thread); one of a replica
// that died goes stale after two heartbeats. A thread merely held (a
// session open between calls) is not in use: SPEC §16 protects calls in
// flight and running jobs, and the cap may take an idle Pod as before.
func (p *Provider) inUseKey() string { return annInUsePrefix + p.id }

// publish writes this replica's annotations of Pod name
// (replicas.TableConfig.Publish): last-used, and inUseKey while a call is
// in flight here.
func (p *Provider) publish(name string, inUse bool, lastUsed time.Time) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return p.patchAnnotations(ctx, name, map[string]any{annLastUsed: lastUsed.UTC().Format(time.RFC3339Nano), p.inUseKey(): inUseValue(inUse)})
}

// inUseValue is inUseKey's value: now while in use, else null (a merge
// patch then removes it).
func inUseValue(inUse bool) any {
	if !inUse {
		return nil
	}
	return time.Now().UTC().Format(time.RFC3339Nano)
}

// patchAnnotations merges annotations into Pod name's (a nil value
// removes one).
func (p *Provider) patchAnnotations(ctx context.Context, name string, annotations map[string]any) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
	if err != nil {
		return err
	}
	_, err = p.cs.CoreV1().Pods(p.cfg.Namespace).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		p.log.Debug("kubernetes provider: annotations", "pod", name, "err", err)
	}
	return err
}

// patchLastUsed writes Pod name's last-used annotation: at.
func (p *Provider) patchLastUsed(ctx context.Context, name string, at time.Time) error {
	return p.patchAnnotations(ctx, name, map[string]any{annLastUsed: at.UTC().Format(time.RFC3339Nano)})
}

// supervisorBusy asks the supervisor of Pod name, over a channel of its
// own (closed at once), whether a command or a job runs there: a Pod with
// a running job is in use, whoever called it last. A Pod that does not
// answer is not.
func (p *Provider) supervisorBusy(ctx context.Context, name string) bool {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := p.connect(ctx, name, nil)
	if err != nil {
		return false
	}
	defer c.Close()
	return c.Hello().Busy > 0
}

// inUse reports whether the supervisor of the idle Pod o runs something;
// if so its last-used annotation says now, so that no replica asks again
// (or deletes it) for another IdleTimeout.
func (p *Provider) inUse(ctx context.Context, o ourPod) bool {
	if !p.supervisorBusy(ctx, o.name) {
		return false
	}
	p.patchLastUsed(ctx, o.name, time.Now())
	return true
}

// forget drops a Pod that went away behind the server's back: the next
// use makes it again.
func (p *Provider) forget(name string) { p.boxes.Forget(name, "") }

// gone reports whether the sandbox's Pod is no longer there to exec into:
// deleted, deleting, or not running.
func (p *Provider) gone(name string) bool {
	gone, _ := p.podGone(name)
	return gone
}

// goneSoon is gone, giving the Pod's status a few seconds to catch up with
// a container that just ended (an exec into it already fails; the kubelet
// reports it within a second or two) while the API answers.
func (p *Provider) goneSoon(name string) bool {
	deadline := time.Now().Add(5 * time.Second)
	for {
		gone, answered := p.podGone(name)
		if gone || !answered || time.Now().After(deadline) {
			return gone
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// podGone is gone, and whether the API answered.
func (p *Provider) podGone(name string) (gone, answered bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pod, err := p.cs.CoreV1().Pods(p.cfg.Namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return true, true
	}
	if err != nil {
		return false, false
	}
	return pod.DeletionTimestamp != nil || !running(pod), true
}

func running(pod *corev1.Pod) bool {
	if pod.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == containerName {
			return cs.State.Running != nil
		}
	}
	return false
}

// startPod finds the sandbox's Pod by name or makes it, and waits until it
// runs. admit is called before a Pod is made (not for one found, which
// runs already or is another replica's to start): its error is the call's.
func (p *Provider) startPod(ctx context.Context, sb *Sandbox, admit func() error) (types.UID, error) {
	if uid, ok := p.pool.claimedHere(sb.name); ok {
		// A warm Pod just claimed here, known running: it counts under
		// the cap from now on. (Gone since, the dial finds out and comes
		// back.) When nothing may go for it, it goes, unused: the
		// thread's next call makes its Pod under the cap as any.
		if err := admit(); err != nil {
			p.deletePod(context.WithoutCancel(ctx), sb.name, uid)
			return "", err
		}
		return uid, nil
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.StartTimeout)
	defer cancel()
	pods := p.cs.CoreV1().Pods(p.cfg.Namespace)
	for attempt := 0; ; attempt++ {
		if attempt > 20 {
			return "", fmt.Errorf("kubernetes provider: Pod %s: could not start it (deleted as often as it was made)", sb.name)
		}
		pod, err := pods.Get(ctx, sb.name, metav1.GetOptions{})
		switch {
		case err == nil:
			if err := p.mine(pod.ObjectMeta, "Pod", sb.key); err != nil {
				return "", err
			}
			old := !hasSupervisor(pod)
			if old && pod.DeletionTimestamp == nil {
				p.log.Info("kubernetes provider: Pod made by an older server, without the supervisor: making it again (the files stay)", "pod", sb.name)
			}
			if old || pod.DeletionTimestamp != nil || sandboxEnded(pod) {
				if pod.DeletionTimestamp == nil {
					p.deletePod(ctx, sb.name, pod.UID)
				}
				if err := p.waitGone(ctx, sb.name, pod.UID); err != nil {
					return "", err
				}
				continue
			}
			uid, err := p.waitRunning(ctx, sb.name, pod.UID, false)
			if errors.Is(err, errRestart) {
				continue
			}
			return uid, err
		case !apierrors.IsNotFound(err):
			return "", apiError(err)
		}
		if err := admit(); err != nil {
			return "", err
		}
		if p.cfg.Storage.Mode == StoragePVC {
			if err := p.ensureClaim(ctx, sb); err != nil {
				return "", err
			}
		}
		spec := p.podSpec(sb)
		if p.mutatePod != nil {
			p.mutatePod(spec)
		}
		t0 := time.Now()
		created, err := pods.Create(ctx, spec, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			continue // another replica made it: use that one
		}
		if err != nil {
			return "", apiError(err)
		}
		p.log.Info("kubernetes provider: Pod created", "pod", sb.name, "namespace", p.cfg.Namespace)
		t1 := time.Now()
		uid, err := p.waitRunning(ctx, sb.name, created.UID, true)
		if errors.Is(err, errRestart) {
			continue
		}
		if err == nil {
			p.log.Debug("kubernetes provider: Pod running", "pod", sb.name, "create", t1.Sub(t0), "running", time.Since(t1))
		}
		return uid, err
	}
}

// mine checks that an object found by the name of thread key's Pod (or
// claim) is that thread's: its annotation, not its name, says whose it is.
// Another thread's (a colliding name) or another program's is never used,
// and never deleted.
func (p *Provider) mine(m metav1.ObjectMeta, kind string, key string) error {
	switch {
	case m.Labels[labelManagedBy] != managedBy || m.Labels[labelPrefix] != p.cfg.PodPrefix:
		return fmt.Errorf("kubernetes provider: %s %s/%s is not a sandbox-mcp sandbox of this pod_prefix; left alone, so this thread has no sandbox until it is removed or kubernetes.pod_prefix changed", kind, p.cfg.Namespace, m.Name)
	case m.Annotations[annThread] != key:
		return fmt.Errorf("kubernetes provider: %s %s/%s is another thread's sandbox (its annotation names another thread); it is never used for this thread", kind, p.cfg.Namespace, m.Name)
	}
	return nil
}

// errRestart: the Pod being waited for went away; look again.
var errRestart = errors.New("pod went away")

// stuck are the waiting reasons a Pod does not recover from by itself.
var stuck = map[string]bool{
	"ErrImageNeverPull":          true,
	"InvalidImageName":           true,
	"CreateContainerConfigError": true,
	"CreateContainerError":       true,
	"RunContainerError":          true,
}

// waitRunning polls the Pod until its sandbox container runs. A Pod stuck
// for good (no image, a spec the runtime refuses) is deleted, so that a
// fixed configuration takes effect on the next call, and its reason
// returned. So is a Pod just made (fresh) that ended before it ran (its
// supervisor could not start: the image's architecture, say); one found
// ended is made again.
func (p *Provider) waitRunning(ctx context.Context, name string, uid types.UID, fresh bool) (types.UID, error) {
	pods := p.cs.CoreV1().Pods(p.cfg.Namespace)
	start := time.Now()
	last := "Pending"
	for {
		pod, err := pods.Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return "", errRestart
		case err != nil && ctx.Err() == nil:
			return "", apiError(err)
		case err == nil:
			if pod.UID != uid || pod.DeletionTimestamp != nil {
				return "", errRestart
			}
			if running(pod) {
				return pod.UID, nil
			}
			if why := initFailed(pod); why != "" {
				p.deletePod(context.WithoutCancel(ctx), name, uid)
				return "", fmt.Errorf("kubernetes provider: Pod %s cannot start its supervisor (kubernetes.supervisor_image %s): %s", name, p.cfg.SupervisorImage, oneLine(why))
			}
			if sandboxEnded(pod) {
				if !fresh {
					return "", errRestart
				}
				p.deletePod(context.WithoutCancel(ctx), name, uid)
				return "", fmt.Errorf("kubernetes provider: Pod %s ended as it started (image %s, its supervisor from kubernetes.supervisor_image %s): %s", name, p.cfg.Image, p.cfg.SupervisorImage, oneLine(ended(pod)))
			}
			last = string(pod.Status.Phase)
			for _, c := range pod.Status.Conditions {
				if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Message != "" {
					last = c.Reason + ": " + c.Message
				}
			}
			for _, cs := range pod.Status.ContainerStatuses {
				if w := cs.State.Waiting; w != nil && w.Reason != "" && w.Reason != "ContainerCreating" {
					last = w.Reason
					if w.Message != "" {
						last += ": " + w.Message
					}
					if stuck[w.Reason] {
						p.deletePod(context.WithoutCancel(ctx), name, uid)
						return "", fmt.Errorf("kubernetes provider: Pod %s cannot start (image %s): %s", name, p.cfg.Image, oneLine(last))
					}
				}
			}
		}
		if ctx.Err() != nil {
			if ctx2 := context.Cause(ctx); errors.Is(ctx2, context.Canceled) {
				return "", ctx2
			}
			return "", fmt.Errorf("kubernetes provider: Pod %s not running after %s: %s", name, time.Since(start).Round(time.Second), oneLine(last))
		}
		wait := 50 * time.Millisecond
		if time.Since(start) > 2*time.Second {
			wait = 250 * time.Millisecond
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
}

// sandboxEnded reports whether the Pod's sandbox container (its
// supervisor) ended: the Pod is done, even while its installer still runs
// (the Pod's phase is then Running).
func sandboxEnded(pod *corev1.Pod) bool {
	if pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded {
		return true
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == containerName && cs.State.Terminated != nil {
			return true
		}
	}
	return false
}

// ended says how the Pod's sandbox container ended.
func ended(pod *corev1.Pod) string {
	for _, cs := range pod.Status.ContainerStatuses {
		if t := cs.State.Terminated; cs.Name == containerName && t != nil {
			return fmt.Sprintf("exit %d %s %s", t.ExitCode, t.Reason, t.Message)
		}
	}
	return string(pod.Status.Phase) + " " + pod.Status.Reason + " " + pod.Status.Message
}

// hasSupervisor reports whether the Pod runs the supervisor (made by a
// server with one: podSpec, or an init container of the same name, as
// servers before this one made it), not a Pod of an older one.
func hasSupervisor(pod *corev1.Pod) bool {
	for _, c := range slices.Concat(pod.Spec.Containers, pod.Spec.InitContainers) {
		if c.Name == installerName {
			return true
		}
	}
	return false
}

// initFailed says why the Pod's installer (the supervisor's install)
// failed for good, or "": its hook failed (the kubelet kills it), its
// main process ended, or it cannot start.
func initFailed(pod *corev1.Pod) string {
	for i, cs := range slices.Concat(pod.Status.ContainerStatuses, pod.Status.InitContainerStatuses) {
		if cs.Name != installerName {
			continue
		}
		t := cs.State.Terminated
		switch {
		case t != nil && i < len(pod.Status.ContainerStatuses):
			// The installer container never ends by itself: its hook
			// failed (the kubelet then kills it), or its main process
			// could not run.
			return fmt.Sprintf("its installer ended (%s): the image's "+installerBin+" could not copy itself (supervise --install --hold), or its hook (supervise --await) failed", strings.TrimSpace(fmt.Sprintf("exit %d %s %s", t.ExitCode, t.Reason, t.Message)))
		case t != nil && t.ExitCode != 0: // an init container, of a Pod made by an earlier server
			return fmt.Sprintf("install exited %d: %s %s", t.ExitCode, t.Reason, t.Message)
		}
		if w := cs.State.Waiting; w != nil && stuck[w.Reason] {
			return w.Reason + ": " + w.Message
		}
	}
	return ""
}

// installerResources are the installer's: it copies the binary (about
// 20 ms of CPU) with up to half a CPU, never more than the sandbox
// container has, then sleeps. Its requests are small, and its ephemeral
// storage limit too, so that the Pod's (the sum of its containers', which
// the emptyDirs count against) stays about the sandbox container's, as
// with an init container.
func (p *Provider) installerResources() corev1.ResourceRequirements {
	limits := corev1.ResourceList{
		corev1.ResourceMemory:           resource.MustParse("64Mi"),
		corev1.ResourceEphemeralStorage: resource.MustParse("8Mi"),
	}
	requests := corev1.ResourceList{
		corev1.ResourceCPU:              resource.MustParse("10m"),
		corev1.ResourceMemory:           resource.MustParse("16Mi"),
		corev1.ResourceEphemeralStorage: resource.MustParse("1Mi"),
	}
	limits[corev1.ResourceCPU] = resource.MustParse("500m")
	if cpu, ok := p.limits[corev1.ResourceCPU]; ok && cpu.Cmp(limits[corev1.ResourceCPU]) < 0 {
		limits[corev1.ResourceCPU] = cpu
		if cpu.Cmp(requests[corev1.ResourceCPU]) < 0 {
			requests[corev1.ResourceCPU] = cpu
		}
	}
	return corev1.ResourceRequirements{Limits: limits, Requests: requests}
}

// waitGone waits until the Pod with uid is no longer in the API.
func (p *Provider) waitGone(ctx context.Context, name string, uid types.UID) error {
	for {
		pod, err := p.cs.CoreV1().Pods(p.cfg.Namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || (err == nil && pod.UID != uid) {
			return nil
		}
		if err != nil && ctx.Err() == nil {
			return apiError(err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kubernetes provider: Pod %s still terminating: %w", name, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// deletePod deletes a Pod, only the one with uid when uid is given. The
// thread's files stay (they are not in the Pod).
func (p *Provider) deletePod(ctx context.Context, name string, uid types.UID) error {
	grace := int64(1)
	opts := metav1.DeleteOptions{GracePeriodSeconds: &grace}
	if uid != "" {
		opts.Preconditions = &metav1.Preconditions{UID: &uid}
	}
	err := p.cs.CoreV1().Pods(p.cfg.Namespace).Delete(ctx, name, opts)
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		p.log.Warn("kubernetes provider: delete Pod", "pod", name, "err", err)
		return err
	}
	return nil
}

func (p *Provider) labels() map[string]string {
	return map[string]string{labelManagedBy: managedBy, labelPrefix: p.cfg.PodPrefix}
}

// podSpec is the hardened Pod of a thread.
func (p *Provider) podSpec(sb *Sandbox) *corev1.Pod {
	return p.podFor(sb.name, sb.key, p.threadDir(sb.key))
}

// podFor is the hardened Pod named name of thread key ("" for a warm Pod,
// which belongs to no thread yet), its files from node directory dataDir
// in host_path mode (from the claim of its name in pvc mode).
func (p *Provider) podFor(name, key, dataDir string) *corev1.Pod {
	yes, no := true, false
	uid := p.cfg.User
	grace := int64(1)
	requests := corev1.ResourceList{}
	for name, q := range p.limits {
		// Requests a fraction of the limits, so that idle sandboxes do not
		// reserve a node's whole capacity.
		r := q.DeepCopy()
		switch name {
		case corev1.ResourceCPU:
			r.SetMilli(max(q.MilliValue()/10, 10))
		default:
			r.Set(max(q.Value()/8, 16<<20))
		}
		requests[name] = r
	}
	volumes := []corev1.Volume{
		{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: "supervisor", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: "supervisor-run", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
	}
	mounts := []corev1.VolumeMount{
		{Name: "tmp", MountPath: "/tmp"},
		{Name: "supervisor", MountPath: supervisor.BinaryDir, ReadOnly: true},
		{Name: "supervisor-run", MountPath: supervisorRun},
	}
	switch p.cfg.Storage.Mode {
	case StorageHostPath:
		dir := corev1.HostPathDirectory
		// The thread's directory (or a warm Pod's), user-data's parent:
		// its subPaths are user-data's three and the checkpoint store.
		volumes = append(volumes, corev1.Volume{Name: "user-data", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: filepath.Dir(dataDir), Type: &dir}}})
	default:
		volumes = append(volumes, corev1.Volume{Name: "user-data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claimName(name)}}})
	}
	dirs, store := p.volumeSubPaths()
	for _, d := range []string{sandbox.WorkspaceDir, sandbox.UploadsDir, sandbox.OutputsDir} {
		mounts = append(mounts, corev1.VolumeMount{Name: "user-data", MountPath: d, SubPath: dirs[d]})
	}
	mounts = append(mounts, corev1.VolumeMount{Name: "user-data", MountPath: ckptDir, SubPath: store})
	for i, m := range p.mounts() {
		if sandbox.Within(m.Virtual, sandbox.UserDataDir) || m.Host == "" {
			continue
		}
		dir := corev1.HostPathDirectory
		vol := fmt.Sprintf("mount-%d", i)
		volumes = append(volumes, corev1.Volume{Name: vol, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: m.Host, Type: &dir}}})
		mounts = append(mounts, corev1.VolumeMount{Name: vol, MountPath: m.Virtual, ReadOnly: m.ReadOnly})
	}
	hardened := func(readOnlyRoot bool) *corev1.SecurityContext {
		return &corev1.SecurityContext{
			AllowPrivilegeEscalation: &no,
			Privileged:               &no,
			ReadOnlyRootFilesystem:   &readOnlyRoot,
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		}
	}
	var runtimeClass *string
	if p.cfg.RuntimeClass != "" {
		rc := p.cfg.RuntimeClass
		runtimeClass = &rc
	}
	labels := p.labels()
	annotations := map[string]string{
		// kubectl exec, logs and cp pick the sandbox, not the
		// installer, without -c.
		annDefaultContainer: containerName,
	}
	if key != "" {
		now := time.Now().UTC().Format(time.RFC3339Nano)
		labels[labelThread] = threadHash(key)
		annotations[annThread] = key
		annotations[annLastUsed] = now
		// Its maker's first call: no replica takes it from Running to
		// that call's own annotations (use).
		annotations[p.inUseKey()] = now
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Namespace:   p.cfg.Namespace,
			Labels:      labels,
			Annotations: annotations,
		},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken:  &no,
			EnableServiceLinks:            &no,
			TerminationGracePeriodSeconds: &grace,
			// A Pod whose supervisor ended is done: the next call makes
			// a new one (the thread's files stay).
			RestartPolicy:    corev1.RestartPolicyNever,
			RuntimeClassName: runtimeClass,
			NodeSelector:     p.cfg.NodeSelector,
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   &yes,
				RunAsUser:      &uid,
				RunAsGroup:     &uid,
				FSGroup:        &uid,
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Volumes: volumes,
			// The installer first: the kubelet starts a Pod's containers
			// in order, each only once the one before has started and
			// its postStart hook returned, so the binary is in place
			// before the sandbox container starts, in the same sync of
			// the kubelet (an init container's end would be seen only
			// on the kubelet's next relist of the runtime, up to a second
			// later).
			Containers: []corev1.Container{{
				Name:            installerName,
				Image:           p.cfg.SupervisorImage,
				ImagePullPolicy: corev1.PullPolicy(p.cfg.ImagePullPolicy),
				Command:         p.installerArgs(),
				Lifecycle: &corev1.Lifecycle{PostStart: &corev1.LifecycleHandler{
					Exec: &corev1.ExecAction{Command: []string{installerBin, "supervise", "--await", supervisorBin}},
				}},
				VolumeMounts:    []corev1.VolumeMount{{Name: "supervisor", MountPath: supervisor.BinaryDir}, {Name: "user-data", MountPath: installerVolume}},
				Resources:       p.installerResources(),
				SecurityContext: hardened(true),
			}, {
				Name:            containerName,
				Image:           p.cfg.Image,
				ImagePullPolicy: corev1.PullPolicy(p.cfg.ImagePullPolicy),
				Command:         p.supervisorArgs(),
				WorkingDir:      sandbox.WorkspaceDir,
				Env:             p.env,
				VolumeMounts:    mounts,
				Resources:       corev1.ResourceRequirements{Limits: p.limits, Requests: requests},
				SecurityContext: hardened(!p.cfg.WritableRootFS),
			}},
		},
	}
}

// claimName is the thread's PersistentVolumeClaim: <pod name>-data.
func claimName(pod string) string { return pod + "-data" }

// ensureClaim makes the thread's claim, <its Pod's name>-data (the name its
// record gives it: podNameOf), unless it exists. It has no owner: it
// outlives every Pod of the thread.
func (p *Provider) ensureClaim(ctx context.Context, sb *Sandbox) error {
	claims := p.cs.CoreV1().PersistentVolumeClaims(p.cfg.Namespace)
	name := claimName(sb.name)
	c, err := claims.Get(ctx, name, metav1.GetOptions{})
	if err == nil {
		return p.mine(c.ObjectMeta, "claim", sb.key)
	}
	if !apierrors.IsNotFound(err) {
		return apiError(err)
	}
	claim := p.newClaim(name, p.labels(), map[string]string{annThread: sb.key})
	if _, err := claims.Create(ctx, claim, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return apiError(err)
	}
	return nil
}

// ensureNetworkPolicy makes the policy that denies the sandbox Pods every
// ingress and egress.
func (p *Provider) ensureNetworkPolicy(ctx context.Context) error {
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: p.cfg.PodPrefix + "-deny-all", Namespace: p.cfg.Namespace, Labels: p.labels()},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: p.labels()},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
		},
	}
	_, err := p.cs.NetworkingV1().NetworkPolicies(p.cfg.Namespace).Create(ctx, np, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// ourPod is a Pod of ours as the reaper sees it.
type ourPod struct {
	name      string
	key       string // its thread (annotation)
	uid       types.UID
	rv        string
	lastUsed  time.Time
	busy      bool      // in use by this replica: a call in flight
	starting  bool      // Pending, made within StartTimeout: a replica waits for it to run
	elsewhere time.Time // when another replica last said it uses it (inUseKey), zero if none
}

// listOurs lists the live (not deleting) sandbox Pods of this prefix, with
// their last use: the later of the annotation and this replica's own view.
func (p *Provider) listOurs(ctx context.Context) ([]ourPod, error) {
	list, err := p.cs.CoreV1().Pods(p.cfg.Namespace).List(ctx, metav1.ListOptions{LabelSelector: p.selector()})
	if err != nil {
		return nil, err
	}
	var out []ourPod
	for i := range list.Items {
		if o, ok := p.ourPod(&list.Items[i]); ok {
			out = append(out, o)
		}
	}
	return out, nil
}

// selector selects the sandbox Pods of this prefix, warm ones included.
func (p *Provider) selector() string {
	return labelManagedBy + "=" + managedBy + "," + labelPrefix + "=" + p.cfg.PodPrefix
}

// ourPod is how the reaper and the replicas cap see pod, unless it is
// deleting, not of this prefix, or a warm Pod no thread claimed (the
// pool's: neither idle nor counted under replicas).
func (p *Provider) ourPod(pod *corev1.Pod) (ourPod, bool) {
	if pod.DeletionTimestamp != nil || !strings.HasPrefix(pod.Name, p.cfg.PodPrefix+"-") {
		return ourPod{}, false
	}
	if (pod.Labels[labelWarm] != "" || pod.Labels[labelWarmPool] != "") && pod.Annotations[annThread] == "" {
		return ourPod{}, false
	}
	o := ourPod{name: pod.Name, key: pod.Annotations[annThread], uid: pod.UID, rv: pod.ResourceVersion, lastUsed: pod.CreationTimestamp.Time}
	if t, err := time.Parse(time.RFC3339Nano, pod.Annotations[annLastUsed]); err == nil {
		o.lastUsed = t
	}
	for k, v := range pod.Annotations {
		if t, err := time.Parse(time.RFC3339Nano, v); err == nil && strings.HasPrefix(k, annInUsePrefix) && k != p.inUseKey() && t.After(o.elsewhere) {
			o.elsewhere = t
		}
	}
	o.starting = pod.Status.Phase == corev1.PodPending && time.Since(pod.CreationTimestamp.Time) < p.cfg.StartTimeout
	var lastUsed time.Time
	if o.busy, lastUsed = p.boxes.Used(pod.Name); lastUsed.After(o.lastUsed) {
		o.lastUsed = lastUsed
	}
	return o, true
}

// capInUse reports whether the replicas cap must leave o alone without
// asking its supervisor: a call in flight here, still starting, or another
// replica said it uses it within two heartbeats (each keeps its in-use
// annotation that fresh).
func (p *Provider) capInUse(o ourPod) bool {
	return o.busy || o.starting || time.Since(o.elsewhere) < 2*p.heartbeat()+time.Second
}

// deleteIfUnchanged deletes a Pod only if nobody wrote it (a last-used
// annotation from another replica) since it was listed, and reports
// whether it went, or whether it was written since (conflict).
func (p *Provider) deleteIfUnchanged(ctx context.Context, o ourPod, why string) (gone, conflict bool) {
	grace := int64(1)
	err := p.cs.CoreV1().Pods(p.cfg.Namespace).Delete(ctx, o.name, metav1.DeleteOptions{
		GracePeriodSeconds: &grace,
		Preconditions:      &metav1.Preconditions{UID: &o.uid, ResourceVersion: &o.rv},
	})
	switch {
	case err == nil:
		p.log.Info("kubernetes provider: Pod deleted ("+why+")", "pod", o.name)
		p.forget(o.name)
		return true, false
	case apierrors.IsNotFound(err):
		p.forget(o.name)
		return true, false
	case apierrors.IsConflict(err):
		return false, true // used meanwhile, or another write (a heartbeat)
	default:
		p.log.Warn("kubernetes provider: delete Pod", "pod", o.name, "err", err)
	}
	return false, false
}

// reap deletes Pods unused for IdleTimeout — any replica's, by their
// last-used annotation, unless their supervisor runs a job (inUse) — and
// keeps fresh, every few seconds, the annotations of Pods in use here
// (replicas.Table.Refresh: last-used while a call is in flight, this
// replica's in-use while one is; a held thread does not keep its Pod from
// idling out).
func (p *Provider) reap() {
	defer close(p.done)
	every := min(max(p.cfg.IdleTimeout/4, 100*time.Millisecond), 30*time.Second)
	if p.cfg.IdleTimeout < 0 {
		every = 10 * time.Second
	}
	every = min(every, p.heartbeat())
	t := time.NewTicker(every)
	defer t.Stop()
	lastList, lastPools := time.Time{}, time.Time{}
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
		}
		p.boxes.Refresh()
		if p.cfg.IdleTimeout < 0 || time.Since(lastList) < min(max(p.cfg.IdleTimeout/4, 100*time.Millisecond), 30*time.Second) {
			continue
		}
		lastList = time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		pods, err := p.listOurs(ctx)
		if err != nil {
			p.log.Debug("kubernetes provider: list Pods", "err", err)
		}
		for _, o := range pods {
			if !o.busy && time.Since(o.lastUsed) >= p.cfg.IdleTimeout && !p.inUse(ctx, o) {
				p.deleteIfUnchanged(ctx, o, "idle")
			}
		}
		if p.pool == nil {
			p.removeStaleWarm(ctx)
		}
		if _, agent := p.pool.source().(*agentPool); p.dyn != nil && !agent && time.Since(lastPools) > 30*time.Second {
			lastPools = time.Now()
			p.removeStalePools(ctx, p.dyn, "")
		}
		cancel()
	}
}

// room is how sb's Pod, about to be made, is made room for under
// Replicas (replicas.MakeRoom over every replica's Pods of this prefix).
// Never taken: a Pod in use here (a call in flight), one another replica
// says it uses (its in-use annotation, fresh within two heartbeats), one
// still starting, one whose supervisor runs a command or job (asked as it
// is taken: it then counts as used now), and another token's within that
// token's share. Admissions in this replica take turns
// (replicas.Table.Ensure); two replicas admitting at once may each count
// the last free place (the cap holds over all of them to within one Pod
// per replica admitting at that moment).
func (p *Provider) room(ctx context.Context, sb *Sandbox) replicas.Room {
	byName := map[string]ourPod{}
	list := func(ctx context.Context) ([]replicas.Box, error) {
		pods, err := p.listOurs(ctx)
		if err != nil {
			return nil, apiError(err)
		}
		var boxes []replicas.Box
		for _, o := range pods {
			boxes = append(boxes, replicas.Box{Name: o.name, ID: string(o.uid), Thread: o.key, LastUsed: o.lastUsed, InUse: p.capInUse(o)})
			byName[o.name] = o
		}
		return boxes, nil
	}
	return replicas.Room{List: list, Take: func(b replicas.Box) bool {
		o := byName[b.Name]
		if p.inUse(ctx, o) {
			return false
		}
		for attempt := 0; ; attempt++ {
			if p.capInUse(o) {
				return false
			}
			gone, conflict := p.deleteIfUnchanged(ctx, o, "least recently used, beyond replicas, for "+sb.name)
			if !conflict || attempt == 2 {
				return gone
			}
			// Written since it was listed: a use, or only a heartbeat
			// or the end of one. Look again.
			pod, err := p.cs.CoreV1().Pods(p.cfg.Namespace).Get(ctx, o.name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return true
			}
			var ok bool
			if err != nil || pod.UID != o.uid {
				return false
			}
			if o, ok = p.ourPod(pod); !ok {
				return true // deleting
			}
		}
	}}
}

func oneLine(s string) string {
	s = strings.TrimSpace(strings.ReplaceAll(s, "\n", " "))
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}
