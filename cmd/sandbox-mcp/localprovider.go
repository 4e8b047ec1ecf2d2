package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/sandbox-mcp/sandbox-mcp/providers/local"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// newLocalProvider builds the local provider, bash isolated as
// cfg.Local.Isolation asks and this machine allows.
func newLocalProvider(ctx context.Context, cfg *Config, mounts []sandbox.Mount, log *slog.Logger) (sandbox.Provider, error) {
	isolation := local.IsolationNone
	switch cfg.Local.Isolation {
	case "bwrap":
		if err := local.ProbeBwrap(ctx); err != nil {
			return nil, fmt.Errorf("--isolation bwrap: %w", err)
		}
		isolation = local.IsolationBwrap
	case "auto":
		if err := local.ProbeBwrap(ctx); err != nil {
			log.Warn("bubblewrap isolation unavailable, bash falls back to isolation none", "reason", err.Error())
		} else {
			isolation = local.IsolationBwrap
		}
	}
	p, err := local.New(local.Config{
		StateDir:      cfg.StateDir,
		SkillsDir:     cfg.SkillsDir,
		Mounts:        mounts,
		Isolation:     isolation,
		Network:       cfg.Local.Network,
		AllowHostBash: cfg.Local.AllowHostBash,
		EnvInherit:    cfg.EnvInherit,
	})
	if err != nil {
		return nil, err
	}
	switch {
	case isolation == local.IsolationBwrap:
		log.Info("bash runs inside bubblewrap", "network", cfg.Local.Network)
	case cfg.Local.AllowHostBash:
		log.Warn("bash runs on the host, unisolated, as this user (--allow-host-bash)")
	default:
		log.Info("bash is off: no isolation and no --allow-host-bash")
	}
	return p, nil
}

// probeBwrap says whether bash can run in bubblewrap here.
func probeBwrap(ctx context.Context) error { return local.ProbeBwrap(ctx) }
