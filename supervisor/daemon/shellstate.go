//go:build unix

package daemon

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// The shell state (SPEC §15): the working directory and the exported
// variables that the last Shell command (Exec.Shell) left, which the
// next Shell command and every Shell job start from, as the commands of
// one terminal do. It lives in the supervisor's memory — one per sandbox,
// so every server replica of a thread shares it — and is lost when the
// supervisor ends: commands then start afresh.
//
// How a command's state is taken: bash reads, from a file of its own
// named by $BASH_ENV, before the command (a spare shell, from its own
// script: spare.go), and any other shell finds
// prefixed to the script on its own first line (so that the shell's "line
// N" of an error stays the user's N), an EXIT trap (trapCommand) that
// writes "$PWD" NUL, then the shell's exports, to a file of its own in the
// supervisor's private directory (0700): bash without functions writes
// them with its `export -p` (a builtin: no fork) after a marker; any other
// shell writes its environment as cat inherits it (/proc/self/environ:
// NUL-terminated entries), then one more NUL once cat succeeded. When the
// command ended in the foreground — it exited; it did not become a job,
// time out or get killed — the supervisor reads that file (hostile: never
// through a symlink, a regular file, bounded, parsed strictly) and makes
// it the state; the file is removed in every case. A trap that wrote only
// the directory (no cat in the sandbox) changes only the directory. A
// command that sets an EXIT trap of its own, execs, disables builtins
// (enable -n) or dies by a signal leaves the state as it was; one whose
// state is over the bounds (maxStateBytes, maxStateVars, a variable too
// large to start a program with) too. A job starts from the state and
// never changes it.
//
// Nothing a state holds stops the next command's output, its exit code
// or its own state from being taken (SPEC §16): the shell the supervisor
// starts reads none of the variables that would run code before the
// command or change its shell (launchFrom), and the trap runs whatever
// functions, aliases, options and traps the command left (trapCommand).
// A state whose directory cannot be entered starts in the request's; one
// that cannot start a program at all, afresh (startFrom).
//
// No inherited file descriptor carries the state: a script's own
// descriptors (flock 9>...) are never written to.

// Bounds of a kept state: the file's size (the directory and every
// variable) and the number of variables.
const (
	maxStateBytes = 1 << 20
	maxStateVars  = 4096
	// maxArgStrlen is Linux's MAX_ARG_STRLEN: execve refuses an
	// environment entry of this many bytes or more (with its NUL).
	maxArgStrlen = 32 * 4096
)

// shellState is a supervisor's kept state.
type shellState struct {
	dir  string        // the private directory; "": none could be made, Shell commands run fresh
	next atomic.Uint64 // state file names

	mu   sync.Mutex
	have bool     // a state is kept
	cwd  string   // absolute, as the shell's $PWD
	env  []string // "K=V", without PWD, OLDPWD, SHLVL, _
	dirs bool     // cwd only: env is the supervisor's own (a trap without cat)
	gen  uint64   // counts its changes: a spare shell started from another state is not used (spare.go)
}

// newShellState makes the private directory: beside the socket when the
// supervisor listens (a fixed name, emptied: a restarted container's
// supervisor finds its predecessor's), else a new one in the temporary
// directory. Without one (logged), Shell commands run fresh.
func newShellState(listen string) *shellState {
	st := &shellState{}
	var dir string
	var err error
	if listen != "" {
		if dir, err = filepath.Abs(filepath.Join(filepath.Dir(listen), "shell")); err != nil {
			fmt.Fprintf(os.Stderr, Name+": no private directory for the shell state (%v): bash commands start afresh each time\n", err)
			return st
		}
		os.RemoveAll(dir)
		err = os.Mkdir(dir, 0o700)
	} else {
		dir, err = os.MkdirTemp("", "sandbox-mcp-shell-")
	}
	if err == nil && !stateSafe(dir) {
		os.Remove(dir)
		err = fmt.Errorf("%q needs shell quoting", dir)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, Name+": no private directory for the shell state (%v): bash commands start afresh each time\n", err)
		return st
	}
	st.dir = dir
	return st
}

// remove removes the private directory (the supervisor ends).
func (st *shellState) remove() {
	if st.dir != "" {
		os.RemoveAll(st.dir)
	}
}

// stateSafe: p may stand inside double quotes inside single quotes.
func stateSafe(p string) bool {
	if !filepath.IsAbs(p) {
		return false
	}
	for _, c := range []byte(p) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("/._-+,=:@%", c) >= 0) {
			return false
		}
	}
	return true
}

// launch is how a command starts: argv, directory, environment (nil: the
// supervisor's own), and the file its state goes to ("": none; its ".rc",
// bash's start file, removed with it). A launch from a kept state
// remembers how to start afresh (startFrom).
type launch struct {
	argv  []string
	dir   string
	env   []string
	file  string
	extra []string // wire.Exec.Env: set over env
	fd3   *os.File // a spare shell's command pipe (spare.go), its fd 3

	orig      []string // the command's own argv
	save      bool
	fromState bool
}

// errShellArgv: a Shell command must be a shell's -c.
var errShellArgv = errors.New("a shell-state command must be [shell, -c, command] or [shell, -c, command, $0]")

// kept is a snapshot of the kept state.
type kept struct {
	have bool
	cwd  string
	env  []string
	dirs bool
	gen  uint64
}

// prepare is how command m starts (Exec.Shell, .Reset): from the kept
// state; with save, its script also writes its state (an exec, not a job).
func (st *shellState) prepare(argv []string, dir string, extra []string, shell, reset, save bool) (launch, error) {
	if err := checkEnv(extra); err != nil {
		return launch{argv: argv, dir: dir}, err
	}
	if reset {
		st.mu.Lock()
		st.have, st.cwd, st.env, st.dirs = false, "", nil, false
		st.gen++
		st.mu.Unlock()
	}
	if !shell {
		l := launch{argv: argv, dir: dir, extra: extra}
		if len(extra) > 0 {
			l.env = withVars(os.Environ(), extra)
		}
		return l, nil
	}
	if (len(argv) != 3 && len(argv) != 4) || argv[1] != "-c" {
		return launch{argv: argv, dir: dir}, errShellArgv
	}
	return st.launchFrom(argv, dir, extra, save, st.snapshot()), nil
}

// snapshot is the kept state now.
func (st *shellState) snapshot() kept {
	st.mu.Lock()
	defer st.mu.Unlock()
	return kept{st.have, st.cwd, st.env, st.dirs, st.gen}
}

// checkEnv refuses an Exec.Env entry that sets no shell variable.
func checkEnv(extra []string) error {
	for _, kv := range extra {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || !varName(k) || strings.IndexByte(kv, 0) >= 0 {
			return fmt.Errorf("environment entry %.40q: want NAME=value, NAME a shell variable's name", kv)
		}
	}
	return nil
}

// withVars is env with the variables of extra ("K=V") set, each in place
// of its earlier value.
func withVars(env, extra []string) []string {
	out := env
	for _, kv := range extra {
		k, _, _ := strings.Cut(kv, "=")
		out = append(withoutVar(out, k), kv)
	}
	return out
}

// launchFrom is how a shell's -c command starts from k.
//
// The shell the supervisor starts never reads what the state may hold
// against it (SPEC §16): the variables that would run code or change the
// shell before the command — BASH_ENV, POSIXLY_CORRECT (a bash in POSIX
// mode reads no BASH_ENV), SHELLOPTS and BASHOPTS (noexec, xtrace), the
// dynamic loader's (LD_PRELOAD, LD_LIBRARY_PATH, LD_AUDIT) — are held back
// from its environment and given back, with their options, once it runs
// (heldVars), so the command and its children see them as the state has
// them; SHELLOPTS's noexec and onecmd, and BASHOPTS's extdebug, are not
// given back, nor an exported function named builtin.
// bash reads that, and the trap, from its BASH_ENV, a file of its own
// (file+".rc"), which bash reads before the command; any other shell (or a
// bash when that file cannot be made) finds them prefixed to the command
// on its first line.
func (st *shellState) launchFrom(argv []string, dir string, extra []string, save bool, k kept) launch {
	l, out, restore, bash := startEnv(argv, dir, extra, save, k)
	if !save && len(restore) == 0 {
		return l
	}
	var file string
	if st.dir != "" && st.ensureDir() == nil {
		file = st.newFile()
	}
	if save && file == "" {
		save = false // no private directory: the command runs, its state is not taken
		l.save = false
		if len(restore) == 0 {
			return l
		}
	}
	var script []string
	if save {
		script = append(script, trapCommand(bash, file))
	}
	script = append(script, restore...)
	if bash && file != "" {
		// The rc's own BASH_ENV goes (the state's, if any, comes back).
		rc := append([]string{"builtin unset BASH_ENV"}, script...)
		if rc, ok := writeRC(file, strings.Join(rc, "\n")+"\n"); ok {
			l.env = append(withoutVar(out, "BASH_ENV"), "BASH_ENV="+rc)
			l.file = file
			return l
		}
	}
	// bash with no BASH_ENV (it was held back) reads nothing before the
	// command; the prefix is on the command's first line, so that the
	// shell's "line N" of an error stays the user's N.
	if save {
		l.file = file
	}
	l.argv = append([]string(nil), argv...)
	l.argv[2] = strings.Join(script, "; ") + "; " + argv[2]
	return l
}

// startEnv is where and with what environment a shell's -c command starts
// from k (launchFrom), and the statements that give back what its shell
// must not read at its start (heldVars): l's environment is out.
func startEnv(argv []string, dir string, extra []string, save bool, k kept) (l launch, out, restore []string, bash bool) {
	l = launch{argv: argv, dir: dir, orig: argv, save: save, fromState: k.have, extra: extra}
	var env []string // nil: the supervisor's own
	if k.have {
		l.dir, _ = startDir(k, dir)
		env = os.Environ()
		if !k.dirs {
			env = k.env
		}
		// The shell keeps $PWD (the path as cd'ed, through symlinks)
		// when it names the directory it starts in.
		env = append(withoutVar(env, "PWD"), "PWD="+l.dir)
	}
	if len(extra) > 0 {
		if env == nil {
			env = os.Environ()
		}
		env = withVars(env, extra)
	}
	bash = filepath.Base(argv[0]) == "bash"
	src := env
	if src == nil {
		src = os.Environ()
	}
	out, restore, held := heldVars(src, bash)
	if env != nil || held {
		l.env = out
	}
	return l, out, restore, bash
}

// startDir is the directory a Shell command starts in from k: the state's
// when it may be entered, else dir; and what it is (nil: dir cannot be
// stat'ed).
func startDir(k kept, dir string) (string, os.FileInfo) {
	if k.have {
		if fi, err := os.Stat(k.cwd); err == nil && fi.IsDir() && unix.Access(k.cwd, unix.X_OK) == nil {
			return k.cwd, fi
		}
	}
	fi, _ := os.Stat(dir)
	return dir, fi
}

// newFile names a new state file in the private directory (none there).
func (st *shellState) newFile() string {
	file := filepath.Join(st.dir, "s"+strconv.FormatUint(st.next.Add(1), 10))
	removeState(file)
	return file
}

// writeRC writes bash's start file for the state file file: file+".rc",
// new (never through what the sandbox planted there).
func writeRC(file, script string) (string, bool) {
	rc := file + ".rc"
	f, err := os.OpenFile(rc, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return "", false
	}
	_, err = f.WriteString(script)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(rc)
		return "", false
	}
	return rc, true
}

// held are the variables held back from the environment of the shell the
// supervisor starts: bash's own, then the dynamic loader's (every shell).
var (
	heldBash   = []string{"BASH_ENV", "POSIXLY_CORRECT", "SHELLOPTS", "BASHOPTS"}
	heldLoader = []string{"LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT"}
)

// heldPrefix names, in the shell's environment, the value of a held
// variable that the restore script gives back.
const heldPrefix = "__smcp_v_"

// heldVars takes the held variables out of env (a copy) and returns the
// statements that give them back (one line each, no newline in any):
// values through the environment (heldPrefix+name), option names written
// out (checked). The function named "builtin" is dropped (the statements,
// and the trap, call builtins through it).
func heldVars(env []string, bash bool) (out, script []string, held bool) {
	names := heldLoader
	if bash {
		names = append(append([]string(nil), heldBash...), heldLoader...)
	}
	vals := map[string]string{}
	out = make([]string, 0, len(env))
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		if slices.Contains(names, k) {
			vals[k] = v
			held = true
			continue
		}
		if bash && (k == "BASH_FUNC_builtin%%" || k == "BASH_FUNC_builtin()") { // Debian's, Red Hat's
			held = true
			continue
		}
		out = append(out, kv)
	}
	// The commands run before the user's, with no function or alias of
	// the user's defined yet, bar those exported: bash's through builtin
	// (never one: dropped above), any other shell's are special builtins.
	do := func(cmd string) string {
		if bash {
			return "builtin " + cmd
		}
		return cmd
	}
	give := func(name string) {
		v, ok := vals[name]
		if !ok {
			return
		}
		out = append(out, heldPrefix+name+"="+v)
		script = append(script, name+"=$"+heldPrefix+name+"; "+do("export "+name)+"; "+do("unset "+heldPrefix+name))
	}
	if bash {
		give("BASH_ENV")
	}
	for _, name := range heldLoader {
		give(name)
	}
	if !bash {
		return out, script, held
	}
	if v, ok := vals["BASHOPTS"]; ok {
		script = append(script, "builtin export BASHOPTS")
		for _, o := range strings.Split(v, ":") {
			// extdebug set in a start file starts bash's debugger
			// (bashdb), or says it cannot, before every command.
			if optionName(o) && o != "extdebug" {
				script = append(script, "builtin shopt -s "+o+" 2>/dev/null")
			}
		}
	}
	give("POSIXLY_CORRECT")
	if v, ok := vals["SHELLOPTS"]; ok {
		// Exported first (its value follows the options); xtrace and
		// verbose last, so that the statements are not traced.
		script = append(script, "builtin export SHELLOPTS")
		var last []string
		for _, o := range strings.Split(v, ":") {
			switch {
			case !optionName(o) || o == "noexec" || o == "onecmd":
			case o == "xtrace" || o == "verbose":
				last = append(last, "builtin set -o "+o)
			default:
				script = append(script, "builtin set -o "+o+" 2>/dev/null")
			}
		}
		script = append(script, last...)
	}
	return out, script, held
}

// optionName: a shell option's name (set -o, shopt -s).
func optionName(o string) bool {
	if o == "" || len(o) > 64 {
		return false
	}
	for _, c := range []byte(o) {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// removeState removes a command's state file and its BASH_ENV file
// (whatever a command made of them: a directory too).
func removeState(file string) {
	for _, f := range []string{file, file + ".rc"} {
		if err := unix.Unlink(f); err != nil && err != unix.ENOENT {
			os.Remove(f)
		}
	}
}

// ensureDir remakes the private directory if a command removed it, or
// replaced it by something else (a symlink, a file: removed), and makes
// it the supervisor's alone again.
func (st *shellState) ensureDir() error {
	fi, err := os.Lstat(st.dir)
	if err == nil && !fi.IsDir() {
		if err = os.Remove(st.dir); err == nil {
			err = os.ErrNotExist
		}
	}
	if errors.Is(err, os.ErrNotExist) {
		if err = os.Mkdir(st.dir, 0o700); err == nil {
			fi, err = os.Lstat(st.dir)
		}
	}
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return errors.New("not a directory")
	}
	if fi.Mode().Perm() != 0o700 {
		return os.Chmod(st.dir, 0o700)
	}
	return nil
}

// trapCommand is the command that sets the EXIT trap writing the
// command's state to file (bash's, or any other shell's: dash, busybox
// sh), keeping the command's exit code (a trap that does not exit keeps
// it). Nothing the command left changes what the trap runs or shows: it
// quotes the first word of each command (no alias applies); it calls
// builtins through special builtins (found before functions in POSIX
// mode, which an assignment to POSIXLY_CORRECT turns on in bash, and which
// no function may be named in dash and busybox) and, in bash, through
// builtin once no function has that name; set -e is ignored on the left
// of ||, set -u meets no unset variable, and set -x traces to /dev/null
// (stderr, or BASH_XTRACEFD's 1), the options left as the command set
// them for the state to keep; the file is the supervisor's to read
// whatever the umask; a failed write changes nothing of it. bash
// with no functions writes its exports with `export -p` (a builtin: no
// fork) after a marker field; any other shell, or a bash with functions
// (an exported one is only in its environment), runs cat (command -p:
// whatever PATH the command left).
func trapCommand(bash bool, file string) string {
	f := `"` + file + `"`
	if bash {
		// One redirection a command, not one for the block: with
		// BASH_XTRACEFD=1, a block's trace would go into the file.
		return `builtin trap '{ case ${POSIXLY_CORRECT+s} in s) POSIXLY_CORRECT=$POSIXLY_CORRECT; \unset -f builtin;; ` +
			`*) POSIXLY_CORRECT=y; \unset -f builtin; \unset POSIXLY_CORRECT;; esac; \builtin umask 077; ` +
			`\builtin printf "%s\0" "${PWD-}" >|` + f + ` && if \builtin compgen -A function; then ` +
			`\builtin command -p cat /proc/self/environ >>` + f + ` && \builtin printf "\0" >>` + f + `; ` +
			`else \builtin printf "` + exportMarker + `\0" >>` + f + ` && \builtin export -p >>` + f + ` && \builtin printf "\0" >>` + f + `; fi; } >/dev/null 2>&1 || :' EXIT`
	}
	return `trap '{ \unset -f command; \command umask 077; { \command printf "%s\0" "${PWD-}" && ` +
		`\command -p cat /proc/self/environ && \command printf "\0"; } >|` + f + `; } >/dev/null 2>&1 || :' EXIT`
}

// exportMarker: the state file's exports are bash's `export -p` (no
// environment entry is without a '=').
const exportMarker = "export -p"

// withoutVar is env without name's entries (a copy).
func withoutVar(env []string, name string) []string {
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if !strings.HasPrefix(kv, name+"=") {
			out = append(out, kv)
		}
	}
	return out
}

// load makes the state a command's trap wrote to file the kept state (it
// ended in the foreground); a missing, planted or malformed file changes
// nothing. env is the environment the command started with: bash passes
// its entries that name no variable through, and `export -p` does not
// show them.
func (st *shellState) load(file string, env []string) {
	b, err := readState(file)
	if err != nil {
		return
	}
	cwd, vars, full, err := parseState(b)
	if err != nil {
		return
	}
	for _, kv := range vars.env {
		if len(kv) >= maxArgStrlen {
			return // no program could start with it
		}
	}
	if full && vars.exportP {
		if env == nil {
			env = os.Environ()
		}
		for _, kv := range env {
			k, _, _ := strings.Cut(kv, "=")
			if !varName(k) && !strings.HasPrefix(k, "BASH_FUNC_") && len(vars.env) < maxStateVars {
				vars.env = append(vars.env, kv)
			}
		}
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	was := kept{st.have, st.cwd, st.env, st.dirs, 0}
	if !full {
		if !st.have {
			st.dirs = true
		}
		st.have, st.cwd = true, cwd
	} else {
		st.have, st.cwd, st.env, st.dirs = true, cwd, vars.env, false
	}
	if was.have != st.have || was.cwd != st.cwd || was.dirs != st.dirs || !slices.Equal(was.env, st.env) {
		st.gen++
	}
}

// readState reads a state file: never through a symlink, never a FIFO or
// device, at most maxStateBytes.
func readState(file string) ([]byte, error) {
	f, err := os.OpenFile(file, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, errors.New("not a regular file")
	}
	if fi.Size() > maxStateBytes {
		return nil, errors.New("state too large")
	}
	b, err := io.ReadAll(io.LimitReader(f, maxStateBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxStateBytes {
		return nil, errors.New("state too large")
	}
	return b, nil
}

// exports are a state's variables ("K=V"), and whether they came from
// `export -p` (else from an environment).
type exports struct {
	env     []string
	exportP bool
}

// parseState parses a state file: "$PWD" NUL, then (full) either the
// environment's entries, each NUL-terminated, then one more NUL; or
// exportMarker NUL, bash's `export -p`, NUL.
func parseState(b []byte) (cwd string, vars exports, full bool, err error) {
	i := bytes.IndexByte(b, 0)
	if i < 0 {
		return "", vars, false, errors.New("no directory")
	}
	cwd, b = string(b[:i]), b[i+1:]
	if !strings.HasPrefix(cwd, "/") || len(cwd) > 4096 {
		return "", vars, false, errors.New("not an absolute directory")
	}
	if m := exportMarker + "\x00"; bytes.HasPrefix(b, []byte(m)) {
		b = b[len(m):]
		if len(b) == 0 || b[len(b)-1] != 0 {
			return cwd, vars, false, nil // cut off: the directory only
		}
		env, err := parseExportP(string(b[:len(b)-1]))
		if err != nil {
			return "", vars, false, err
		}
		return cwd, exports{env: env, exportP: true}, true, nil
	}
	if len(b) == 0 || b[len(b)-1] != 0 {
		return cwd, vars, false, nil // cat did not run (or was cut off): the directory only
	}
	b = b[:len(b)-1]
	if len(b) > 0 && b[len(b)-1] != 0 {
		return cwd, vars, false, nil
	}
	vars.env = []string{}
	for len(b) > 0 {
		i := bytes.IndexByte(b, 0)
		kv := string(b[:i])
		b = b[i+1:]
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return "", vars, false, errors.New("malformed variable")
		}
		if dropVar(k) {
			continue
		}
		if len(vars.env) == maxStateVars {
			return "", vars, false, errors.New("too many variables")
		}
		vars.env = append(vars.env, kv)
	}
	return cwd, vars, true, nil
}

// dropVar: a variable that is not kept (the shell's own, or the trap's).
func dropVar(k string) bool {
	switch k {
	case "PWD", "OLDPWD", "SHLVL", "_":
		return true
	}
	return strings.HasPrefix(k, "__smcp_")
}

// varName: a shell variable's name.
func varName(k string) bool {
	if k == "" || k[0] >= '0' && k[0] <= '9' {
		return false
	}
	for _, c := range []byte(k) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// parseExportP parses bash's `export -p`: lines `declare -FLAGS NAME` or
// (in POSIX mode) `export [-FLAGS] NAME`, each with `="value"` (double-quoted) or
// `=$'value'` (ANSI-C quoted) when it has a value; strictly.
func parseExportP(s string) ([]string, error) {
	bad := errors.New("malformed export -p")
	env := []string{}
	for s != "" {
		array := false // exported, but never in the environment: skipped
		switch {
		case strings.HasPrefix(s, "declare -"):
			i := strings.IndexByte(s, ' ')
			j := strings.IndexByte(s[i+1:], ' ')
			if j < 0 || !strings.Contains(s[i+1:i+1+j], "x") {
				return nil, bad
			}
			array = strings.ContainsAny(s[i+1:i+1+j], "aA")
			s = s[i+1+j+1:]
		case strings.HasPrefix(s, "export -"): // POSIX mode's arrays
			i := strings.IndexByte(s[len("export "):], ' ')
			if i < 0 {
				return nil, bad
			}
			array = strings.ContainsAny(s[len("export "):len("export ")+i], "aA")
			s = s[len("export ")+i+1:]
		case strings.HasPrefix(s, "export "):
			s = s[len("export "):]
		default:
			return nil, bad
		}
		n := 0
		for n < len(s) && s[n] != '=' && s[n] != '\n' {
			n++
		}
		name := s[:n]
		if !varName(name) || n == len(s) {
			return nil, bad
		}
		s = s[n:]
		if s[0] == '\n' { // exported, no value: not in the environment
			s = s[1:]
			continue
		}
		var v string
		var err error
		switch {
		case array && strings.HasPrefix(s, "=("):
			s, err = skipArray(s[2:])
		case array:
			err = bad
		case strings.HasPrefix(s, `="`):
			v, s, err = unquoteDouble(s[2:])
		case strings.HasPrefix(s, `=$'`):
			v, s, err = unquoteANSI(s[3:])
		default:
			err = bad
		}
		if err != nil || !strings.HasPrefix(s, "\n") {
			return nil, bad
		}
		s = s[1:]
		if array || dropVar(name) {
			continue
		}
		if strings.IndexByte(v, 0) >= 0 { // no environment holds one
			return nil, bad
		}
		if len(env) == maxStateVars {
			return nil, errors.New("too many variables")
		}
		env = append(env, name+"="+v)
	}
	return env, nil
}

// skipArray reads an array's elements' rest (after its `=(`), up to the
// `)` that ends its line, and returns what follows that `)`.
func skipArray(s string) (string, error) {
	for i := 0; i < len(s); {
		var err error
		switch {
		case s[i] == ')' && strings.HasPrefix(s[i+1:], "\n"):
			return s[i+1:], nil
		case s[i] == '"':
			_, s, err = unquoteDouble(s[i+1:])
			i = 0
		case strings.HasPrefix(s[i:], "$'"):
			_, s, err = unquoteANSI(s[i+2:])
			i = 0
		case s[i] == '\n':
			err = errors.New("unterminated")
		default:
			i++
		}
		if err != nil {
			return "", err
		}
	}
	return "", errors.New("unterminated")
}

// unquoteDouble reads a double-quoted word's rest (after its `"`): the
// value and what follows its closing quote.
func unquoteDouble(s string) (string, string, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '"':
			return b.String(), s[i+1:], nil
		case '\\':
			if i+1 == len(s) {
				return "", "", errors.New("unterminated")
			}
			switch d := s[i+1]; d {
			case '$', '`', '"', '\\':
				b.WriteByte(d)
				i++
			case '\n':
				i++
			default:
				b.WriteByte(c)
			}
		default:
			b.WriteByte(c)
		}
	}
	return "", "", errors.New("unterminated")
}

// unquoteANSI reads a $'...' word's rest (after its `$'`), with the
// escapes bash's quoting writes.
func unquoteANSI(s string) (string, string, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '\'' {
			return b.String(), s[i+1:], nil
		}
		if c != '\\' {
			b.WriteByte(c)
			continue
		}
		i++
		if i == len(s) {
			break
		}
		if d := s[i]; d >= '0' && d <= '7' {
			v := 0
			for k := 0; k < 3 && i < len(s) && s[i] >= '0' && s[i] <= '7'; k++ {
				v = v*8 + int(s[i]-'0')
				i++
			}
			i--
			if v == 0 || v > 0xff {
				return "", "", errors.New("bad octal escape")
			}
			b.WriteByte(byte(v))
			continue
		}
		e, ok := map[byte]byte{'a': 7, 'b': 8, 'e': 27, 'E': 27, 'f': 12, 'n': 10, 'r': 13, 't': 9, 'v': 11, '\\': '\\', '\'': '\'', '"': '"', '?': '?'}[s[i]]
		if !ok {
			return "", "", errors.New("unknown escape")
		}
		b.WriteByte(e)
	}
	return "", "", errors.New("unterminated")
}
