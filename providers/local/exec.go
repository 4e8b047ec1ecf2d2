package local

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor/wire"
)

// command is how the thread's supervisor runs a shell command
// (supervised.Config.Command): its argv and working directory, and the
// directory of job logs, as the supervisor sees them — inside bubblewrap,
// where the virtual paths are real mount points; else on the host (only
// when AllowHostBash: Enter says so), with the command's virtual paths
// rewritten to host paths and the host directories. Each command runs in
// its own process group, with cwd the workspace and a scrubbed
// environment (the supervisor's own) — with req.Shell, the directory and
// exported variables the thread's last Shell command left (kept by the
// supervisor; on the host, a host path); when the shell exits, when the
// timeout fires or when ctx is cancelled, the whole group is killed, so
// background children cannot outlive the call or hold its pipe open, and
// children that left the group (setsid) are killed too once no command
// runs (the supervisor is their subreaper).
func (s *Sandbox) command(command string) (supervisor.Command, error) {
	if s.p.cfg.Isolation == IsolationBwrap {
		return supervisor.Command{Argv: []string{s.p.shell, "-c", command}, Dir: sandbox.WorkspaceDir, LogDir: sandbox.JobLogDir}, nil
	}
	for _, m := range s.mounts {
		if !shellSafe(m.Host) {
			return supervisor.Command{}, fmt.Errorf("%w: the host directory of %s has characters that need shell quoting, so virtual paths cannot be rewritten into commands; use a plainer path or bubblewrap isolation", sandbox.ErrBashDisabled, m.Virtual)
		}
	}
	c := supervisor.Command{Argv: []string{s.p.shell, "-c", rewrite(command, s.mounts)}, Dir: s.mounts[0].Host}
	for _, m := range s.mounts {
		if m.Virtual == sandbox.OutputsDir {
			c.LogDir = m.Host + strings.TrimPrefix(sandbox.JobLogDir, sandbox.OutputsDir)
		}
	}
	return c, nil
}

// dial starts the thread's supervisor, in the thread's cgroups where they
// can be made: the daemon found at start, inside bubblewrap (its link or
// copy in the state dir — instance.supervisorBinary — bound read-only at
// supervisorPath; whoever bash runs as there must be able to read it) or
// on the host.
func (s *Sandbox) dial(ctx context.Context) (*supervisor.Conn, error) {
	exe := s.p.inst.daemon.Path
	g, err := s.group()
	if err != nil {
		return nil, err
	}
	if s.p.cfg.Isolation != IsolationBwrap {
		cmd := exec.Command(exe, "supervise")
		cmd.Dir = s.mounts[0].Host
		cmd.Env = Env(s.p.cfg.EnvInherit, s.mounts[0].Host)
		if g != nil {
			g.Command(cmd)
		}
		return s.p.inst.start(ctx, cmd, true)
	}
	exe = s.p.inst.supervisorBinary()
	env := Env(s.p.cfg.EnvInherit, sandbox.WorkspaceDir)
	for i, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			env[i] = "PATH=" + sandboxPath(v)
		}
	}
	mounts := append(s.mounts[:len(s.mounts):len(s.mounts)], sandbox.Mount{Virtual: supervisorPath, Host: exe, ReadOnly: true})
	if g != nil {
		// bubblewrap has no /sys: the supervisor reads what the thread
		// uses, and its limits, from its cgroups bound read-only here
		// (sandbox_info, and an OOM kill's report).
		for i, d := range g.Dirs() {
			mounts = append(mounts, sandbox.Mount{Virtual: wire.BoundCgroups + "/" + strconv.Itoa(i), Host: d, ReadOnly: true})
		}
	}
	opts, command := bwrapArgs(mounts, s.p.cfg.Network, sandbox.WorkspaceDir, []string{supervisorPath, "supervise"})
	cmd, err := bwrapCommand(s.p.bwrap, opts, command, env)
	if err != nil {
		return nil, err
	}
	if g != nil {
		// bwrap, and so every process of the sandbox, starts in the
		// thread's cgroups.
		g.Command(cmd)
	}
	return s.p.inst.start(ctx, cmd, false)
}

// supervisorPath is where the supervisor's binary is bound in bubblewrap.
const supervisorPath = "/.sandbox-mcp/sandbox-mcp"

// shellSafe reports whether p can stand in a command unquoted.
func shellSafe(p string) bool {
	for _, c := range []byte(p) {
		if !(pathChar(c) || c == '+' || c == ',' || c == '@' || c == '%' || c == '=' || c == ':') {
			return false
		}
	}
	return true
}

// defaultPath is used when the server has no PATH.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Env is the scrubbed environment of a command: PATH, HOME (the
// workspace), LANG, TERM, TMPDIR, and the variables named in inherit that
// the server has. Nothing else of the server's environment — tokens, keys —
// reaches a command.
func Env(inherit []string, home string) []string {
	get := func(k, def string) string {
		if v, ok := os.LookupEnv(k); ok && v != "" {
			return v
		}
		return def
	}
	env := map[string]string{
		"PATH":   get("PATH", defaultPath),
		"HOME":   home,
		"LANG":   get("LANG", "C.UTF-8"),
		"TERM":   "dumb",
		"TMPDIR": "/tmp",
	}
	for _, k := range inherit {
		if v, ok := os.LookupEnv(k); ok {
			env[k] = v
		}
	}
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// rewrite replaces virtual paths in a command with their host paths,
// longest first, where a virtual path starts a path and ends at a component
// boundary ("/mnt/user-data-x" is left alone).
func rewrite(command string, mounts []sandbox.Mount) string {
	ms := append([]sandbox.Mount(nil), mounts...)
	sort.Slice(ms, func(i, j int) bool { return len(ms[i].Virtual) > len(ms[j].Virtual) })
	var b strings.Builder
	start := 0
	for i := 0; i < len(command); {
		j := strings.IndexByte(command[i:], '/')
		if j < 0 {
			break
		}
		i += j
		matched := false
		if i == 0 || !pathChar(command[i-1]) {
			for _, m := range ms {
				end := i + len(m.Virtual)
				if strings.HasPrefix(command[i:], m.Virtual) && (end == len(command) || !pathChar(command[end]) || command[end] == '/') {
					b.WriteString(command[start:i])
					b.WriteString(m.Host)
					i, start, matched = end, end, true
					break
				}
			}
		}
		if !matched {
			i++
		}
	}
	if start == 0 {
		return command
	}
	b.WriteString(command[start:])
	return b.String()
}

func pathChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-' || c == '/'
}

// userData is the thread's user-data as its supervisor sees it: the
// virtual path inside bubblewrap, else the host directory that holds the
// thread's workspace, uploads and outputs.
func (s *Sandbox) userData() string {
	if s.p.cfg.Isolation == IsolationBwrap {
		return sandbox.UserDataDir
	}
	return filepath.Dir(s.mounts[0].Host)
}
