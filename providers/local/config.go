package local

import (
	"fmt"
	"log/slog"

	"github.com/sandbox-mcp/sandbox-mcp/filelock"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// Config configures the provider. The fields with yaml keys are the config
// file's `local:` section; the rest comes from the server.
type Config struct {
	// Isolation is IsolationAuto, IsolationBwrap or IsolationNone (the
	// zero value; the config file's default is auto).
	Isolation     string `yaml:"isolation"`
	Network       bool   `yaml:"network"`         // bwrap: keep the host's network
	AllowHostBash bool   `yaml:"allow_host_bash"` // IsolationNone: run bash on the host, unisolated

	StateDir   string          `yaml:"-"` // threads live in <StateDir>/threads/<thread>
	SkillsDir  string          `yaml:"-"` // shown read-only at /mnt/skills when set
	Mounts     []sandbox.Mount `yaml:"-"` // custom mounts
	EnvInherit []string        `yaml:"-"` // variables passed on to commands
	Locks      *filelock.Locks `yaml:"-"` // per-file locks; shared with other providers of the process
	Logger     *slog.Logger    `yaml:"-"` // where the fall-back of auto is said
}

// Validate checks the config file's settings, naming the key that is wrong.
func (c *Config) Validate() error {
	switch c.Isolation {
	case "", IsolationAuto, IsolationBwrap, IsolationNone:
		return nil
	}
	return fmt.Errorf("local.isolation %q: want auto, bwrap or none", c.Isolation)
}
