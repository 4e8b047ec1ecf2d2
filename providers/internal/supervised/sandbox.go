package supervised

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/hostfs"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor"
)

// Box is a provider's box as its Sandbox uses it: what only the provider
// knows — how to make or reach the box, how to keep it from its reaper
// while a call runs, and how to end it when its supervisor does not
// answer.
type Box interface {
	// Dial starts the box's supervisor, or reaches the one that runs —
	// making or starting the box when it does not run — and returns a
	// channel to it (the Link's dialer).
	Dial(ctx context.Context) (*supervisor.Conn, error)
	// Enter readies the box for one call — it runs, and it is marked
	// busy so that no reaper takes it — until done is called; or says
	// why no call may run.
	Enter(ctx context.Context) (done func(), err error)
	// Unresponsive is told, while the call still holds the box, that its
	// supervisor did not end a command it was told to
	// (supervisor.ErrUnresponsive; the link has dropped the channel):
	// the provider's last resort, which ends every process in the box.
	Unresponsive()
}

// Config is what a provider says of one thread's box.
type Config struct {
	Thread string
	// Mounts are the virtual directories backed by host directories (the
	// server masks their host paths out of what the agent sees); the box's
	// file system refuses writes to a read-only one.
	Mounts []sandbox.Mount
	// Host serves the thread's directories on the host (hostfs.FS.Serves),
	// whatever runs in the box; every other path is the box's own file
	// system, served by its supervisor. Nil: the box serves every path.
	// The Sandbox closes it.
	Host *hostfs.FS
	// HostOnly: Host serves every path — the box has no files of its own
	// for the agent (local: its supervisor runs on the host, or in
	// bubblewrap over the host's root).
	HostOnly bool
	// Image names the box's image in the error of a box without a shell.
	Image string
	// Command is how the box's supervisor runs a command (local: its own
	// shell, or on the host a command whose virtual paths are rewritten);
	// nil: the shell the supervisor found in the box (its hello), in the
	// workspace, jobs' logs in sandbox.JobLogDir.
	Command func(command string) (supervisor.Command, error)
	// JobStarted, if set, is told when a command may have become a job
	// (StartJob, or Exec's YieldAfter).
	JobStarted func()
	// Egress, if set, is the box's way out (network.mode allowlist): its
	// commands get the proxy's variables, its connections are served by
	// the server (network.go).
	Egress Egress
	// Name and Provider name the box in the audit lines of its
	// connections (and in sandbox_info).
	Name, Provider string
	// UserData is sandbox.UserDataDir as the box's supervisor sees it
	// (whose files sandbox_info counts); "": sandbox.UserDataDir.
	UserData string
	// Checkpoints, if set, places the thread's checkpoints on the host
	// (checkpoints.go); nil: the box's supervisor keeps them.
	Checkpoints *CheckpointConfig
}

// Sandbox is a thread's sandbox.Sandbox and sandbox.Jobs over its box's
// supervisor link.
type Sandbox struct {
	cfg   Config
	box   Box
	link  *supervisor.Link
	boxFS *supervisor.FS // the box's own files; nil with HostOnly
	net   network        // the proxy listener's variables (network.go)
	host  hostStore      // the thread's checkpoint store, with Config.Checkpoints (checkpoints_host.go)
}

var (
	_ sandbox.Sandbox = (*Sandbox)(nil)
	_ sandbox.Jobs    = (*Sandbox)(nil)
)

// New returns the sandbox of box, whose supervisor is dialed on first use.
func New(box Box, cfg Config) *Sandbox {
	s := &Sandbox{cfg: cfg, box: box}
	s.net.ctx, s.net.cancel = context.WithCancel(context.Background())
	s.link = supervisor.NewLink(s.dial)
	if !cfg.HostOnly {
		s.boxFS = supervisor.NewFS(s.link, s.readOnly)
	}
	return s
}

// Link is the channel to the box's supervisor.
func (s *Sandbox) Link() *supervisor.Link { return s.link }

// Close ends the channel (the box and its supervisor are the provider's
// to end) and closes Host.
func (s *Sandbox) Close() {
	s.link.Close()
	s.net.cancel()
	s.closeCheckpoints()
	if s.cfg.Host != nil {
		s.cfg.Host.Close()
	}
}

// Thread is the thread key.
func (s *Sandbox) Thread() string { return s.cfg.Thread }

// Mounts lists the host-backed virtual directories.
func (s *Sandbox) Mounts() []sandbox.Mount { return s.cfg.Mounts }

// Exec runs the command through the box's supervisor: in its own process
// group, in the workspace (with req.Shell, in the shell state the
// supervisor keeps), under the timeout the supervisor enforces; a
// cancelled ctx kills the group. The box is busy meanwhile. If the
// supervisor does not end a command it was told to (stopped, hung), the
// box's remedy ends every process in it (Box.Unresponsive). In a traced
// call it is a span of the call (trace.go), the box's start within it.
func (s *Sandbox) Exec(ctx context.Context, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
	ctx, span := childSpan(ctx, spanExec)
	res, err := s.exec(ctx, req)
	endExec(span, res, err)
	return res, err
}

func (s *Sandbox) exec(ctx context.Context, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
	done, err := s.box.Enter(ctx)
	if err != nil {
		return sandbox.ExecResult{}, err
	}
	defer done()
	c, err := s.command(ctx, req.Command)
	if err != nil {
		return sandbox.ExecResult{}, err
	}
	env, err := s.withEgress(ctx, req.Env)
	if err != nil {
		return sandbox.ExecResult{}, err
	}
	res, err := s.link.Exec(ctx, supervisor.ExecRequest{Argv: c.Argv, Dir: c.Dir, Timeout: req.Timeout, Output: req.Output,
		YieldAfter: req.YieldAfter, Shell: req.Shell, ResetState: req.ResetState, Env: env, Jobs: req.Jobs, LogDir: c.LogDir, Stdin: req.Stdin})
	if errors.Is(err, supervisor.ErrUnresponsive) {
		s.box.Unresponsive()
	}
	if res.Job != "" {
		s.jobStarted()
	}
	return res, err
}

// command is how the box's supervisor runs command (boxCommand).
func (s *Sandbox) command(ctx context.Context, command string) (supervisor.Command, error) {
	if s.cfg.Command != nil {
		return s.cfg.Command(command)
	}
	c, err := s.link.Conn(ctx)
	if err != nil {
		return supervisor.Command{}, err
	}
	shell := c.Hello().Shell
	if shell == "" {
		return supervisor.Command{}, fmt.Errorf("bash needs a shell (sh) in the image %s; read_file and write_file still work", s.cfg.Image)
	}
	return boxCommand(shell, command), nil
}

// boxCommand is how a box's supervisor runs command with the box's shell,
// in the workspace. $0 is "bash", as for bash -c, whatever the shell: it
// prefixes the shell's error messages.
func boxCommand(shell, command string) supervisor.Command {
	return supervisor.Command{Argv: []string{shell, "-c", command, "bash"}, Dir: sandbox.WorkspaceDir, LogDir: sandbox.JobLogDir}
}

// WarmShell runs, through c, the channel to a box that belongs to no
// thread yet (a warm one), the bash tool's `true` as a thread's first call
// runs it (boxCommand, in the shell state), so that the claiming thread's
// first command finds what a thread's second one does: the shell's files
// read through the image's file system once, the supervisor's cgroups
// found, and a spare shell started from the state that command left — the
// box's initial one: the workspace and the supervisor's own environment,
// nothing of any thread (supervisor/daemon/spare.go). A box without a
// shell, or a failure, leaves it as it was: its first command starts
// afresh. (With network by policy the thread's commands carry its proxy's
// environment: the spare does not fit them, the files read still help.)
func WarmShell(ctx context.Context, c *supervisor.Conn) {
	shell := c.Hello().Shell
	if shell == "" {
		return
	}
	cmd := boxCommand(shell, "true")
	c.Exec(ctx, supervisor.ExecRequest{Argv: cmd.Argv, Dir: cmd.Dir, Timeout: 30 * time.Second, Output: io.Discard, Shell: true})
}

func (s *Sandbox) jobStarted() {
	if s.cfg.JobStarted != nil {
		s.cfg.JobStarted()
	}
}

// readOnly reports whether name lies in a read-only mount (the longest
// mount that holds it says).
func (s *Sandbox) readOnly(name string) bool {
	var best *sandbox.Mount
	for i, m := range s.cfg.Mounts {
		if sandbox.Within(name, m.Virtual) && (best == nil || len(m.Virtual) > len(best.Virtual)) {
			best = &s.cfg.Mounts[i]
		}
	}
	return best != nil && best.ReadOnly
}
