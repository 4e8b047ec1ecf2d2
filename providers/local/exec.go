package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// drainGrace is how long output may still arrive after a command's process
// group was killed; a process that left the group (setsid) and holds the
// pipe is cut off after it.
const drainGrace = 2 * time.Second

// Exec runs the command with bash, in its own process group, with cwd the
// workspace and a scrubbed environment: inside bubblewrap when the provider
// isolates, else on the host — only when AllowHostBash — with the virtual
// paths of the command rewritten to host paths. When the shell exits, when
// the timeout fires or when ctx is cancelled, the whole group is killed, so
// background children cannot outlive the call or hold its pipe open; on the
// host, children that left the group (setsid) too, through the reaper
// (reaper_linux.go).
func (s *Sandbox) Exec(ctx context.Context, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
	if s.p.cfg.Isolation == IsolationBwrap {
		return s.execBwrap(ctx, req)
	}
	if err := s.p.BashDisabled(); err != nil {
		return sandbox.ExecResult{}, err
	}
	for _, m := range s.mounts {
		if !shellSafe(m.Host) {
			return sandbox.ExecResult{}, fmt.Errorf("%w: the host directory of %s has characters that need shell quoting, so virtual paths cannot be rewritten into commands; use a plainer path or bubblewrap isolation", sandbox.ErrBashDisabled, m.Virtual)
		}
	}
	cmd := exec.Command(s.p.shell, "-c", rewrite(req.Command, s.mounts))
	reaper, prefix := reaperCommand()
	if prefix != nil { // children that leave the group die with the call too
		cmd.Path, cmd.Args = reaper, append(prefix, cmd.Args...)
	}
	cmd.Dir = s.mounts[0].Host
	cmd.Env = Env(s.p.cfg.EnvInherit, s.mounts[0].Host)
	return runGroup(ctx, req, cmd, prefix != nil)
}

// shellSafe reports whether p can stand in a command unquoted.
func shellSafe(p string) bool {
	for _, c := range []byte(p) {
		if !(pathChar(c) || c == '+' || c == ',' || c == '@' || c == '%' || c == '=' || c == ':') {
			return false
		}
	}
	return true
}

// reaperGrace is how long a reaper asked to stop may take to kill what
// the command left before its group is killed the blunt way.
const reaperGrace = 5 * time.Second

// runGroup runs cmd in its own process group and feeds its interleaved
// stdout and stderr to req.Output. When reaped, cmd is the host-bash reaper
// (reaper_linux.go): a timeout or a cancellation asks it to stop with
// SIGTERM (and SIGCONT), so that it kills what left the group before it
// exits, instead of killing it with its group. Whenever cmd ends — a
// reaper too, even one the command killed early — its group is killed
// at once.
func runGroup(ctx context.Context, req sandbox.ExecRequest, cmd *exec.Cmd, reaped bool) (sandbox.ExecResult, error) {
	pr, pw, err := os.Pipe()
	if err != nil {
		return sandbox.ExecResult{}, err
	}
	defer pr.Close()
	cmd.Stdout, cmd.Stderr = pw, pw // one pipe: stdout and stderr interleave as written
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	pw.Close()
	for _, f := range cmd.ExtraFiles {
		f.Close() // the child has its copies
	}
	if err != nil {
		return sandbox.ExecResult{}, fmt.Errorf("start command: %w", errors.Unwrap(err))
	}
	pgid := cmd.Process.Pid
	killGroup := func() { syscall.Kill(-pgid, syscall.SIGKILL) }
	stop := killGroup
	if reaped {
		// SIGCONT too: the command may have stopped its reaper.
		stop = func() {
			syscall.Kill(pgid, syscall.SIGTERM)
			syscall.Kill(pgid, syscall.SIGCONT)
		}
	}

	copied := make(chan struct{})
	go func() {
		out := req.Output
		if out == nil {
			out = io.Discard
		}
		io.Copy(out, pr)
		close(copied)
	}()
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()

	var timeout <-chan time.Time
	if req.Timeout > 0 {
		t := time.NewTimer(req.Timeout)
		defer t.Stop()
		timeout = t.C
	}
	var res sandbox.ExecResult
	var ctxErr error
	select {
	case <-waited:
	case <-timeout:
		res.TimedOut = true
		stop()
		awaitStop(waited, killGroup)
	case <-ctx.Done():
		ctxErr = ctx.Err()
		stop()
		awaitStop(waited, killGroup)
	}
	killGroup() // background children die with the command
	select {
	case <-copied:
	case <-time.After(drainGrace):
		pr.Close()
		<-copied
	}
	if ctxErr != nil {
		return res, ctxErr
	}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		res.ExitCode = 128 + int(ws.Signal())
	} else {
		res.ExitCode = cmd.ProcessState.ExitCode()
	}
	return res, nil
}

// awaitStop waits for a stopped command to end, killing its group if it
// takes longer than reaperGrace (a group kill ends at once).
func awaitStop(waited <-chan error, killGroup func()) {
	select {
	case <-waited:
	case <-time.After(reaperGrace):
		killGroup()
		<-waited
	}
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
