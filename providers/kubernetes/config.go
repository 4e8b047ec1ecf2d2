package kubernetes

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/sandbox-mcp/sandbox-mcp/providers/internal/supervised"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// Config configures the provider. The fields with yaml keys are the config
// file's `kubernetes:` section (SPEC §14, and the keys beyond it); zero
// values take the defaults. The rest comes from the server.
type Config struct {
	Kubeconfig   string            `yaml:"kubeconfig"` // default: in-cluster, else $KUBECONFIG, else ~/.kube/config
	Context      string            `yaml:"context"`    // kubeconfig context; default its current one
	Namespace    string            `yaml:"namespace"`  // default sandbox-mcp
	Image        string            `yaml:"image"`      // default sandbox-mcp-base:latest
	PodPrefix    string            `yaml:"pod_prefix"` // default sandbox-mcp
	Storage      Storage           `yaml:"storage"`
	Resources    Resources         `yaml:"resources"`
	RuntimeClass string            `yaml:"runtime_class"` // e.g. gvisor, kata; default the cluster's
	NodeSelector map[string]string `yaml:"node_selector"` // where sandbox Pods may run
	IdleTimeout  time.Duration     `yaml:"idle_timeout"`  // unused this long, a Pod is deleted; default 600 s, <0 never
	Replicas     int               `yaml:"replicas"`      // most Pods running at once; default 3, <0 no cap
	// NetworkPolicy: a NetworkPolicy denies the sandbox Pods all ingress
	// and egress (enforced where the network plugin enforces policies).
	// Unset: on.
	NetworkPolicy *bool             `yaml:"network_policy"`
	Environment   map[string]string `yaml:"environment"` // added to every command's environment
	// Warm is how many started Pods of these settings the replicas keep
	// for threads to come (warm.go); default 0, none; at most 64.
	Warm int `yaml:"warm"`
	// WarmPool says who keeps the warm Pods: auto (the default) uses the
	// agent-sandbox SandboxWarmPool and SandboxClaim where the cluster
	// serves their CRDs and storage is host_path, else pods; pods, this
	// server's own warm Pods (warm.go); agent-sandbox, those CRDs, or the
	// server does not start (agentsandbox.go; host_path storage only).
	WarmPool string `yaml:"warm_pool"`

	// Beyond §14.
	SupervisorImage string        `yaml:"supervisor_image"`  // required: this server's image (the supervisor daemon at /sandbox-mcp-supervisor), copied into every Pod by a container of it
	ImagePullPolicy string        `yaml:"image_pull_policy"` // Always, IfNotPresent (default) or Never; the supervisor image's too
	User            int64         `yaml:"user"`              // the Pods' uid and gid; default 1000; never 0
	WritableRootFS  bool          `yaml:"writable_root_fs"`  // default: read-only root file system, /tmp an emptyDir
	StartTimeout    time.Duration `yaml:"start_timeout"`     // Pod create -> Running; default 3 min
	RemoveOnExit    bool          `yaml:"remove_on_exit"`    // delete the Pods this server used when it stops

	StateDir   string          `yaml:"-"`
	SkillsDir  string          `yaml:"-"` // a node directory, mounted read-only at /mnt/skills
	Mounts     []sandbox.Mount `yaml:"-"` // node directories, mounted at their virtual paths
	EnvInherit []string        `yaml:"-"`
	Logger     *slog.Logger    `yaml:"-"`
	// Egress, if set, is every box's way out in network.mode allowlist
	// (supervised.Config.Egress); the box has no network of its own then.
	Egress supervised.Egress `yaml:"-"`
	// Metrics, if set, is told of each box started for a call (cold
	// starts, with how long they took).
	Metrics supervised.Metrics `yaml:"-"`
}

// Storage says where threads' files live.
type Storage struct {
	Mode         string `yaml:"mode"`          // pvc (default) or host_path
	StorageClass string `yaml:"storage_class"` // pvc: the claims' class; default the cluster's default class
	Size         string `yaml:"size"`          // pvc: default 1Gi
	HostPath     string `yaml:"host_path"`     // host_path: a node directory; threads under <HostPath>/threads
}

// Resources are every sandbox container's limits.
type Resources struct {
	CPU              string `yaml:"cpu"`               // default 1
	Memory           string `yaml:"memory"`            // default 1Gi
	EphemeralStorage string `yaml:"ephemeral_storage"` // default 1Gi
}

// networkPolicy reports whether the sandbox Pods get the deny-all policy.
func (c *Config) networkPolicy() bool { return c.NetworkPolicy == nil || *c.NetworkPolicy }

// Validate checks the config file's settings, naming the key of the first
// that is wrong, without reaching the cluster.
func (c Config) Validate() error {
	for _, v := range []struct {
		name string
		val  float64
	}{{"warm", float64(c.Warm)}, {"replicas", float64(c.Replicas)}, {"idle_timeout", c.IdleTimeout.Seconds()}, {"start_timeout", c.StartTimeout.Seconds()}} {
		if v.val < 0 {
			return fmt.Errorf("kubernetes.%s %v: want 0 (the default) or more", v.name, v.val)
		}
	}
	return setDefaults(&c)
}

// setDefaults fills what is unset and refuses a bad value, naming its key.
func setDefaults(cfg *Config) error {
	if cfg.Namespace == "" {
		cfg.Namespace = "sandbox-mcp"
	}
	if cfg.Image == "" {
		cfg.Image = "sandbox-mcp-base:latest"
	}
	if cfg.PodPrefix == "" {
		cfg.PodPrefix = "sandbox-mcp"
	}
	if !prefixRe.MatchString(cfg.PodPrefix) {
		return fmt.Errorf("kubernetes.pod_prefix %q: want lower-case letters, digits and '-', at most 44 characters", cfg.PodPrefix)
	}
	if cfg.Storage.Mode == "" {
		cfg.Storage.Mode = StoragePVC
	}
	switch cfg.Storage.Mode {
	case StoragePVC:
		if cfg.Storage.Size == "" {
			cfg.Storage.Size = "1Gi"
		}
	case StorageHostPath:
		if !filepath.IsAbs(cfg.Storage.HostPath) {
			return fmt.Errorf("kubernetes.storage.host_path %q: want an absolute node directory", cfg.Storage.HostPath)
		}
	default:
		return fmt.Errorf("kubernetes.storage.mode %q: want pvc or host_path", cfg.Storage.Mode)
	}
	if cfg.Warm < 0 {
		return fmt.Errorf("kubernetes.warm %d: want 0 (the default) or more", cfg.Warm)
	}
	if cfg.Warm > maxWarm {
		return fmt.Errorf("kubernetes.warm %d: at most %d", cfg.Warm, maxWarm)
	}
	switch cfg.WarmPool {
	case "":
		cfg.WarmPool = WarmPoolAuto
	case WarmPoolAuto, WarmPoolPods, WarmPoolAgentSandbox:
	default:
		return fmt.Errorf("kubernetes.warm_pool %q: want auto, pods or agent-sandbox", cfg.WarmPool)
	}
	if cfg.Warm > 0 && cfg.WarmPool == WarmPoolAgentSandbox && cfg.Storage.Mode != StorageHostPath {
		// A Pod's volumes are fixed when it is made: a warm Pod brings a
		// volume of its own, which its claim makes the thread's. The
		// server's own warm Pods are made with a claim each (records.go);
		// agent-sandbox's controller names its members, so none can be
		// made with a claim of its own name.
		return fmt.Errorf("kubernetes.warm_pool agent-sandbox: needs kubernetes.storage.mode host_path (storage.mode %s: agent-sandbox's Pods cannot bring a claim of their own); set warm_pool pods or auto", cfg.Storage.Mode)
	}
	if cfg.Resources.CPU == "" {
		cfg.Resources.CPU = "1"
	}
	if cfg.Resources.Memory == "" {
		cfg.Resources.Memory = "1Gi"
	}
	if cfg.Resources.EphemeralStorage == "" {
		cfg.Resources.EphemeralStorage = "1Gi"
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = 600 * time.Second
	}
	if cfg.Replicas == 0 {
		cfg.Replicas = 3
	}
	if cfg.ImagePullPolicy == "" {
		cfg.ImagePullPolicy = string(corev1.PullIfNotPresent)
	}
	switch corev1.PullPolicy(cfg.ImagePullPolicy) {
	case corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
	default:
		return fmt.Errorf("kubernetes.image_pull_policy %q: want Always, IfNotPresent or Never", cfg.ImagePullPolicy)
	}
	if cfg.User == 0 {
		cfg.User = 1000
	}
	if cfg.User < 0 {
		return fmt.Errorf("kubernetes.user %d: want a uid above 0", cfg.User)
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = 3 * time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}
