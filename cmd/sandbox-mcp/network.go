package main

import (
	"fmt"
	"log/slog"
	"strings"

	"github.com/sandbox-mcp/sandbox-mcp/audit"
	"github.com/sandbox-mcp/sandbox-mcp/egress"
	"github.com/sandbox-mcp/sandbox-mcp/tools"
)

// settleNetwork makes network.mode (SPEC §17) and the older keys of each
// provider (local.network, docker.network, kubernetes.network_policy)
// one setting: a mode left out is what the older key says (they keep
// working), a mode given sets them, and the two contradicting each other
// stops start-up naming both.
func (c *Config) settleNetwork() error {
	legacyOpen, legacyKey := false, ""
	switch c.Provider {
	case "local":
		legacyOpen, legacyKey = c.Local.Network, fmt.Sprintf("local.network %v", c.Local.Network)
	case "docker":
		legacyOpen, legacyKey = c.Docker.Network != "" && c.Docker.Network != "none", "docker.network "+c.Docker.Network
	case "kubernetes":
		if np := c.Kubernetes.NetworkPolicy; np != nil {
			legacyOpen, legacyKey = !*np, fmt.Sprintf("kubernetes.network_policy %v", *np)
		}
	}
	legacySet := legacyKey != "" && legacyKey != "local.network false" && legacyKey != "docker.network "
	mode := c.Network.Mode
	switch {
	case mode == "" && legacyOpen:
		mode = egress.ModeOpen
	case mode == "":
		mode = egress.ModeNone
	case legacySet && legacyOpen != (mode == egress.ModeOpen):
		return fmt.Errorf("network.mode %s contradicts %s: drop the older key", mode, legacyKey)
	}
	c.Network.Mode = mode
	if err := c.Network.Validate(); err != nil {
		return err
	}
	open := mode == egress.ModeOpen
	c.Local.Network = open
	switch {
	case !open:
		c.Docker.Network = "none"
	case c.Docker.Network == "":
		c.Docker.Network = "bridge"
	}
	policy := !open
	c.Kubernetes.NetworkPolicy = &policy
	return nil
}

// newEgress is the proxy every sandbox's connections go through in
// network.mode allowlist (nil in the other modes): its CA is made once
// under the state dir, its connections are audited to sink.
func newEgress(cfg *Config, sink audit.Sink, log *slog.Logger) (*egress.Proxy, error) {
	if cfg.Network.Mode != egress.ModeAllowlist {
		return nil, nil
	}
	p, err := egress.New(cfg.Network, egress.Options{StateDir: cfg.StateDir, Audit: sink, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("network: %w", err)
	}
	cfg.Local.Egress, cfg.Docker.Egress, cfg.Kubernetes.Egress = p, p, p
	var hosts []string
	for _, in := range cfg.Network.Inject {
		hosts = append(hosts, in.Host)
	}
	log.Info("network: allowlist — sandboxes reach only network.allow, through the server", "allow", len(cfg.Network.Allow), "inject", strings.Join(hosts, ","))
	return p, nil
}

// networkPolicy is the settled network policy as sandbox_info tells it.
func (c *Config) networkPolicy() tools.Network {
	return tools.Network{Mode: c.Network.Mode, Allow: c.Network.Allow}
}
