package docker

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"regexp"
	"time"

	units "github.com/docker/go-units"

	"github.com/sandbox-mcp/sandbox-mcp/filelock"
	"github.com/sandbox-mcp/sandbox-mcp/providers/internal/supervised"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// Config configures the provider. The fields with yaml keys are the
// config file's `docker:` section; zero values take the defaults of SPEC
// §8. The rest comes from the server.
type Config struct {
	Image           string            `yaml:"image"`            // default DefaultImage, pulled on first use
	Pull            string            `yaml:"pull"`             // PullMissing (default) or PullNever
	ContainerPrefix string            `yaml:"container_prefix"` // default sandbox-mcp
	Replicas        int               `yaml:"replicas"`         // most containers running; default 3, <0 no cap
	IdleTimeout     time.Duration     `yaml:"idle_timeout"`     // unused this long, a container goes; default 600 s, <0 never
	Network         string            `yaml:"network"`          // default none
	Memory          string            `yaml:"memory"`           // default 1g
	CPUs            float64           `yaml:"cpus"`             // default 1
	PidsLimit       int64             `yaml:"pids_limit"`       // default 512
	Environment     map[string]string `yaml:"environment"`      // added to every command's environment
	Runtime         string            `yaml:"runtime"`          // e.g. runsc; default the engine's
	User            string            `yaml:"user"`             // default: the image's, 1000:1000 where that is root; "root" only when set
	RemoveOnExit    bool              `yaml:"remove_on_exit"`   // remove this server's containers when it stops
	// Warm is how many started containers of these settings the server
	// keeps for threads to come (warm.go); default 0, none.
	Warm int `yaml:"warm"`
	// Channel is how the server reaches a container's supervisor: auto
	// (default: socket on the engine's own Linux host, exec elsewhere),
	// socket or exec (channel.go).
	Channel string `yaml:"channel"`
	// SupervisorBinary is a Linux build of sandbox-mcp for the engine's
	// architecture, bound into every container as its supervisor; default
	// this server's own binary (which must then be a Linux one: on macOS
	// and Windows set it to the release's linux build).
	SupervisorBinary string `yaml:"supervisor_binary"`

	StateDir   string          `yaml:"-"`
	SkillsDir  string          `yaml:"-"`
	Mounts     []sandbox.Mount `yaml:"-"`
	EnvInherit []string        `yaml:"-"`
	Locks      *filelock.Locks `yaml:"-"`
	Logger     *slog.Logger    `yaml:"-"`
	// Egress, if set, is every box's way out in network.mode allowlist
	// (supervised.Config.Egress); the box has no network of its own then.
	Egress supervised.Egress `yaml:"-"`
	// Metrics, if set, is told of each box started for a call (cold
	// starts, with how long they took).
	Metrics supervised.Metrics `yaml:"-"`

	connectTimeout time.Duration // how long one attempt to connect may take; default 15 s (tests shorten it)
}

var containerPrefixRe = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,100}$`)

// Validate checks the config file's settings, naming the key of the first
// that is wrong. A config file leaves a number at 0 for its default; the
// negative values a program may pass (no cap, never) are not for it.
func (c *Config) Validate() error {
	for _, v := range []struct {
		name string
		val  float64
	}{{"warm", float64(c.Warm)}, {"replicas", float64(c.Replicas)}, {"idle_timeout", c.IdleTimeout.Seconds()}, {"cpus", c.CPUs}, {"pids_limit", float64(c.PidsLimit)}} {
		if v.val < 0 {
			return fmt.Errorf("docker.%s %v: want 0 (the default) or more", v.name, v.val)
		}
	}
	if c.Warm > maxWarm {
		return fmt.Errorf("docker.warm %d: at most %d", c.Warm, maxWarm)
	}
	if c.Memory != "" {
		if _, err := units.RAMInBytes(c.Memory); err != nil {
			return fmt.Errorf("docker.memory %q: want a size like 512m or 1g", c.Memory)
		}
	}
	switch c.Pull {
	case "", PullMissing, PullNever:
	default:
		return fmt.Errorf("docker.pull %q: want missing (the default: pull an image the engine lacks) or never", c.Pull)
	}
	switch c.Channel {
	case "", channelAuto, channelSocket, channelExec:
	default:
		return fmt.Errorf("docker.channel %q: want auto, socket or exec", c.Channel)
	}
	if c.SupervisorBinary != "" && !filepath.IsAbs(c.SupervisorBinary) {
		return fmt.Errorf("docker.supervisor_binary %q: want an absolute path (MCP clients start servers in a directory of their own)", c.SupervisorBinary)
	}
	if c.ContainerPrefix != "" && !containerPrefixRe.MatchString(c.ContainerPrefix) {
		return fmt.Errorf("docker.container_prefix %q: want [a-zA-Z0-9][a-zA-Z0-9_.-]*", c.ContainerPrefix)
	}
	return nil
}

// setDefaults fills what is unset.
func setDefaults(cfg *Config) {
	if cfg.Image == "" {
		cfg.Image = DefaultImage
	}
	if cfg.ContainerPrefix == "" {
		cfg.ContainerPrefix = "sandbox-mcp"
	}
	if cfg.Replicas == 0 {
		cfg.Replicas = 3
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = 600 * time.Second
	}
	if cfg.Network == "" {
		cfg.Network = "none"
	}
	if cfg.Memory == "" {
		cfg.Memory = "1g"
	}
	if cfg.CPUs == 0 {
		cfg.CPUs = 1
	}
	if cfg.PidsLimit == 0 {
		cfg.PidsLimit = 512
	}
	if cfg.connectTimeout == 0 {
		cfg.connectTimeout = 15 * time.Second // a hung engine is a down one
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
}
