package local

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/filelock"
	"github.com/sandbox-mcp/sandbox-mcp/hostfs"
	"github.com/sandbox-mcp/sandbox-mcp/providers/internal/cgroups"
	"github.com/sandbox-mcp/sandbox-mcp/providers/internal/supervised"
	"github.com/sandbox-mcp/sandbox-mcp/providers/internal/threads"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor"
)

// Provider hands out host-backed sandboxes.
type Provider struct {
	cfg    Config
	shell  string
	bwrap  string         // bwrap's path, with IsolationBwrap
	limits cgroups.Limits // cfg.Limits, defaults filled
	inst   *instance      // the cgroups and binary of the threads' supervisors; nil when bash is off

	threads threads.Table[*Sandbox]
}

var _ sandbox.Provider = (*Provider)(nil)

// New checks the configuration and returns a provider.
func New(cfg Config) (*Provider, error) {
	if cfg.StateDir == "" {
		return nil, errors.New("local provider: no state dir")
	}
	if cfg.Locks == nil {
		locks, err := filelock.NewFileLocks(filepath.Join(cfg.StateDir, "locks"))
		if err != nil {
			return nil, fmt.Errorf("local provider: %w", err)
		}
		cfg.Locks = locks
	}
	shell := findShell(cfg.shells)
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("local provider: %w", err)
	}
	limits, _ := cfg.Limits.resolve()
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &Provider{cfg: cfg, shell: shell, limits: limits}
	switch cfg.Isolation {
	case "", IsolationNone:
		p.cfg.Isolation = IsolationNone
	case IsolationAuto:
		p.cfg.Isolation = IsolationNone
		if err := ProbeBwrap(context.Background()); err != nil {
			log.Warn("bubblewrap isolation unavailable, bash falls back to isolation none", "reason", err.Error())
			break
		}
		p.cfg.Isolation = IsolationBwrap
	case IsolationBwrap:
		if err := ProbeBwrap(context.Background()); err != nil {
			return nil, fmt.Errorf("local.isolation bwrap: %w", err)
		}
	}
	// An allowlist holds only where the commands have no network of their
	// own: in bubblewrap's network namespace. On the host, or in the
	// server's own container, they would have the server's.
	if cfg.Egress != nil && p.cfg.Isolation != IsolationBwrap && p.BashDisabled() == nil {
		return nil, fmt.Errorf("network.mode allowlist: the local provider enforces it only with bubblewrap, and bash would run with isolation %s (the host's network): use local.isolation bwrap", p.cfg.Isolation)
	}
	if cfg.Egress != nil && cfg.Network {
		return nil, errors.New("network.mode allowlist: local.network true would give bubblewrap the host's network")
	}
	if p.cfg.Isolation != IsolationBwrap && p.BashDisabled() == nil {
		if err := p.cfg.CheckShell(); err != nil {
			return nil, fmt.Errorf("local provider: %w", err)
		}
	}
	if p.shell == "" {
		p.shell = "/bin/sh" // bubblewrap's probe ran it; or bash is off
	}
	if p.cfg.Isolation == IsolationBwrap {
		bin, err := exec.LookPath("bwrap")
		if err != nil {
			return nil, errors.New("local.isolation bwrap: bwrap not found on PATH")
		}
		p.bwrap = bin
	}
	if p.BashDisabled() == nil {
		inst, err := newInstance(cfg.StateDir, limits, log)
		if err != nil {
			return nil, fmt.Errorf("local provider: %w", err)
		}
		p.inst = inst
	}
	return p, nil
}

// findShell is the shell commands run with outside bubblewrap: bash where
// there is one, else sh; "" when there is neither.
func findShell(candidates []string) string {
	if candidates == nil {
		candidates = []string{"/bin/bash", "/usr/bin/bash", "/bin/sh"}
	}
	for _, s := range candidates {
		if _, err := os.Stat(s); err == nil {
			return s
		}
	}
	return ""
}

// CheckShell says when bash, run outside bubblewrap (isolation container,
// or none with AllowHostBash), would find no shell to run it — a
// container image FROM scratch — naming what is missing and the setting
// that asked for bash, rather than "no such file or directory" at the
// first command.
func (c Config) CheckShell() error {
	if findShell(c.shells) != "" {
		return nil
	}
	where, setting := "on this host", "--allow-host-bash"
	if c.Isolation == IsolationContainer {
		where, setting = "in this image", "local.isolation container"
	}
	return fmt.Errorf("no /bin/sh %s: bash needs /bin/sh or /bin/bash (%s); use an image with a shell, or drop the setting for the file tools alone", where, setting)
}

// Isolation is how bash runs: IsolationBwrap, IsolationContainer or
// IsolationNone ("auto" resolved).
func (p *Provider) Isolation() string { return p.cfg.Isolation }

// BashDisabled says why the provider will not run bash in its
// configuration — no isolation and no AllowHostBash — or nil. The server
// then does not offer bash at all.
func (p *Provider) BashDisabled() error {
	if p.cfg.Isolation != IsolationBwrap && p.cfg.Isolation != IsolationContainer && !p.cfg.AllowHostBash {
		return fmt.Errorf("%w: bubblewrap isolation is off, and the local provider runs bash on the host only with --allow-host-bash (config local.allow_host_bash: true)", sandbox.ErrBashDisabled)
	}
	return nil
}

// Name is "local".
func (p *Provider) Name() string { return "local" }

// ThreadDir is the host directory of a thread's user data.
func ThreadDir(stateDir, thread string) string { return sandbox.ThreadDir(stateDir, thread) }

// Acquire returns the thread's sandbox, creating its directories on first use.
func (p *Provider) Acquire(ctx context.Context, thread string) (sandbox.Sandbox, error) {
	return p.threads.Acquire(thread, func() (*Sandbox, func(), error) {
		owner := -1
		if p.cfg.Isolation == IsolationBwrap {
			owner = sandboxUID // commands run as nobody when the server is root
		}
		mounts, err := sandbox.ThreadMounts(p.cfg.StateDir, thread, p.cfg.SkillsDir, p.cfg.Mounts, owner, owner)
		if err != nil {
			return nil, nil, fmt.Errorf("thread %s: %w", thread, err)
		}
		hfs, err := hostfs.Open(mounts, p.cfg.Locks)
		if err != nil {
			return nil, nil, fmt.Errorf("open thread %s: %w", thread, err)
		}
		sb := &Sandbox{p: p, thread: thread, mounts: mounts}
		sb.Sandbox = supervised.New(sb, supervised.Config{Thread: thread, Mounts: mounts, Host: hfs, HostOnly: true,
			Command: sb.command, JobStarted: sb.holdForJobs, Egress: p.cfg.Egress, Name: "local", Provider: "local", UserData: sb.userData(), Checkpoints: supervised.HostCheckpoints(p.cfg.StateDir, thread)})
		return sb, sb.close, nil
	})
}

// RunningBoxes is how many of the threads' supervisors run (the server's
// metrics).
func (p *Provider) RunningBoxes() int {
	n := 0
	for _, sb := range p.threads.All() {
		if sb.Link().Connected() {
			n++
		}
	}
	return n
}

// Release drops one user of the thread's sandbox; the last one closes it.
func (p *Provider) Release(thread string) { p.threads.Release(thread) }

// Exists says whether the thread has a directory under the state dir.
func (p *Provider) Exists(_ context.Context, thread string) (bool, error) {
	return sandbox.ThreadExists(p.cfg.StateDir, thread)
}

// Discard ends the thread for good and removes its files
// (<state>/threads/<key>). Its sandbox lives while it is held: after its
// last Release only a running job holds it (linger.go), so its jobs are
// killed and the sandbox's end awaited — its supervisor and every process
// with it — before the files go. A user still holding the thread is
// waited for, as long as ctx allows.
func (p *Provider) Discard(ctx context.Context, thread string) error {
	if err := sandbox.ValidThreadKey(thread); err != nil {
		return err
	}
	if sb, ended, held := p.threads.Held(thread); held {
		killed := sandbox.EndJobs(ctx, sb)
		p.threads.Release(thread)
		select {
		case <-ended:
		case <-ctx.Done():
			return fmt.Errorf("local provider: thread %s still in use: %w", thread, errors.Join(ctx.Err(), killed))
		}
	}
	if err := sandbox.RemoveThread(p.cfg.StateDir, thread); err != nil {
		return fmt.Errorf("local provider: thread %s: %w", thread, err)
	}
	return nil
}

// Close closes every sandbox, then removes the provider's cgroups.
func (p *Provider) Close() error {
	p.threads.Close()
	if p.inst != nil {
		if err := p.inst.close(); err != nil {
			return fmt.Errorf("local provider: %w", err)
		}
	}
	return nil
}

// Sandbox is one thread's host-backed sandbox: its files served on the
// host (hostfs), its commands and jobs run by the thread's supervisor —
// started on first use and kept until the thread is released — inside
// bubblewrap when the provider isolates, else on the host (command).
type Sandbox struct {
	*supervised.Sandbox
	p      *Provider
	thread string
	mounts []sandbox.Mount
	linger linger // a running job keeps the sandbox (linger.go)

	cgMu     sync.Mutex
	cg       *cgroups.Group // bounds the supervisor and its commands; made on the first dial
	cgClosed bool           // the sandbox ended: no cgroup is made any more
}

var (
	_ sandbox.Sandbox = (*Sandbox)(nil)
	_ sandbox.Jobs    = (*Sandbox)(nil)
)

// close ends the sandbox: its supervisor, with every process it runs, its
// files' handles and its cgroups.
func (s *Sandbox) close() {
	s.Sandbox.Close()
	s.cgMu.Lock()
	g := s.cg
	s.cg, s.cgClosed = nil, true
	s.cgMu.Unlock()
	if err := g.Remove(); err != nil && s.p.cfg.Logger != nil {
		s.p.cfg.Logger.Warn("a thread's cgroup cannot be removed", "err", err.Error())
	}
}

// Dial starts the thread's supervisor (supervised.Box: dial): each dial
// is a box started, for the metrics and the call's trace.
func (s *Sandbox) Dial(ctx context.Context) (*supervisor.Conn, error) {
	if sandbox.OnlyIfRunning(ctx) {
		// No channel: no supervisor runs (it ends with its channel).
		return nil, sandbox.ErrNotRunning
	}
	began := time.Now()
	c, err := s.dial(ctx)
	if err == nil {
		supervised.BoxStarted(ctx, s.p.cfg.Metrics, s.p.Name(), began)
	}
	return c, err
}

// Enter readies the sandbox for a command or job call
// (supervised.Box): it says why commands do not run here, if they do not,
// so that the job calls do not start a supervisor on the host only to
// find no job. Nothing reaps a thread's supervisor while it is held.
func (s *Sandbox) Enter(context.Context) (func(), error) { return func() {}, s.p.BashDisabled() }

// Unresponsive does nothing more (supervised.Box): the link dropped the
// channel, and with it the supervisor's process ended (and bubblewrap's
// namespace), with every process in it.
func (s *Sandbox) Unresponsive() {}
