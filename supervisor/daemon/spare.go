//go:build unix

package daemon

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandbox-mcp/sandbox-mcp/supervisor/wire"
)

// A spare shell: the warm exec path. Most of what a bash command costs
// before it runs is bash's own start — its exec, the dynamic loader, the
// locale, the state's start file (shellstate.go) — paid again for every
// command, and in a container whose image is served through
// fuse-overlayfs each file it opens is a round trip to that daemon. So
// the supervisor starts the next command's bash before it is asked for,
// from the state: in its directory, with its environment, its script
// setting its EXIT trap and reading the next command's text from a pipe
// (fd 3, closed before the command runs). It reads no start file (no
// BASH_ENV: one file less to make and remove a command). The next Shell
// command that would start exactly so — the same shell, $0, directory and
// Exec.Env, the state unchanged since (shellState.gen), its directory
// still the one the spare sits in, no stdin pipe — is written to that
// pipe, and the spare runs it; anything else discards the spare (killed)
// and starts the command afresh, as does a spare killed before it read
// its command (unread).
//
// A spare is started as a foreground Shell command's answer leaves, from
// the state it left: an agent's next call, seconds later, finds it ready.
// A client that calls back to back (its command came within spareAhead
// of the last answer) would find it still loading; for it, the spare is
// kept one command ahead: as a command starts in one, the next one's
// starts, from the state that command started from. Most commands leave
// the state as it was; when a command ends, a spare that no longer fits
// (the command changed the state, or the directory the spare sits in) is
// replaced by one from the state the command left. (One ahead always
// would cost every call: a shell loading beside the command, 0.5 ms of a
// paced bash true here — #28.)
//
// What the command sees is what `bash -c COMMAND` would show it: the
// command runs through eval at the top level (no function, no source:
// return, exit, $0, $#, LINENO and "line N" of its errors are the same),
// with BASH_EXECUTION_STRING its text, $SECONDS from 0, $_ bash's path,
// fd 3 closed, and the state's held variables and options (heldVars)
// given back only once the text is read (so that a state's errexit,
// nounset or TMOUT leaves the reading alone). What differs: a syntax error
// reads "bash: eval: line N:" where bash -c says "bash: -c: line N:", and
// ps shows the spare's script as its command line. A state with xtrace or
// verbose on (eval would trace one level deeper, PS4's "++"), or with an
// exported function named exec (which would take the close of fd 3), gets
// no spare.
//
// A spare is one idle bash per sandbox that ran a Shell command (none
// before the first; beside each command that runs in a spare, the one
// ahead), for spareIdle at most: an idle thread then holds no
// process but its supervisor (a thousand idle threads are not a thousand
// idle bashes), and its next command starts afresh. It is one of the
// supervisor's procs (killOrphans leaves it, shutdown kills it); when the
// supervisor ends, its pipe's writer is gone and it ends at once, with no
// state file.

// spare is a started shell waiting for its command.
type spare struct {
	key string      // the request it was made for (spareKey)
	gen uint64      // the state it started from
	dir os.FileInfo // the directory it started in, as it was
	p   *proc
	l   launch   // its launch: the state file its trap writes
	cmd *os.File // the writer of its command pipe (its fd 3)
	in  *os.File // that pipe's reader, kept: what the spare did not read (unread)
	out *os.File // the reader of its stdout and stderr

	wrote chan error  // the command's write (run)
	idle  *time.Timer // discards it once unused for spareIdle
}

// spareIdle is how long a spare waits for its command before it is
// discarded; 0: no spares (--spare-idle).
var spareIdle = 2 * time.Minute

// spareAhead: a Shell command that comes within this of the last one's
// answer comes from a client calling back to back, and its spare is kept
// one ahead. (A spare's bash takes 3–5 ms to load in a container whose
// image is served through fuse-overlayfs.)
const spareAhead = 10 * time.Millisecond

// spares holds the supervisor's spare shell.
type spares struct {
	mu       sync.Mutex
	cond     sync.Cond // on mu (newSupervisor): filling or starting went down
	cur      *spare
	filling  int       // refills under way: the next command waits for them
	starting int       // refills starting a spare: another waits to see it (refillSpare)
	done     bool      // the supervisor ends: no more
	answered time.Time // when the last command's answer that refills left (willRefill)
}

// spareKey is what a Shell command's start depends on besides the state,
// or "" when such a command never runs in a spare: a shell that is not
// bash, a stdin pipe, a text no -c would take (a NUL, over the kernel's
// limit for one argument). (A reset never does either, but the next
// command after it may.)
func spareKey(m wire.Exec) string {
	if !m.Shell || m.Stdin || (len(m.Argv) != 3 && len(m.Argv) != 4) || m.Argv[1] != "-c" ||
		filepath.Base(m.Argv[0]) != "bash" || strings.IndexByte(m.Argv[2], 0) >= 0 || len(m.Argv[2]) >= maxArgStrlen ||
		checkEnv(m.Env) != nil {
		return ""
	}
	parts := append([]string{strconv.Itoa(len(m.Argv)), m.Argv[0], m.Dir, strings.Join(m.Argv[3:], "")}, m.Env...)
	for _, p := range parts {
		if strings.IndexByte(p, 0) >= 0 {
			return ""
		}
	}
	return strings.Join(parts, "\x00")
}

// takeSpare returns the spare shell that command m may run in, or nil;
// a spare that does not fit is discarded.
func (s *supervisor) takeSpare(m wire.Exec) *spare {
	key := spareKey(m)
	if key == "" || m.Reset {
		return nil
	}
	s.spares.mu.Lock()
	for s.spares.filling > 0 {
		// A refill under way (one ahead, or as the last command's
		// answer left): a fork away, far less than a start afresh.
		s.spares.cond.Wait()
	}
	sp := s.spares.cur
	s.spares.cur = nil
	s.spares.mu.Unlock()
	if sp == nil {
		return nil
	}
	if sp.idle != nil {
		sp.idle.Stop()
	}
	if !sp.fits(key, s.state.snapshot(), m.Dir) {
		s.discard(sp)
		return nil
	}
	return sp
}

// fits says whether the command with spare key key, of directory dir,
// would start from state k exactly as sp did: the same key, the state
// unchanged since, sp alive and where the command would start
// (startEnv's) — the same directory, not one made anew at its path (the
// spare's then is removed; its number may be the new one's).
func (sp *spare) fits(key string, k kept, dir string) bool {
	if sp.key != key || sp.gen != k.gen {
		return false
	}
	select {
	case <-sp.p.done:
		return false // it died (killed from a job, or by a command)
	default:
	}
	d, fi := startDir(k, dir)
	cwd, err := readlinkProc(strconv.Itoa(sp.p.pid) + "/cwd")
	return fi != nil && d == sp.l.dir && os.SameFile(fi, sp.dir) && err == nil && !strings.HasSuffix(cwd, " (deleted)")
}

// run hands the spare its command: the text is written and the pipe
// closed — by a goroutine when the text may not fit the pipe's buffer (a
// stopped spare must not hold the call).
func (sp *spare) run(text string) {
	sp.wrote = make(chan error, 1)
	text += spareEnd
	write := func() {
		_, err := sp.cmd.WriteString(text)
		sp.cmd.Close()
		sp.wrote <- err
	}
	if len(text) <= 4096 { // PIPE_BUF: the pipe's buffer takes it whole
		write()
		return
	}
	go write()
}

// unread says, once the spare ended, whether it ended before it read the
// whole of its command (killed while it waited, by a job): then the
// command never ran. It closes the command pipe.
func (sp *spare) unread() bool {
	n, ierr := unix.IoctlGetInt(int(sp.in.Fd()), ioctlInQ)
	sp.in.Close() // a writer still blocked gets EPIPE
	werr := <-sp.wrote
	return werr != nil || ierr == nil && n > 0
}

// discard ends a spare that will not run.
func (s *supervisor) discard(sp *spare) {
	if sp.idle != nil {
		sp.idle.Stop()
	}
	syscall.Kill(-sp.p.pid, syscall.SIGKILL)
	sp.cmd.Close()
	sp.in.Close()
	sp.out.Close()
	removeState(sp.l.file)
}

// willRefill says that a spare shell for the next command like m is to be
// started (refillSpare): the next command waits for it. Called before its
// answer leaves, so that no next command can come before; or, ahead,
// before m runs — only when m came within spareAhead of the last such
// answer (a client calling back to back).
func (s *supervisor) willRefill(m wire.Exec, ahead bool) bool {
	if spareIdle == 0 || spareKey(m) == "" {
		return false
	}
	s.spares.mu.Lock()
	defer s.spares.mu.Unlock()
	if s.spares.done || ahead && time.Since(s.spares.answered) >= spareAhead {
		return false
	}
	s.spares.filling++
	if !ahead {
		s.spares.answered = time.Now()
	}
	return true
}

// refillSpare starts a spare shell for the next command like m, from the
// state now, unless one fits already (it replaces one that does not; it
// waits for one being started to see whether it does); it ends the refill
// willRefill began.
func (s *supervisor) refillSpare(m wire.Exec) {
	key := spareKey(m)
	s.spares.mu.Lock()
	for s.spares.starting > 0 {
		s.spares.cond.Wait()
	}
	k := s.state.snapshot()
	old := s.spares.cur
	if old != nil && old.fits(key, k, m.Dir) || s.spares.done {
		s.spares.filling--
		s.spares.cond.Broadcast()
		s.spares.mu.Unlock()
		return
	}
	s.spares.cur = nil
	s.spares.starting++
	s.spares.mu.Unlock()
	if old != nil {
		s.discard(old)
	}
	sp := s.startSpare(m, key, k)
	s.spares.mu.Lock()
	ends := s.spares.done
	if sp != nil && !ends {
		s.spares.cur = sp
		sp.idle = time.AfterFunc(spareIdle, func() { s.expireSpare(sp) })
	}
	s.spares.starting--
	s.spares.filling--
	s.spares.cond.Broadcast()
	s.spares.mu.Unlock()
	if sp != nil && ends {
		s.discard(sp) // the supervisor ends
	}
}

// expireSpare discards sp if it is still the spare, unused (spareIdle).
func (s *supervisor) expireSpare(sp *spare) {
	s.spares.mu.Lock()
	mine := s.spares.cur == sp
	if mine {
		s.spares.cur = nil
	}
	s.spares.mu.Unlock()
	if mine {
		s.discard(sp)
	}
}

// stopSpares discards the spare and makes no more (the supervisor ends).
func (s *supervisor) stopSpares() {
	s.spares.mu.Lock()
	sp := s.spares.cur
	s.spares.cur, s.spares.done = nil, true
	s.spares.mu.Unlock()
	if sp != nil {
		s.discard(sp)
	}
}

// startSpare starts a spare shell for m from state k.
func (s *supervisor) startSpare(m wire.Exec, key string, k kept) *spare {
	l, ok := s.state.spareLaunch(m.Argv, m.Dir, m.Env, k)
	if !ok {
		return nil
	}
	fail := func() *spare {
		removeState(l.file)
		return nil
	}
	dir, err := os.Stat(l.dir)
	if err != nil {
		return fail()
	}
	cr, cw, err := os.Pipe()
	if err != nil {
		return fail()
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		cr.Close()
		cw.Close()
		return fail()
	}
	l.fd3 = cr
	p, err := s.start(l, nil, pw, false)
	pw.Close()
	if err != nil {
		cr.Close()
		cw.Close()
		pr.Close()
		return fail()
	}
	return &spare{key: key, gen: k.gen, dir: dir, p: p, l: l, cmd: cw, in: cr, out: pr}
}

// spareLaunch is how a spare shell for the -c command argv starts from k
// (startEnv's, with spareScript for the command); false when none can be
// made. It needs no start file: its script sets the trap, and the
// command's "line N" is eval's own.
func (st *shellState) spareLaunch(argv []string, dir string, extra []string, k kept) (launch, bool) {
	l, out, restore, bash := startEnv(argv, dir, extra, true, k)
	if !bash || st.dir == "" || st.ensureDir() != nil {
		return l, false
	}
	for _, kv := range out {
		if strings.HasPrefix(kv, "BASH_FUNC_exec%%=") || strings.HasPrefix(kv, "BASH_FUNC_exec()=") {
			return l, false // it would take the close of fd 3
		}
	}
	for _, r := range restore {
		if r == "builtin set -o xtrace" || r == "builtin set -o verbose" {
			return l, false // eval would trace the command one level deeper (PS4's ++)
		}
	}
	l.file = st.newFile()
	l.env = out // no BASH_ENV: held back, given back by restore
	l.argv = append([]string{argv[0], "-c", trapCommand(true, l.file) + "; " + spareScript(restore)}, argv[3:]...)
	return l, true
}

// spareScript is a spare shell's script: read the command's text from fd
// 3 to its end (read -N reads a pipe in blocks; TMOUT and IFS are the
// reading's own) and take off its end mark, close fd 3, give back what restore gives back, and run
// the text at the top level as bash -c would.
func spareScript(restore []string) string {
	script := []string{`TMOUT= IFS= builtin read -r -N 1073741824 -u 3 ` + spareVar,
		// No end mark: the supervisor ended, not a command; no state either.
		`case $` + spareVar + ` in *` + spareEnd + `) ;; *) builtin trap - EXIT; builtin exit 0;; esac`,
		spareVar + `=${` + spareVar + `%` + spareEnd + `}`,
		`exec 3<&-`}
	script = append(script, restore...)
	// What bash -c would have set is set before the eval, not in its text:
	// a syntax error then quotes the agent's line alone. ($_ stays $BASH:
	// eval does not set it before it runs the text.)
	script = append(script, `BASH_EXECUTION_STRING=$`+spareVar, `builtin unset `+spareVar, `SECONDS=0`, `builtin : "$BASH"`,
		`builtin eval "$BASH_EXECUTION_STRING"`)
	return strings.Join(script, "; ")
}

// spareVar holds a spare's command text until it runs.
const spareVar = "__smcp_c"

// spareEnd ends the text a spare is handed (run): a spare that reads
// none (its supervisor ended) exits without a state file.
const spareEnd = "."
