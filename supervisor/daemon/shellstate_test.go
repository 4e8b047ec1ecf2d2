//go:build linux

package daemon

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	client "github.com/sandbox-mcp/sandbox-mcp/supervisor"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor/supervisortest"
)

// shellRun runs script with shell (argv[0]) through l, as a Shell command
// when shell is set, and returns its output and exit code.
func shellRun(t *testing.T, l *client.Link, sh, script string, req client.ExecRequest) (string, sandbox.ExecResult) {
	t.Helper()
	var out syncBuf
	req.Argv = []string{sh, "-c", script}
	if req.Dir == "" {
		req.Dir = "/"
	}
	req.Output = &out
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	res, err := l.Exec(ctx, req)
	if err != nil {
		t.Fatalf("%.200q: %v", script, err)
	}
	return out.String(), res
}

// shells are the shells this machine has: bash, dash, and busybox's sh
// (by a symlink named sh, as in a busybox image).
func shells(t *testing.T) []string {
	var out []string
	for _, n := range []string{"bash", "dash"} {
		if p, err := exec.LookPath(n); err == nil {
			out = append(out, p)
		}
	}
	if p, err := exec.LookPath("busybox"); err == nil {
		sh := filepath.Join(t.TempDir(), "sh")
		if err := os.Symlink(p, sh); err != nil {
			t.Fatal(err)
		}
		out = append(out, sh)
	}
	if len(out) == 0 {
		t.Skip("no shell")
	}
	return out
}

func TestShellStatePersists(t *testing.T) {
	for _, sh := range shells(t) {
		t.Run(filepath.Base(filepath.Dir(sh))+"/"+filepath.Base(sh), func(t *testing.T) {
			dial := listen(t)
			l, l2 := jobLink(t, dial), jobLink(t, dial) // two server replicas
			dir := t.TempDir()
			shell := client.ExecRequest{Shell: true}
			out, res := shellRun(t, l, sh, "mkdir -p "+dir+"/a && cd "+dir+"/a && export FOO=bar ML='two\nlines' && BAR=local", shell)
			if res.ExitCode != 0 || out != "" {
				t.Fatalf("first: %q %+v", out, res)
			}
			want := dir + "/a\nbar\ntwo\nlines\nunset\n"
			probe := `pwd; echo "$FOO"; printf '%s\n' "$ML"; echo "${BAR-unset}"`
			if out, _ := shellRun(t, l2, sh, probe, shell); out != want {
				t.Fatalf("the other replica's next command: %q, want %q", out, want)
			}
			// Without Shell: afresh, and it changes nothing.
			if out, _ := shellRun(t, l, sh, `pwd; echo "${FOO-unset}"; cd /tmp; export FOO=fresh`, client.ExecRequest{}); out != "/\nunset\n" {
				t.Fatalf("a command without Shell: %q", out)
			}
			if out, _ := shellRun(t, l, sh, probe, shell); out != want {
				t.Fatalf("after a command without Shell: %q, want %q", out, want)
			}
			// An exit code is kept, and the state still taken.
			if out, res := shellRun(t, l, sh, "cd ..; unset FOO; export X=1; exit 3", shell); res.ExitCode != 3 || out != "" {
				t.Fatalf("exit 3: %q %+v", out, res)
			}
			if out, _ := shellRun(t, l, sh, `pwd; echo "${FOO-gone}" "$X"`, shell); out != dir+"\ngone 1\n" {
				t.Fatalf("after exit 3 and unset: %q", out)
			}
			// set -e and set -u change nothing of it.
			if out, res := shellRun(t, l, sh, "set -eu; cd a; false", shell); res.ExitCode != 1 || out != "" {
				t.Fatalf("set -e: %q %+v", out, res)
			}
			if out, _ := shellRun(t, l, sh, `pwd`, shell); out != dir+"/a\n" {
				t.Fatalf("after set -e: %q", out)
			}
			// Reset: afresh.
			if out, _ := shellRun(t, l, sh, `pwd; echo "${X-none}"`, client.ExecRequest{Shell: true, ResetState: true}); out != "/\nnone\n" {
				t.Fatalf("reset: %q", out)
			}
			// An error says what it says without Shell (its line: the
			// script's own).
			for _, script := range []string{"nosuchcommand_zz", "true\nnosuchcommand_zz", "true\n\nfalse\n[ 1 -eq ]"} {
				want, _ := shellRun(t, l, sh, script, client.ExecRequest{})
				if out, _ = shellRun(t, l, sh, script, shell); out != want || want == "" {
					t.Fatalf("%q: %q, without Shell %q", script, out, want)
				}
			}
		})
	}
}

func TestShellStateBash(t *testing.T) {
	l := jobLink(t, listen(t))
	sh := "/bin/bash"
	shell := client.ExecRequest{Shell: true}
	out, _ := shellRun(t, l, sh, "nosuchcommand_zz", shell)
	if out != sh+": line 1: nosuchcommand_zz: command not found\n" {
		t.Fatalf("line 1: %q", out)
	}
	// An exported function is exported next time; a descriptor of the
	// script's own (flock 9>...) is never written to.
	lock := filepath.Join(t.TempDir(), "lock")
	shellRun(t, l, sh, "f() { echo hi; }; export -f f; exec 9>"+lock+"; cd /tmp", shell)
	if out, _ := shellRun(t, l, sh, "f; pwd", shell); out != "hi\n/tmp\n" {
		t.Fatalf("exported function: %q", out)
	}
	if b, err := os.ReadFile(lock); err != nil || len(b) != 0 {
		t.Fatalf("the script's fd 9: %q %v", b, err)
	}
	// A directory through a symlink stays as the script named it.
	d := t.TempDir()
	os.Mkdir(filepath.Join(d, "real"), 0o755)
	os.Symlink(filepath.Join(d, "real"), filepath.Join(d, "link"))
	shellRun(t, l, sh, "cd "+d+"/link", shell)
	if out, _ := shellRun(t, l, sh, "pwd", shell); out != d+"/link\n" {
		t.Fatalf("logical directory: %q", out)
	}
	// A vanished directory: the request's.
	shellRun(t, l, sh, "mkdir "+d+"/gone && cd "+d+"/gone && export K=kept", shell)
	shellRun(t, l, sh, "rmdir "+d+"/gone", client.ExecRequest{})
	if out, _ := shellRun(t, l, sh, `pwd; echo $K`, shell); out != "/\nkept\n" {
		t.Fatalf("vanished directory: %q", out)
	}
	// A Shell command is a shell's -c.
	_, err := l.Exec(t.Context(), client.ExecRequest{Argv: []string{"/bin/true"}, Dir: "/", Shell: true})
	if err == nil || !strings.Contains(err.Error(), "shell-state command") {
		t.Fatalf("a Shell command that is no shell's: %v", err)
	}
}

// A state file is the sandbox's, so hostile: planted as a symlink to a
// valid one, a FIFO, huge, with too many variables or malformed, it changes
// nothing (and hangs nothing).
func TestShellStateHostileFile(t *testing.T) {
	l := jobLink(t, listen(t))
	sh := "/bin/bash"
	shell := client.ExecRequest{Shell: true}
	d := t.TempDir()
	shellRun(t, l, sh, "cd "+d+" && export FOO=good", shell)
	valid := filepath.Join(d, "valid")
	if err := os.WriteFile(valid, []byte("/\x00FOO=evil\x00\x00"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Each replaces the EXIT trap with its own, which writes to the
	// command's state file (named in the trap it replaced).
	const file = `t=$(trap -p EXIT); f=${t#*'>|"'}; f=${f%%'"'*}; `
	for name, plant := range map[string]string{
		"symlink":   `trap "ln -s ` + valid + ` $f" EXIT`,
		"fifo":      `trap "mkfifo $f" EXIT`,
		"huge":      `trap "{ printf '/\0A='; head -c 1100000 /dev/zero | tr '\0' a; printf '\0\0'; } >$f" EXIT`,
		"many":      `trap "{ printf '/\0'; for i in \$(seq 5000); do printf 'V%d=1\0' \$i; done; printf '\0'; } >$f" EXIT`,
		"relative":  `trap "printf 'tmp\0FOO=evil\0\0' >$f" EXIT`,
		"noequals":  `trap "printf '/\0FOO\0\0' >$f" EXIT`,
		"emptyname": `trap "printf '/\0=x\0\0' >$f" EXIT`,
		"nonul":     `trap "printf '/tmp' >$f" EXIT`,
		"directory": `trap "mkdir $f" EXIT`,
	} {
		out, res := shellRun(t, l, sh, file+plant+"; cd /", shell)
		if res.ExitCode != 0 || out != "" {
			t.Fatalf("%s: %q %+v", name, out, res)
		}
		if out, _ := shellRun(t, l, sh, `pwd; echo "$FOO"`, shell); out != d+"\ngood\n" {
			t.Fatalf("after a planted %s: %q", name, out)
		}
	}
	// A trap that wrote only the directory (no cat) changes only that.
	shellRun(t, l, sh, file+`trap "printf '/tmp\0' >$f" EXIT; export FOO=lost`, shell)
	if out, _ := shellRun(t, l, sh, `pwd; echo "$FOO"`, shell); out != "/tmp\ngood\n" {
		t.Fatalf("a directory-only state: %q", out)
	}
	// The private directory holds no file between commands.
	if out, _ := shellRun(t, l, sh, file+`ls -A "${f%/*}" | grep -vx "${f##*/}.rc"`, shell); out != "" {
		t.Fatalf("left in the private directory: %q", out)
	}
}

// Jobs, yielded commands and commands that time out start from the state
// and change none of it.
func TestShellStateJobs(t *testing.T) {
	l := jobLink(t, listen(t))
	sh := "/bin/bash"
	shell := client.ExecRequest{Shell: true}
	d := t.TempDir()
	shellRun(t, l, sh, "cd "+d+" && export FOO=bar", shell)
	probe := func(when string) {
		t.Helper()
		if out, _ := shellRun(t, l, sh, `pwd; echo "$FOO"`, shell); out != d+"\nbar\n" {
			t.Fatalf("after %s: %q", when, out)
		}
	}

	j, err := l.StartJob(t.Context(), client.Command{Argv: []string{sh, "-c", `pwd; echo "$FOO"; cd /; export FOO=job`}, Dir: "/"}, sandbox.JobRequest{Shell: true})
	if err != nil {
		t.Fatal(err)
	}
	if out, _ := waitFor(t, l, j.ID, 0, ""); out != d+"\nbar\n" {
		t.Fatalf("a Shell job: %q", out)
	}
	probe("a job")
	j, err = l.StartJob(t.Context(), client.Command{Argv: []string{sh, "-c", `pwd; echo "${FOO-unset}"`}, Dir: "/"}, sandbox.JobRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if out, _ := waitFor(t, l, j.ID, 0, ""); out != "/\nunset\n" {
		t.Fatalf("a job without Shell: %q", out)
	}

	_, res := shellRun(t, l, sh, "cd /; export FOO=yielded; sleep 0.5", client.ExecRequest{Shell: true, YieldAfter: 200 * time.Millisecond})
	if res.Job == "" {
		t.Fatalf("not yielded: %+v", res)
	}
	waitFor(t, l, res.Job, 0, "")
	probe("a yielded command")

	// (They write a state file of their own as they run: a command that
	// did not end by itself is never read.)
	const file = `t=$(trap -p EXIT); f=${t#*'>|"'}; f=${f%%'"'*}; `
	_, res = shellRun(t, l, sh, file+`printf '/\0FOO=timedout\0\0' >$f; sleep 5`, client.ExecRequest{Shell: true, Timeout: 300 * time.Millisecond})
	if !res.TimedOut {
		t.Fatalf("not timed out: %+v", res)
	}
	probe("a timeout")

	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(200*time.Millisecond, cancel)
	if _, err := l.Exec(ctx, client.ExecRequest{Argv: []string{sh, "-c", file + `printf '/\0FOO=cancelled\0\0' >$f; sleep 5`}, Dir: "/", Shell: true}); err == nil {
		t.Fatal("not cancelled")
	}
	probe("a cancellation")

	// The job's state file went when it ended, as did the others'.
	if out, _ := shellRun(t, l, sh, file+`ls -A "${f%/*}" | grep -vx "${f##*/}.rc"`, shell); out != "" {
		t.Fatalf("left in the private directory: %q", out)
	}
}

// Without a private directory, Shell commands run afresh and still run.
func TestShellStateNoDir(t *testing.T) {
	st := &shellState{}
	l, err := st.prepare([]string{"/bin/sh", "-c", "true"}, "/", nil, true, false, true)
	if err != nil || l.file != "" || l.argv[2] != "true" || l.env != nil {
		t.Fatalf("%+v %v", l, err)
	}
}

func TestParseState(t *testing.T) {
	for in, want := range map[string]string{
		"/a\x00":            "/a dir",
		"/a\x00B=1\x00\x00": "/a [B=1]",
		"/a\x00\x00":        "/a []",
		"/a\x00B=1\x00":     "/a dir", // cat cut off
		"/a\x00B=1":         "/a dir", // cat cut off
		"/a\x00B=1\x00PWD=/x\x00_=/bin/cat\x00SHLVL=2\x00OLDPWD=/\x00\x00": "/a [B=1]",
		"a\x00":                     "error",
		"/a":                        "error",
		"/a\x00B\x00\x00":           "error",
		"/a\x00=1\x00\x00":          "error",
		"/a\x00B=1\x00\x00\x00\x00": "error",
	} {
		cwd, vars, full, err := parseState([]byte(in))
		got := "error"
		if err == nil {
			got = cwd + " dir"
			if full {
				got = cwd + " [" + strings.Join(vars.env, " ") + "]"
			}
		}
		if got != want {
			t.Errorf("%q: %s, want %s", in, got, want)
		}
	}
}

// The trap writes bash's exports with export -p when it has no function,
// else (and in any other shell) its environment with cat.
func TestShellStateTrapFormats(t *testing.T) {
	file := filepath.Join(t.TempDir(), "st")
	for _, c := range []struct{ sh, script, want string }{
		{"bash", "cd /tmp; export A=1", "/tmp\x00" + exportMarker + "\x00"},
		{"bash", "cd /tmp; f() { :; }", "/tmp\x00"},
		{"bash", "cd /tmp; exit 4", "/tmp\x00" + exportMarker + "\x00"},
		{"dash", "cd /tmp; export A=1", "/tmp\x00"},
	} {
		p, err := exec.LookPath(c.sh)
		if err != nil {
			continue
		}
		os.Remove(file)
		exec.Command(p, "-c", trapCommand(c.sh == "bash", file)+"; "+c.script).Run()
		b, err := os.ReadFile(file)
		if err != nil || !strings.HasPrefix(string(b), c.want) || !strings.HasSuffix(string(b), "\x00") {
			t.Fatalf("%s -c %q: %q %v", c.sh, c.script, b, err)
		}
		if strings.HasSuffix(c.want, exportMarker+"\x00") != strings.Contains(string(b), exportMarker) {
			t.Fatalf("%s -c %q: %q", c.sh, c.script, b)
		}
	}
}

// Whatever bytes a value holds, it comes back as it was, through export -p
// and through cat; an exported array (never in the environment) and POSIX
// mode break nothing; entries of the environment that name no variable
// pass through.
func TestShellStateValues(t *testing.T) {
	cmd := supervisortest.Command(t, "supervise")
	cmd.Env = append(os.Environ(), "not-a-name=kept")
	c, err := client.StartProcess(t.Context(), cmd, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	l := client.NewLink(func(context.Context) (*client.Conn, error) { return c, nil })
	var all []byte
	for b := 1; b < 256; b++ {
		all = append(all, byte(b))
	}
	values := []string{"", "plain", "a b", "it's", `q"\$` + "`\\z", "two\nlines\n", "\x1b[31mred\x7f", "é€", string(all), "=x=", strings.Repeat("long ", 2000)}
	for _, withFunc := range []string{"", "f() { :; }; "} {
		var set, probe strings.Builder
		set.WriteString(withFunc)
		for i, v := range values {
			fmt.Fprintf(&set, "export V%d=$'%s'; ", i, ansiQuote(v))
			fmt.Fprintf(&probe, `printf '%%s\0' "$V%d"; `, i)
		}
		set.WriteString("a=(1 'x y' $'\\n'); export a; declare -A m=([k]=v [\"a b\"]=$'\\t'); export m; set -o posix")
		probe.WriteString(`printf '%s\0' "${a-unset}" "${m-unset}" "$(cat /proc/self/environ | tr '\0' '\n' | grep -c '^not-a-name=kept$')"`)
		shellRun(t, l, "/bin/bash", set.String(), client.ExecRequest{Shell: true, ResetState: true})
		out, _ := shellRun(t, l, "/bin/bash", probe.String(), client.ExecRequest{Shell: true})
		got := strings.Split(out, "\x00")
		want := append(append([]string(nil), values...), "unset", "unset", "1", "")
		if len(got) != len(want) {
			t.Fatalf("%q: %d values, want %d: %.500q", withFunc, len(got), len(want), out)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("%q: value %d: %.300q, want %.300q", withFunc, i, got[i], want[i])
			}
		}
	}
}

// ansiQuote quotes v for $'...'.
func ansiQuote(v string) string {
	var b strings.Builder
	for _, c := range []byte(v) {
		if c >= 'a' && c <= 'z' || c == ' ' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "\\%03o", c)
		}
	}
	return b.String()
}

func TestParseExportP(t *testing.T) {
	for in, want := range map[string]string{
		"":                                        "[]",
		"declare -x A=\"1\"\n":                    "[A=1]",
		"declare -x A\ndeclare -rx B=\"2\"\n":     "[B=2]",
		"export A=\"x\\\"\\\\\\$\\`y\"\n":         "[A=x\"\\$`y]",
		"declare -x A=$'\\n\\E\\001\\377\\''\n":   "[A=\n\x1b\x01\xff']",
		"declare -ax a=([0]=\"1)\" [1]=$'\\n')\n": "[]",
		"declare -Ax m=([\"a b\"]=\"v\" )\ndeclare -x B=\"2\"\n": "[B=2]",
		"declare -x PWD=\"/\"\ndeclare -x __smcp_rc=\"0\"\n":     "[]",
		"declare -x A=\"1\"":         "error", // no newline
		"declare -x A=1\n":           "error", // unquoted
		"declare -r A=\"1\"\n":       "error", // not exported
		"declare -x 1A=\"1\"\n":      "error",
		"declare -x A=$'\\000'\n":    "error",
		"declare -x A=$'\\q'\n":      "error",
		"declare -x A=\"1\n":         "error",
		"declare -ax a=([0]=\"1\"\n": "error",
		"typeset -x A=\"1\"\n":       "error",
	} {
		env, err := parseExportP(in)
		got := "error"
		if err == nil {
			got = "[" + strings.Join(env, " ") + "]"
		}
		if got != want {
			t.Errorf("%q: %q, want %q", in, got, want)
		}
	}
}
