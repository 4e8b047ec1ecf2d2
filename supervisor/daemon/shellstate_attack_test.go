//go:build linux

package daemon

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	client "github.com/sandbox-mcp/sandbox-mcp/supervisor"
)

// No state a command leaves — BASH_ENV, ENV, shell options, exported
// functions named as the wrapper's builtins, loader variables, a variable
// too large to exec with, a planted private directory — stops the next
// commands' output and exit code, or the state from being saved (SPEC
// §16); and what a command does to its own shell before it exits
// (functions, aliases, traps, set -e, exec >/dev/null) does not stop its
// own state from being saved. After each attack: a command's output and
// exit code, a job's, and a state saved and found again; then what the
// attack meant for the command's own children, where it means something.
func TestShellStateAttacks(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	var posix []string // the other shells
	for _, sh := range shells(t) {
		if filepath.Base(sh) != "bash" {
			posix = append(posix, sh)
		}
	}
	cc, _ := exec.LookPath("cc")
	for _, c := range []struct {
		name   string
		shells []string
		attack string // @D is a directory of the test's own
		// probe: a command that prints "probe" and exits 7 whatever the
		// attack left (the exit through a child: an attack may define
		// exit); its expected output, when the attack's intent adds to it.
		probe, probeOut string
		// kept: a command showing what of the attack's intent the
		// command's own children still get, and its expected output.
		kept, keptOut string
	}{
		{name: "nothing", attack: `true`,
			kept: `bash -c 'echo "${BASH_ENV-unset}"'; echo "${BASH_ENV-unset}"`, keptOut: "unset\nunset\n"},
		{name: "BASH_ENV exits", attack: `printf 'exit 0\n' >@D/hook.sh; export BASH_ENV=@D/hook.sh`,
			kept: `echo "$BASH_ENV"; bash -c 'echo child ran'; echo "child: $?"`, keptOut: "@D/hook.sh\nchild: 0\n"},
		{name: "BASH_ENV silences", attack: `printf 'exec >/dev/null 2>&1\n' >@D/hook.sh; export BASH_ENV=@D/hook.sh`,
			kept: `bash -c 'echo child'; echo parent`, keptOut: "parent\n"},
		{name: "BASH_ENV replaces the EXIT trap", attack: `printf 'trap "" EXIT\n' >@D/hook.sh; export BASH_ENV=@D/hook.sh`},
		{name: "BASH_ENV sets noexec", attack: `printf 'set -n\n' >@D/hook.sh; export BASH_ENV=@D/hook.sh`},
		{name: "POSIXLY_CORRECT", attack: `export POSIXLY_CORRECT=1`,
			kept: `case :$SHELLOPTS: in *:posix:*) echo posix;; esac; echo "$POSIXLY_CORRECT"`, keptOut: "posix\n1\n"},
		{name: "SHELLOPTS posix", attack: `set -o posix; export SHELLOPTS`,
			kept: `case :$SHELLOPTS: in *:posix:*) echo posix;; esac`, keptOut: "posix\n"},
		{name: "SHELLOPTS noexec", attack: `export SHELLOPTS; set -n`},
		{name: "SHELLOPTS errexit nounset pipefail", attack: `set -euo pipefail; export SHELLOPTS`,
			kept: `false; echo not reached`, keptOut: ""},
		{name: "SHELLOPTS xtrace", attack: `set -x; export SHELLOPTS PS4='+ '`,
			probe: `echo probe; sh -c 'exit 7'`, probeOut: "+ echo probe\nprobe\n+ sh -c 'exit 7'\n"},
		{name: "SHELLOPTS xtrace to stdout", attack: `set -x; export SHELLOPTS BASH_XTRACEFD=1 PS4='+ '`,
			probe: `echo probe; sh -c 'exit 7'`, probeOut: "+ echo probe\nprobe\n+ sh -c 'exit 7'\n"},
		{name: "BASHOPTS extdebug", attack: `shopt -s extdebug extglob; export BASHOPTS`,
			kept: `shopt -q extglob && echo extglob; shopt -q extdebug || echo no extdebug; bash -c 'shopt -q extglob && echo child extglob'`, keptOut: "extglob\nno extdebug\nchild extglob\n"},
		{name: "BASHOPTS expand_aliases", attack: `shopt -s expand_aliases; export BASHOPTS`},
		{name: "exported functions named as builtins",
			attack: `for f in trap unset builtin command printf export exit cat compgen declare set shopt eval readonly source enable unalias alias; do eval "function $f { return 0; }"; done; ` +
				`POSIXLY_CORRECT=1; export -f trap unset builtin command printf export exit cat compgen declare set shopt eval readonly source enable unalias alias; unset POSIXLY_CORRECT`,
			kept: `type -t cat printf export`, keptOut: "function\nfunction\nfunction\n"},
		{name: "exported function prints", attack: `printf() { echo HIJACKED; }; cat() { echo HIJACKED; }; command() { echo HIJACKED; }; export -f printf cat command`,
			kept: `printf '%s\n' x`, keptOut: "HIJACKED\n"},
		{name: "PROMPT_COMMAND and ENV", shells: []string{bash}, attack: `printf 'exit 0\n' >@D/hook.sh; export PROMPT_COMMAND='exit 0' ENV=@D/hook.sh`},
		{name: "ENV", shells: posix, attack: `printf 'exit 0\n' >@D/hook.sh; export ENV=@D/hook.sh`},
		{name: "LD_PRELOAD of nothing", attack: `export LD_PRELOAD=@D/missing.so`,
			probe: `echo probe; exit 7`,
			kept:  `echo "$LD_PRELOAD"`, keptOut: "@D/missing.so\n"},
		{name: "PATH emptied, with a function", attack: `f() { :; }; export -f f; export PATH=/nowhere`,
			probe: `echo probe; exit 7`,
			kept:  `echo "$PATH"; type -t f`, keptOut: "/nowhere\nfunction\n"},
		{name: "a variable too large to exec with", attack: `export BIG=$(head -c 200000 /dev/zero | tr '\0' a)`},
		{name: "the private directory replaced", shells: []string{bash}, attack: `t=$(trap -p EXIT); f=${t#*'>|"'}; f=${f%%'"'*}; rm -rf "${f%/*}"; ln -s @D "${f%/*}"`},

		// What a command does to its own shell: its own state is still saved.
		{name: "own: functions", attack: `builtin() { :; }; command() { :; }; printf() { :; }; cat() { :; }; compgen() { :; }; cd @D; typeset -x OWN=saved`,
			kept: `echo "$OWN"; pwd`, keptOut: "saved\n@D\n"},
		{name: "own: aliases", shells: []string{bash}, attack: "shopt -s expand_aliases\nalias builtin=: command=: printf=: cat=: export=: set=: unset=: trap=: exit=: compgen=:\ncd @D; typeset -x OWN=saved",
			kept: `echo "$OWN"; pwd`, keptOut: "saved\n@D\n"},
		{name: "own: traps and set -eu", shells: []string{bash}, attack: `set -eu; trap 'exit 0' ERR; trap 'return 0' RETURN; cd @D; typeset -x OWN=saved`,
			kept: `echo "$OWN"; pwd`, keptOut: "saved\n@D\n"},
		{name: "own: exec >/dev/null", attack: `exec >/dev/null 2>&1; cd @D; export OWN=saved`,
			kept: `echo "$OWN"; pwd`, keptOut: "saved\n@D\n"},
		{name: "own: umask 777", attack: `umask 777; cd @D; export OWN=saved`,
			kept: `echo "$OWN"; pwd`, keptOut: "saved\n@D\n"},
		{name: "own: readonly names", shells: []string{bash}, attack: `readonly __smcp_rc=0 __smcp_f=1; cd @D; export OWN=saved`,
			kept: `echo "$OWN"; pwd`, keptOut: "saved\n@D\n"},
		{name: "LD_PRELOAD that exits", shells: []string{bash}, attack: `printf '#include <unistd.h>\n__attribute__((constructor)) static void f(void) { _exit(0); }\n' >@D/x.c && ` + cc + ` -shared -fPIC -o @D/x.so @D/x.c && export LD_PRELOAD=@D/x.so`,
			probe: `echo probe; exit 7`},
	} {
		shs := c.shells
		if shs == nil {
			shs = append([]string{bash}, posix...)
		}
		if c.name == "LD_PRELOAD that exits" && cc == "" {
			continue
		}
		for _, sh := range shs {
			if filepath.Base(sh) != "bash" && (strings.Contains(c.name, "SHELLOPTS") || strings.Contains(c.name, "BASHOPTS") ||
				strings.Contains(c.name, "BASH_ENV") || strings.Contains(c.name, "POSIXLY") || strings.Contains(c.name, "function")) {
				continue // bash's own
			}
			t.Run(c.name+"/"+filepath.Base(sh), func(t *testing.T) {
				l := jobLink(t, listen(t))
				d := t.TempDir()
				sub := func(s string) string { return strings.ReplaceAll(s, "@D", d) }
				shell := client.ExecRequest{Shell: true}
				out, res := shellRun(t, l, sh, sub(c.attack), client.ExecRequest{Shell: true, ResetState: true})
				t.Logf("the attack: %q %+v", out, res)

				probe, want := `echo probe; sh -c 'exit 7'`, "probe\n"
				if c.probe != "" {
					probe = c.probe
				}
				if c.probeOut != "" {
					want = c.probeOut
				}
				if out, res := shellRun(t, l, sh, probe, shell); out != want || res.ExitCode != 7 {
					t.Errorf("a command after it: %q %+v, want %q and exit code 7", out, res, want)
				}
				j, err := l.StartJob(t.Context(), client.Command{Argv: []string{sh, "-c", probe}, Dir: "/"}, sandbox.JobRequest{Shell: true})
				if err != nil {
					t.Fatal(err)
				}
				if out, o := waitFor(t, l, j.ID, 0, ""); out != want || o.Job.Code != 7 {
					t.Errorf("a job after it: %q %+v, want %q and exit code 7", out, o.Job, want)
				}
				if c.kept != "" {
					if out, _ := shellRun(t, l, sh, sub(c.kept), shell); out != sub(c.keptOut) {
						t.Errorf("what the attack meant: %q, want %q", out, sub(c.keptOut))
					}
				}
				sub2 := filepath.Join(d, "saved")
				os.Mkdir(sub2, 0o755)
				shellRun(t, l, sh, "cd "+sub2+" && typeset -x PROBE=saved 2>/dev/null || { PROBE=saved; export PROBE; }", shell)
				out, _ = shellRun(t, l, sh, `pwd; echo "$PROBE"`, shell)
				if c.probeOut != "" { // set -x: the command's own trace
					out = regexp.MustCompile(`(?m)^\+ .*\n`).ReplaceAllString(out, "")
				}
				if out != sub2+"\nsaved\n" {
					t.Errorf("the state after it: %q, want %q", out, sub2+"\nsaved\n")
				}
			})
		}
	}
}

// What the shell the supervisor starts is given, and what its start
// file gives back.
func TestHeldVars(t *testing.T) {
	env := []string{"PATH=/bin", "BASH_ENV=/h", "LD_PRELOAD=/x.so", "SHELLOPTS=braceexpand:xtrace:noexec:onecmd:errexit:bad$(x)", "BASHOPTS=extdebug:extglob",
		"POSIXLY_CORRECT=1", "BASH_FUNC_builtin%%=() { :; }", "BASH_FUNC_builtin()=() { :; }", "BASH_FUNC_f%%=() { :; }"}
	out, script, held := heldVars(env, true)
	if want := "PATH=/bin BASH_FUNC_f%%=() { :; } __smcp_v_BASH_ENV=/h __smcp_v_LD_PRELOAD=/x.so __smcp_v_POSIXLY_CORRECT=1"; strings.Join(out, " ") != want || !held {
		t.Errorf("bash's environment: %q, want %q", strings.Join(out, " "), want)
	}
	want := []string{
		"BASH_ENV=$__smcp_v_BASH_ENV; builtin export BASH_ENV; builtin unset __smcp_v_BASH_ENV",
		"LD_PRELOAD=$__smcp_v_LD_PRELOAD; builtin export LD_PRELOAD; builtin unset __smcp_v_LD_PRELOAD",
		"builtin export BASHOPTS",
		"builtin shopt -s extglob 2>/dev/null",
		"POSIXLY_CORRECT=$__smcp_v_POSIXLY_CORRECT; builtin export POSIXLY_CORRECT; builtin unset __smcp_v_POSIXLY_CORRECT",
		"builtin export SHELLOPTS",
		"builtin set -o braceexpand 2>/dev/null",
		"builtin set -o errexit 2>/dev/null",
		"builtin set -o xtrace",
	}
	if !slices.Equal(script, want) {
		t.Errorf("bash's start file:\n%s\nwant\n%s", strings.Join(script, "\n"), strings.Join(want, "\n"))
	}
	out, script, _ = heldVars(env, false)
	if strings.Join(out, " ") != "PATH=/bin BASH_ENV=/h SHELLOPTS=braceexpand:xtrace:noexec:onecmd:errexit:bad$(x) BASHOPTS=extdebug:extglob POSIXLY_CORRECT=1 BASH_FUNC_builtin%%=() { :; } BASH_FUNC_builtin()=() { :; } BASH_FUNC_f%%=() { :; } __smcp_v_LD_PRELOAD=/x.so" ||
		!slices.Equal(script, []string{"LD_PRELOAD=$__smcp_v_LD_PRELOAD; export LD_PRELOAD; unset __smcp_v_LD_PRELOAD"}) {
		t.Errorf("another shell's: %q %q", out, script)
	}
	if out, script, held := heldVars([]string{"PATH=/bin"}, true); len(out) != 1 || script != nil || held {
		t.Errorf("nothing held: %q %q %v", out, script, held)
	}
}
