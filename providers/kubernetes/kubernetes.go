package kubernetes

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sandbox-mcp/sandbox-mcp/filelock"
	"github.com/sandbox-mcp/sandbox-mcp/providers/internal/cmdenv"
	"github.com/sandbox-mcp/sandbox-mcp/providers/internal/replicas"
	"github.com/sandbox-mcp/sandbox-mcp/providers/internal/supervised"
	"github.com/sandbox-mcp/sandbox-mcp/providers/internal/threads"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// Labels and annotations on every object of ours.
const (
	labelManagedBy = "app.kubernetes.io/managed-by"
	managedBy      = "sandbox-mcp"
	labelPrefix    = "sandbox-mcp/pod-prefix"
	annThread      = "sandbox-mcp/thread"
	labelThread    = "sandbox-mcp/thread" // a thread's Pods: threadHash of its key (the annotation says which thread)
	annLastUsed    = "sandbox-mcp/last-used"
	annInUsePrefix = "sandbox-mcp/in-use." // + a replica's id: it uses the Pod (inUseKey)

	annDefaultContainer = "kubectl.kubernetes.io/default-container"
	containerName       = "sandbox"
)

// Storage modes.
const (
	StoragePVC      = "pvc"
	StorageHostPath = "host_path"
)

// Provider hands out Pod-backed sandboxes.
type Provider struct {
	cfg    Config
	cs     k8s.Interface
	rest   *rest.Config
	log    *slog.Logger
	id     string          // this replica's, random: its in-use annotation (inUseKey)
	locks  *filelock.Locks // in-process: Pod creation, edits
	limits corev1.ResourceList
	size   resource.Quantity
	env    []corev1.EnvVar
	keep   string // names of the variables commands keep, space separated

	wrapRelay func(io.Reader) io.Reader // tests: what the relay's stdout passes through
	mutatePod func(*corev1.Pod)         // tests: a change to every Pod made

	threads threads.Table[*Sandbox] // acquired sandboxes
	boxes   *replicas.Table         // the Pods this replica knows running, or is making
	pool    *pool                   // kubernetes.warm's Pods; nil without
	records bool                    // pvc: threads' records are read and made (records.go); false under a Role without leases
	dyn     dynamic.Interface       // agent-sandbox's objects; nil where the cluster does not serve them

	stop chan struct{}
	done chan struct{}
}

var _ sandbox.Provider = (*Provider)(nil)

var prefixRe = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,42}[a-z0-9])?$`)

// New connects to the cluster, checks that the namespace answers, makes
// the NetworkPolicy when asked, and starts the reaper.
func New(ctx context.Context, cfg Config) (*Provider, error) {
	if err := setDefaults(&cfg); err != nil {
		return nil, err
	}
	quietKlog(cfg.Logger)
	rc, err := restConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes provider: %w", err)
	}
	rc.QPS, rc.Burst = 50, 100
	cs, err := k8s.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes provider: %w", err)
	}
	p, err := newProvider(ctx, cfg, cs, rc)
	if err != nil {
		return nil, err
	}
	return p, nil
}

// restConfig: an explicit kubeconfig, else in-cluster, else the usual
// loading rules ($KUBECONFIG, then ~/.kube/config).
func restConfig(cfg Config) (*rest.Config, error) {
	if cfg.Kubeconfig == "" && cfg.Context == "" {
		if rc, err := rest.InClusterConfig(); err == nil {
			return rc, nil
		}
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if cfg.Kubeconfig != "" {
		rules.ExplicitPath = cfg.Kubeconfig
	}
	rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: cfg.Context}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("no cluster configuration (in-cluster, kubernetes.kubeconfig, $KUBECONFIG or ~/.kube/config): %w", err)
	}
	return rc, nil
}

func newProvider(ctx context.Context, cfg Config, cs k8s.Interface, rc *rest.Config) (*Provider, error) {
	p := &Provider{
		cfg: cfg, cs: cs, rest: rc, log: cfg.Logger, id: strings.ToLower(rand.Text()[:12]),
		locks: filelock.NewLocks(),
		stop:  make(chan struct{}),
		done:  make(chan struct{}),
	}
	p.boxes = replicas.NewTable(replicas.TableConfig{Setting: "kubernetes.replicas", Limit: cfg.Replicas, What: "kubernetes provider: Pod",
		Lock: func(ctx context.Context, name string) (func(), error) {
			return p.locks.Lock(ctx, "pod\x00"+name)
		},
		Publish: p.publish, Heartbeat: p.heartbeat(), Started: p.boxStarted})
	p.limits = corev1.ResourceList{}
	for _, r := range []struct {
		name corev1.ResourceName
		key  string
		val  string
	}{
		{corev1.ResourceCPU, "cpu", cfg.Resources.CPU},
		{corev1.ResourceMemory, "memory", cfg.Resources.Memory},
		{corev1.ResourceEphemeralStorage, "ephemeral_storage", cfg.Resources.EphemeralStorage},
	} {
		q, err := resource.ParseQuantity(r.val)
		if err != nil || q.Sign() <= 0 {
			return nil, fmt.Errorf("kubernetes.resources.%s %q: want a quantity like 500m, 1 or 1Gi", r.key, r.val)
		}
		p.limits[r.name] = q
	}
	if cfg.Storage.Mode == StoragePVC {
		q, err := resource.ParseQuantity(cfg.Storage.Size)
		if err != nil || q.Sign() <= 0 {
			return nil, fmt.Errorf("kubernetes.storage.size %q: want a quantity like 1Gi", cfg.Storage.Size)
		}
		p.size = q
	}
	p.env, p.keep = commandEnv(cfg)

	pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if _, err := cs.CoreV1().Pods(cfg.Namespace).List(pctx, metav1.ListOptions{Limit: 1}); err != nil {
		return nil, fmt.Errorf("kubernetes provider: namespace %s: %w", cfg.Namespace, apiError(err))
	}
	// Checked once the cluster answers, so that a missing cluster is said
	// first (doctor).
	if cfg.SupervisorImage == "" {
		return nil, errors.New("kubernetes.supervisor_image: required: an image with this server's supervisor daemon at /sandbox-mcp-supervisor (the server's own image, sandbox-mcp:<version>)")
	}
	if cfg.networkPolicy() {
		if err := p.ensureNetworkPolicy(pctx); err != nil {
			return nil, fmt.Errorf("kubernetes provider: network policy: %w", apiError(err))
		}
	}
	if rc != nil && agentSandboxInstalled(pctx, cs.Discovery()) {
		var err error
		if p.dyn, err = dynamic.NewForConfig(rc); err != nil {
			return nil, fmt.Errorf("kubernetes provider: %w", err)
		}
	}
	if cfg.Storage.Mode == StoragePVC {
		p.records = p.mayKeepRecords(pctx)
		switch {
		case !p.records && cfg.Warm > 0:
			return nil, fmt.Errorf("kubernetes.warm %d with storage.mode pvc: this server may not read or make Leases in namespace %s (its Role lacks deploy/kubernetes/rbac.yaml's coordination.k8s.io rule), where a thread's record names the claim it took from a warm Pod", cfg.Warm, cfg.Namespace)
		case !p.records:
			p.log.Warn("kubernetes provider: this server may not read or make Leases (its Role lacks deploy/kubernetes/rbac.yaml's coordination.k8s.io rule): threads get no records, and a thread that took a warm Pod's claim on a server with the rule is not found here")
		}
	}
	if cfg.Warm > 0 {
		p.pool = newPool(p, cfg.Warm)
		switch {
		case cfg.Storage.Mode == StoragePVC:
			// agent-sandbox's controller names its members, so a member
			// cannot be made with a claim of its own (setDefaults refuses
			// warm_pool agent-sandbox with pvc): auto keeps the server's
			// own warm Pods.
			if cfg.WarmPool == WarmPoolAuto && p.dyn != nil {
				p.log.Info("kubernetes provider: warm Pods are the server's own with storage.mode pvc (kubernetes.warm_pool auto)")
			}
		case cfg.WarmPool == WarmPoolAgentSandbox && p.dyn == nil:
			return nil, fmt.Errorf("kubernetes.warm_pool %s: the cluster does not serve the agent-sandbox CRDs (%s SandboxTemplate, SandboxWarmPool, SandboxClaim); install agent-sandbox with its extensions, or set warm_pool pods", cfg.WarmPool, claimGVR.GroupVersion())
		case cfg.WarmPool == WarmPoolAuto && p.dyn != nil && !mayUseAgentPools(pctx, p.dyn, cfg.Namespace):
			// A Role from before agent-sandbox (deploy/kubernetes/rbac.yaml's
			// extensions.agents.x-k8s.io rules missing): auto keeps the
			// server's own warm Pods rather than a pool that never fills.
			p.log.Warn("kubernetes provider: the agent-sandbox CRDs are installed, but this server may not list SandboxWarmPools (its Role lacks deploy/kubernetes/rbac.yaml's extensions.agents.x-k8s.io rules): warm Pods are the server's own (kubernetes.warm_pool auto)")
		case cfg.WarmPool != WarmPoolPods && p.dyn != nil:
			p.pool.src = newAgentPool(p.pool, p.dyn)
			p.log.Info("kubernetes provider: warm Pods from an agent-sandbox SandboxWarmPool", "pool", p.pool.src.(*agentPool).name, "warm", cfg.Warm)
		}
		go p.pool.run()
	}
	go p.reap()
	return p, nil
}

// commandEnv is the sandbox container's environment — the scrubbed basics,
// env_inherit from the server, kubernetes.environment — and the names a
// command keeps (everything else the runtime adds, such as
// KUBERNETES_SERVICE_HOST, is unset by the supervisor: --keep-env).
func commandEnv(cfg Config) ([]corev1.EnvVar, string) {
	env := cmdenv.Of(cfg.EnvInherit, cfg.Environment)
	names := []string{"PATH"}
	out := make([]corev1.EnvVar, 0, len(env))
	for k, v := range env {
		out = append(out, corev1.EnvVar{Name: k, Value: v})
		names = append(names, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	sort.Strings(names)
	return out, strings.Join(names, " ")
}

// Name is "kubernetes".
func (p *Provider) Name() string { return "kubernetes" }

// Namespace is where the sandbox Pods live.
func (p *Provider) Namespace() string { return p.cfg.Namespace }

// Image is the image sandbox Pods run.
func (p *Provider) Image() string { return p.cfg.Image }

// PodName is the Pod of a thread: <prefix>-<first 16 hex of
// sha256(thread)>. 64 bits make an accidental collision of two threads'
// names practically impossible (32 bits did not: t26821 and t49091 share
// their first 8 hex), and a name is never trusted alone: a Pod is a
// thread's only when its annotation names that thread (startPod).
func PodName(prefix, thread string) string {
	return prefix + "-" + threadHash(thread)
}

// threadHash is the first 16 hex of sha256(thread): the tail of its Pod's
// name, and the value of its Pods' thread label.
func threadHash(thread string) string {
	sum := sha256.Sum256([]byte(thread))
	return hex.EncodeToString(sum[:8])
}

// podNameOf is the name of thread key's Pod, whose claim (claimName) is
// the thread's in storage mode pvc: the one way every thread's Pod and
// claim are named (Acquire, Exists, Discard). host_path: the warm Pod the
// record in its directory names (warm.go), else PodName's. pvc: the Pod
// its record names (records.go), else PodName's.
func (p *Provider) podNameOf(ctx context.Context, key string) (string, error) {
	if p.cfg.Storage.Mode == StorageHostPath {
		if name := p.claimedPod(key); name != "" {
			return name, nil
		}
		return PodName(p.cfg.PodPrefix, key), nil
	}
	name, _, err := p.recorded(ctx, key)
	return name, err
}

// threadPod names thread key's Pod for a sandbox of it, giving the thread
// its storage when it has none: a warm Pod's, when one can be claimed,
// else its own — host_path: its directory, made here; pvc: its record,
// naming its own Pod name, whose claim its first Pod makes. Another
// replica's claim or first call meets this one at the directory or the
// record, and its Pod is then this one's.
func (p *Provider) threadPod(ctx context.Context, key string) (string, error) {
	if p.cfg.Storage.Mode == StoragePVC {
		// The record, and with a pool whether the thread has a claim from
		// before records, asked at once.
		unstored := make(chan bool, 1)
		if p.pool != nil {
			go func() { unstored <- p.unstored(ctx, key) }()
		}
		name, ok, err := p.recorded(ctx, key)
		if err != nil || ok {
			return name, err
		}
		if p.pool != nil && <-unstored {
			if claimed := p.pool.claim(ctx, key); claimed != "" {
				return claimed, nil
			}
		}
		return p.record(ctx, key, name)
	}
	claimed := ""
	if p.pool != nil && p.unstored(ctx, key) {
		claimed = p.pool.claim(ctx, key)
	}
	for _, d := range []string{sandbox.WorkspaceDir, sandbox.UploadsDir, sandbox.OutputsDir} {
		if err := p.makeThreadDir(filepath.Join(p.threadDir(key), filepath.Base(d))); err != nil {
			return "", fmt.Errorf("create thread %s: %w", key, errors.Unwrap(err))
		}
	}
	if claimed != "" {
		return claimed, nil
	}
	// Read once the thread's directory is there: a warm Pod another
	// replica claimed for it meanwhile is its Pod.
	return p.podNameOf(ctx, key)
}

// mounts are the mounts of every sandbox beside the thread's directories:
// skills, and the configured ones.
func (p *Provider) mounts() []sandbox.Mount {
	var mounts []sandbox.Mount
	if p.cfg.SkillsDir != "" {
		mounts = append(mounts, sandbox.Mount{Virtual: sandbox.SkillsDir, Host: p.cfg.SkillsDir, ReadOnly: true})
	}
	return append(mounts, p.cfg.Mounts...)
}

// threadDir is the node directory of a thread's files (host_path mode).
func (p *Provider) threadDir(key string) string {
	return filepath.Join(p.cfg.Storage.HostPath, "threads", filepath.FromSlash(key), "user-data")
}

// Acquire returns the thread's sandbox; its Pod is made on first use.
// In host_path mode the thread's directories are made here, owned by the
// Pods' user, when the node directory is visible to the server (a
// single-node cluster, or the server's Pod mounting it).
func (p *Provider) Acquire(ctx context.Context, thread string) (sandbox.Sandbox, error) {
	return p.threads.Acquire(thread, func() (*Sandbox, func(), error) {
		name, err := p.threadPod(ctx, thread)
		if err != nil {
			return nil, nil, err
		}
		var mounts []sandbox.Mount
		for _, d := range []string{sandbox.WorkspaceDir, sandbox.UploadsDir, sandbox.OutputsDir} {
			m := sandbox.Mount{Virtual: d}
			if p.cfg.Storage.Mode == StorageHostPath {
				m.Host = filepath.Join(p.threadDir(thread), filepath.Base(d))
			}
			mounts = append(mounts, m)
		}
		mounts = append(mounts, p.mounts()...)
		sb := newSandbox(p, thread, name, mounts)
		return sb, func() {
			sb.Close() // the channel ends; the Pod stays warm
			p.released(sb)
		}, nil
	})
}

// released: sb's thread is no longer held here. Its Pod's in-use
// annotation of this replica goes at once (replicas.Table.Publish) unless
// a call is still in flight, so that every replica may take it for the
// replicas cap from now on.
func (p *Provider) released(sb *Sandbox) { p.boxes.Publish(sb.name, sb.key) }

// makeThreadDir makes a thread directory owned by the Pods' user.
func (p *Provider) makeThreadDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if os.Geteuid() == 0 {
		for d := dir; d != p.cfg.Storage.HostPath && len(d) > len(p.cfg.Storage.HostPath); d = filepath.Dir(d) {
			if filepath.Base(d) == "threads" && filepath.Dir(d) == p.cfg.Storage.HostPath {
				break
			}
			if err := os.Lchown(d, int(p.cfg.User), int(p.cfg.User)); err != nil {
				return err
			}
		}
	}
	return nil
}

// boxStarted tells the metrics and the call's trace of a Pod made for a
// call, once it runs.
func (p *Provider) boxStarted(ctx context.Context, began time.Time) {
	supervised.BoxStarted(ctx, p.cfg.Metrics, p.Name(), began)
}

// RunningBoxes is how many Pods this replica knows running (the server's
// metrics: its own table, no call to the API server; a Pod another
// replica made and this one used counts in both).
func (p *Provider) RunningBoxes() int { return p.boxes.Running() }

// Release drops one user of the thread's sandbox. The Pod stays warm.
func (p *Provider) Release(thread string) { p.threads.Release(thread) }

// Exists says whether the thread has files: its claim (pvc mode), or its
// node directory (host_path mode, where the server sees it; where it does
// not, a thread has none the server could remove either).
func (p *Provider) Exists(ctx context.Context, thread string) (bool, error) {
	if err := sandbox.ValidThreadKey(thread); err != nil {
		return false, err
	}
	switch p.cfg.Storage.Mode {
	case StoragePVC:
		name, err := p.podNameOf(ctx, thread)
		if err != nil {
			return false, err
		}
		c, err := p.cs.CoreV1().PersistentVolumeClaims(p.cfg.Namespace).Get(ctx, claimName(name), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, apiError(err)
		}
		return c.DeletionTimestamp == nil && p.mine(c.ObjectMeta, "claim", thread) == nil, nil
	case StorageHostPath:
		_, err := os.Lstat(filepath.Dir(p.threadDir(thread)))
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		return err == nil, err
	}
	return false, nil
}

// Discard ends the thread's sandbox for good, whatever idle_timeout says:
// its Pod is deleted and waited for, so every process in it — its jobs
// too — has ended when it returns (SPEC §16: an anonymous thread takes its
// processes with it). No one can name the thread again, so its files go
// too: its claim and its record (pvc mode), or its node directory
// (host_path mode, where the server sees it). The server calls it when
// such a thread ends. Only objects whose annotation names the thread are
// deleted; a thread without a Pod is no error. It takes the thread's creation lock in this replica,
// so a first use racing it makes no Pod behind it; one after it makes a
// new one, as for any thread. A user still holding the thread (its last
// Release under way) is left alone: only its Pod goes.
func (p *Provider) Discard(ctx context.Context, thread string) error {
	if err := sandbox.ValidThreadKey(thread); err != nil {
		return err
	}
	name, err := p.podNameOf(ctx, thread)
	if err != nil {
		return err
	}
	unlock, err := p.locks.Lock(ctx, "pod\x00"+name)
	if err != nil {
		return err
	}
	defer unlock()
	p.forget(name)
	pod, err := p.cs.CoreV1().Pods(p.cfg.Namespace).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return apiError(err)
	case p.mine(pod.ObjectMeta, "Pod", thread) == nil:
		if err := p.deletePod(ctx, name, pod.UID); err != nil {
			return apiError(err)
		}
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		err := p.waitGone(wctx, name, pod.UID)
		cancel()
		if err != nil {
			return err
		}
		p.log.Info("kubernetes provider: Pod deleted (thread discarded)", "pod", name)
	}
	switch p.cfg.Storage.Mode {
	case StoragePVC:
		// The claim, then the record naming it: a Discard cut short
		// between the two leaves a record whose claim the thread's next
		// Pod makes again, empty, never a claim no record names.
		if err := p.deleteClaimOf(ctx, claimName(name), thread, ""); err != nil {
			return err
		}
		if err := p.deleteRecord(ctx, thread); err != nil {
			return err
		}
	case StorageHostPath:
		// Confined to <host_path>/threads (os.Root: no symlink leads out).
		root, err := os.OpenRoot(filepath.Join(p.cfg.Storage.HostPath, "threads"))
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("kubernetes provider: thread %s: %w", thread, err)
		}
		defer root.Close()
		if err := root.RemoveAll(filepath.FromSlash(thread)); err != nil {
			return fmt.Errorf("kubernetes provider: thread %s: %w", thread, err)
		}
	}
	return nil
}

// Close stops the reaper and, with RemoveOnExit, deletes the Pods this
// server used; otherwise they stay warm for any replica to use.
func (p *Provider) Close() error {
	select {
	case <-p.stop:
	default:
		close(p.stop)
		<-p.done
	}
	p.threads.Close()
	if p.pool != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		p.pool.close(ctx)
		cancel()
	}
	gone := p.boxes.Clear()
	if !p.cfg.RemoveOnExit {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, b := range gone {
		p.deletePod(ctx, b.Name, "")
	}
	return nil
}

// apiError says in one line that the API failed, and says clearly when the
// API server cannot be reached.
func apiError(err error) error {
	if err == nil {
		return nil
	}
	msg := strings.ReplaceAll(err.Error(), "\n", " ")
	for _, s := range []string{"connection refused", "no such host", "i/o timeout", "connection reset", "TLS handshake timeout", "dial tcp"} {
		if strings.Contains(msg, s) {
			return fmt.Errorf("kubernetes API server unavailable: %s", msg)
		}
	}
	var se apierrors.APIStatus
	if errors.As(err, &se) {
		return fmt.Errorf("kubernetes API: %s", msg)
	}
	return fmt.Errorf("kubernetes: %s", msg)
}
