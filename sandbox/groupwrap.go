package sandbox

import (
	"bytes"
	"strconv"
	"strings"
	"sync"
)

// The process-group wrapper of the providers that run commands through an
// exec API (docker, kubernetes), which has no way to kill what it started
// and returns stdout and stderr apart. It runs in the exec's own process,
// which the runtime made a session and process-group leader (runc does), so
// it needs no setsid, no pid file and no process of its own: it is started
// as `bash -c` (`sh -c` where the image has no bash) and runs the command
// in a subshell, a fork without an exec. With a keep list, it first unsets
// every other variable (an exec API that cannot set the environment, such
// as pods/exec, adds its own), then changes to the workspace; the
// command's stderr goes into stdout's stream, so the two keep the order
// they were written in. Everything the command writes goes to stdout; the
// exec's stderr carries two lines for the provider, written where the
// command cannot (fd 9, closed for it):
//
//	sandbox-mcp-pid PID L  at the start: the wrapper runs; PID is the group to kill on a timeout when L is 1 (it leads its group)
//	sandbox-mcp-exit CODE  at the end: the command's exit code
//
// so the provider needs no inspect call for the exit code. After the
// command, it kills its own process group, so background children do not
// outlive the call (itself with them: the exec's own exit status is then
// 137; the exit line has the command's). Where it does not lead its group,
// it kills nothing. $1 is the keep list (variable names, space separated;
// "" keeps every one), $2 the command.
var inbandWrapper = strings.Join([]string{
	`exec 9>&2 2>&1`,
	// Lead our process group? (field 5 of /proc/$$/stat is the group)
	`__smcp_l=0`,
	`read -r __smcp_s < /proc/$$/stat 2>/dev/null && { __smcp_s=${__smcp_s##*) }; set -- "$1" "$2" $__smcp_s; [ "$5" = "$$" ] && __smcp_l=1; }`,
	`echo "sandbox-mcp-pid $$ ${__smcp_l:-0}" >&9`,
	`if [ -n "$1" ]; then __smcp_k=" $1 "; for __smcp_v in $(env | sed -n 's/^\([A-Za-z_][A-Za-z0-9_]*\)=.*/\1/p'); do case "$__smcp_k" in *" $__smcp_v "*) ;; *) unset "$__smcp_v" 2>/dev/null;; esac; done; fi`,
	`cd /mnt/user-data/workspace 2>/dev/null`,
	`__smcp_c=$2`,
	// The command, in a subshell that sees none of the wrapper's variables.
	`(unset __smcp_l __smcp_s __smcp_k __smcp_v; eval "unset __smcp_c; set --; $__smcp_c") </dev/null 9>&-`,
	`__smcp_r=$?`,
	`echo "sandbox-mcp-exit $__smcp_r" >&9`,
	`[ "$__smcp_l" = 1 ] && kill -9 0 2>/dev/null`,
	`exit "$__smcp_r"`,
}, "; ") // one line, so that bash names the command's lines as bash -c does ("bash: line 1: ...")

// InbandCommand is the argv that runs command through the in-band wrapper
// with shell ("bash" or "sh"), keeping only the variables named in keep
// ("" keeps every one). $0 is "bash", as for bash -c, since it prefixes
// the shell's error messages.
func InbandCommand(shell, keep, command string) []string {
	return []string{shell, "-c", inbandWrapper, "bash", keep, command}
}

// InbandKillCommand is the argv that kills the process group pid of a
// command started with InbandCommand. It runs with whatever sh the image
// has, so it uses the one form every kill takes — dash's and busybox's
// builtins refuse "--" ("Illegal number: -"), dash reads "-s KILL -PGID"'s
// group as an option — and a negative pid after "-9" is the group.
func InbandKillCommand(pid int) []string {
	return []string{"sh", "-c", `kill -9 "-$1" 2>/dev/null; true`, "sandbox-mcp-kill", strconv.Itoa(pid)}
}

// InbandStatus reads the wrapper's lines from the exec's stderr stream.
// Its zero value is ready; it keeps at most a few hundred bytes.
type InbandStatus struct {
	mu      sync.Mutex
	buf     []byte
	started bool
	pid     int
	code    int
	hasCode bool
}

// Write implements io.Writer.
func (s *InbandStatus) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			if len(s.buf)+len(p) <= 128 {
				s.buf = append(s.buf, p...)
			}
			break
		}
		line := string(append(s.buf, p[:i]...))
		s.buf, p = s.buf[:0], p[i+1:]
		if v, ok := strings.CutPrefix(line, "sandbox-mcp-pid "); ok && !s.started {
			// Only the first: the wrapper writes it before the command
			// runs, so a command that reaches fd 9 through /proc cannot
			// point a timeout's kill elsewhere.
			s.started = true
			if v, ok := strings.CutSuffix(v, " 1"); ok {
				if pid, err := strconv.Atoi(v); err == nil && pid > 1 {
					s.pid = pid
				}
			}
		} else if v, ok := strings.CutPrefix(line, "sandbox-mcp-exit "); ok {
			if code, err := strconv.Atoi(v); err == nil {
				s.code, s.hasCode = code, true
			}
		}
	}
	return n, nil
}

// Started reports whether the wrapper has started (said its first line).
func (s *InbandStatus) Started() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.started
}

// PID is the wrapper's process group, 0 when not known (yet) or when the
// wrapper does not lead its group.
func (s *InbandStatus) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pid
}

// ExitCode is the command's exit code; ok is false when the wrapper did
// not report one (it did not start, or it was killed).
func (s *InbandStatus) ExitCode() (code int, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.code, s.hasCode
}

// ShellProbe is the argv that asks a container which shell the wrapper runs
// with; ShellFromProbe reads the answer.
var ShellProbe = []string{"sh", "-c", "command -v bash >/dev/null 2>&1 && echo bash || echo sh"}

// ShellFromProbe reads ShellProbe's run: "bash" or "sh", or "" when the
// image has no sh (it exited 126 or 127: it could not start). known is
// false when the probe did not run (an API error): ask again later.
func ShellFromProbe(stdout []byte, code int, err error) (shell string, known bool) {
	switch sh := strings.TrimSpace(string(stdout)); {
	case err != nil:
		return "", false
	case code == 0 && (sh == "bash" || sh == "sh"):
		return sh, true
	case code == 126 || code == 127:
		return "", true
	}
	return "", false
}
