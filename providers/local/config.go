package local

import (
	"fmt"
	"log/slog"
	"math"
	"runtime"

	"github.com/docker/go-units"
	"github.com/sandbox-mcp/sandbox-mcp/filelock"
	"github.com/sandbox-mcp/sandbox-mcp/providers/internal/cgroups"
	"github.com/sandbox-mcp/sandbox-mcp/providers/internal/supervised"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// Config configures the provider. The fields with yaml keys are the config
// file's `local:` section; the rest comes from the server.
type Config struct {
	// Isolation is IsolationAuto, IsolationBwrap, IsolationContainer or
	// IsolationNone (the zero value; the config file's default is auto).
	Isolation     string `yaml:"isolation"`
	Network       bool   `yaml:"network"`         // bwrap: keep the host's network
	AllowHostBash bool   `yaml:"allow_host_bash"` // IsolationNone: run bash on the host, unisolated
	Limits        Limits `yaml:"limits"`          // what each thread's commands may use

	StateDir   string          `yaml:"-"` // threads live in <StateDir>/threads/<thread>
	SkillsDir  string          `yaml:"-"` // shown read-only at /mnt/skills when set
	Mounts     []sandbox.Mount `yaml:"-"` // custom mounts
	EnvInherit []string        `yaml:"-"` // variables passed on to commands
	Locks      *filelock.Locks `yaml:"-"` // per-file locks; shared with other providers of the process
	Logger     *slog.Logger    `yaml:"-"` // where the fall-back of auto is said
	// Egress, if set, is every box's way out in network.mode allowlist
	// (supervised.Config.Egress); the box has no network of its own then.
	Egress supervised.Egress `yaml:"-"`
	// Metrics, if set, is told of each box started for a call (cold
	// starts, with how long they took).
	Metrics supervised.Metrics `yaml:"-"`

	shells []string // the shells looked for outside bubblewrap, first found wins; nil: bash's and sh's usual paths (tests)
}

// Limits bound each thread's commands together, as a container's are
// bounded (SPEC §16), with the kernel's cgroups; zero values take the
// defaults.
type Limits struct {
	Pids   int64   `yaml:"pids"`   // processes (and threads) at once; default 1024
	Memory string  `yaml:"memory"` // memory, swap included, as docker.memory ("512m", "4g"); default 4g
	CPU    float64 `yaml:"cpu"`    // CPUs' worth of time; default the host's CPUs
}

// Default limits (SPEC §16); CPU's is the host's CPUs.
const (
	DefaultPids   = 1024
	DefaultMemory = "4g"
)

// minMemory is the least local.limits.memory: a thread's supervisor and
// bash take about 15 MiB of it.
const minMemory = 32 << 20

// Validate checks the config file's settings, naming the key that is wrong.
func (c *Config) Validate() error {
	switch c.Isolation {
	case "", IsolationAuto, IsolationBwrap, IsolationNone, IsolationContainer:
	default:
		return fmt.Errorf("local.isolation %q: want auto, bwrap, none or container", c.Isolation)
	}
	_, err := c.Limits.resolve()
	return err
}

// resolve is the limits in numbers, defaults filled, or the error naming
// the key of the first that is wrong.
func (l Limits) resolve() (cgroups.Limits, error) {
	out := cgroups.Limits{Pids: l.Pids, CPU: l.CPU}
	if l.Pids < 0 {
		return out, fmt.Errorf("local.limits.pids %d: want 0 (the default, %d) or more", l.Pids, DefaultPids)
	}
	if out.Pids == 0 {
		out.Pids = DefaultPids
	}
	mem := l.Memory
	if mem == "" {
		mem = DefaultMemory
	}
	n, err := units.RAMInBytes(mem)
	if err != nil || n < minMemory {
		return out, fmt.Errorf("local.limits.memory %q: want a size like 512m or 4g, at least 32m", l.Memory)
	}
	out.Memory = n
	if math.IsNaN(l.CPU) || math.IsInf(l.CPU, 0) || l.CPU < 0 || l.CPU > 0 && l.CPU < 0.01 {
		return out, fmt.Errorf("local.limits.cpu %v: want 0 (the default, the host's CPUs) or 0.01 or more", l.CPU)
	}
	if out.CPU == 0 {
		out.CPU = float64(runtime.NumCPU())
	}
	return out, nil
}
