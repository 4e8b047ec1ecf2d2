package main

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

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
	case p.Isolation() == local.IsolationContainer:
		sign, _ := containerSign(os.LookupEnv)
		log.Info("bash runs in this container, unisolated from the server: the container is the sandbox (local.isolation container)", "container", sign)
	case lc.AllowHostBash:
		log.Warn("bash runs on the host, unisolated, as this user (--allow-host-bash)")
	default:
		log.Info("bash is off: no isolation and no --allow-host-bash")
		return p, nil
	}
	// SPEC §16: what bounds each thread's commands, or, in one line,
	// that nothing does.
	r := p.Limits()
	switch {
	case len(r.Missing) > 0 && p.Isolation() == local.IsolationContainer:
		// The container's own limits (docker run --memory, --pids-limit)
		// bound its commands, as they bound the server.
		log.Info("no cgroup of its own can be made in this container: its commands are bounded by the container's limits", "missing", strings.Join(r.Missing, ", "), "reason", r.Reason)
	case len(r.Missing) == 0:
		log.Info("each thread's commands are bounded", "limits", strings.Join(r.Holding, ", "), "by", r.Cgroup)
	case len(r.Holding) == 0:
		log.Warn("no cgroup can be made here: thread limits do not hold", "limits", strings.Join(r.Missing, ", "), "reason", r.Reason)
	default:
		log.Warn("some thread limits do not hold", "missing", strings.Join(r.Missing, ", "), "holding", strings.Join(r.Holding, ", "), "reason", r.Reason)
	}
	return p, nil
}

// checkLimits says which of the limits on each thread's commands
// (local.limits) hold here, making and removing cgroups as a start-up
// does; bashOn is whether the local provider would run bash at all.
func checkLimits(cfg *Config, bashOn bool) finding {
	const what = "thread limits (local provider)"
	if !bashOn {
		return finding{"info", what + ": bash is off, nothing to bound", ""}
	}
	r, err := local.ProbeLimits(cfg.Local.Limits)
	if err != nil {
		return finding{"FAIL", what, err.Error()}
	}
	return limitsFinding(r)
}

// limitsFinding is doctor's line on the thread limits that hold, or names
// those that do not.
func limitsFinding(r local.LimitsReport) finding {
	const what = "thread limits (local provider)"
	var where []string
	for _, d := range r.Dirs {
		where = append(where, filepath.Dir(d))
	}
	hint := "a fork storm or a memory hog in one thread can starve the others and the server;\n" +
		"run the server as root, or on cgroup v2 in a delegated cgroup (systemd-run --user -p Delegate=yes --scope sandbox-mcp ...)"
	switch {
	case len(r.Missing) == 0:
		return finding{"ok", what + ": " + strings.Join(r.Holding, ", ") + " (" + r.Cgroup + ")",
			"each thread's commands together, in cgroups under " + strings.Join(where, ", ") + "\nset with local.limits: {pids, memory, cpu}"}
	case len(r.Holding) == 0:
		return finding{"warn", "thread limits that do not hold: " + strings.Join(r.Missing, ", "),
			"no cgroup can be made here: " + r.Reason + "\n" + hint}
	default:
		return finding{"warn", "thread limits that do not hold: " + strings.Join(r.Missing, ", "),
			strings.Join(r.Holding, ", ") + " hold (" + r.Cgroup + "); the others do not: " + r.Reason + "\n" + hint}
	}
}

// containerSign says what shows that this process runs in a container —
// the files Docker and Podman put at the root, the variable Podman,
// systemd-nspawn and LXC set, the one Kubernetes sets in every Pod — and
// whether anything does. local.isolation container is refused without
// one: on a host it would be --allow-host-bash under another name.
func containerSign(lookup func(string) (string, bool)) (string, bool) {
	return containerSignOf(lookup, func(f string) bool { _, err := os.Stat(f); return err == nil })
}

func containerSignOf(lookup func(string) (string, bool), exists func(string) bool) (string, bool) {
	for _, f := range []string{"/.dockerenv", "/run/.containerenv"} {
		if exists(f) {
			return f, true
		}
	}
	for _, v := range []string{"container", "KUBERNETES_SERVICE_HOST"} {
		if s, ok := lookup(v); ok && s != "" {
			return "$" + v, true
		}
	}
	return "", false
}

// probeBwrap says whether bash can run in bubblewrap here.
func probeBwrap(ctx context.Context) error { return local.ProbeBwrap(ctx) }
