package main

import (
	"context"
	"log/slog"

	"github.com/sandbox-mcp/sandbox-mcp/providers/local"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// newLocalProvider builds the local provider, bash isolated as
// cfg.Local.Isolation asks and this machine allows.
func newLocalProvider(cfg *Config, mounts []sandbox.Mount, log *slog.Logger) (sandbox.Provider, error) {
	lc := cfg.Local
	lc.StateDir, lc.SkillsDir, lc.Mounts, lc.EnvInherit, lc.Logger = cfg.StateDir, cfg.SkillsDir, mounts, cfg.EnvInherit, log
	p, err := local.New(lc)
	if err != nil {
		return nil, err
	}
	switch {
	case p.Isolation() == local.IsolationBwrap:
		log.Info("bash runs inside bubblewrap", "network", lc.Network)
	case lc.AllowHostBash:
		log.Warn("bash runs on the host, unisolated, as this user (--allow-host-bash)")
	default:
		log.Info("bash is off: no isolation and no --allow-host-bash")
	}
	return p, nil
}

// probeBwrap says whether bash can run in bubblewrap here.
func probeBwrap(ctx context.Context) error { return local.ProbeBwrap(ctx) }
