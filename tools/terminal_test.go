package tools_test

import (
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/terminal"
	"github.com/sandbox-mcp/sandbox-mcp/tools"
)

// Terminal jobs (SPEC §20) through the tools, on the local provider's host
// bash and its real supervisor: the screens are the programs' own.

// screenAnswer is a screen answer: screen (its rows), its line under the
// screen and its last line.
var screenAnswer = regexp.MustCompile(`(?s)^(.*)\n(\[screen \d+x\d+, [^\n]*\])\n(\[job j\d+ [^\n]*\])$`)

func splitScreen(t *testing.T, got string) (rows, status, state string) {
	t.Helper()
	m := screenAnswer.FindStringSubmatch(got)
	if m == nil {
		t.Fatalf("not a screen answer: %q", got)
	}
	return m[1], m[2], m[3]
}

// until calls bash_output on the job until its screen holds want.
func (f *fixture) until(id, want string) string {
	f.t.Helper()
	var got string
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); {
		got = f.ok("bash_output", map[string]any{"job": id, "wait": 1})
		if strings.Contains(got, want) {
			return got
		}
	}
	f.t.Fatalf("job %s: no %q on the screen:\n%s", id, want, got)
	return ""
}

func TestTTYPrompt(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.env.Terminals = terminal.NewScreens(4, 100_000)
	got := f.ok("bash", map[string]any{"command": `[ -t 0 ] && echo "on a terminal"; printf 'name? '; read n; echo "hello $n"; read x`, "tty": true})
	if got != "on a terminal\nname? █\n[screen 80x24, cursor at row 2, col 7]\n[job j1 started]" {
		t.Fatalf("start: %q", got)
	}
	if got := f.ok("bash_output", map[string]any{}); got != `j1 running on a terminal 80x24: [ -t 0 ] && echo "on a terminal"; printf 'name? '; read n; echo "hello $n"; read x` {
		t.Errorf("list: %q", got)
	}
	// The answer typed, Enter pressed: the terminal echoes it.
	got = f.ok("bash_input", map[string]any{"job": "j1", "input": "bob<Enter>"})
	rows, status, state := splitScreen(t, got)
	if rows != "on a terminal\nname? bob\nhello bob\n█" || status != "[screen 80x24, cursor at row 4, col 1]" || !strings.HasPrefix(state, "[job j1 running; next offset ") {
		t.Fatalf("after input: %q", got)
	}
	// The screen again, unchanged; then its raw output, escape sequences
	// and the terminal's CRLF as they came.
	if again := f.ok("bash_output", map[string]any{"job": "j1"}); again != got {
		t.Errorf("again: %q, want %q", again, got)
	}
	raw := f.ok("bash_output", map[string]any{"job": "j1", "raw": true, "offset": 0})
	if !strings.HasPrefix(raw, "on a terminal\r\nname? bob\r\nhello bob\r\n") {
		t.Errorf("raw: %q", raw)
	}
	// <C-d> at the read: it ends, and the end is said under the screen.
	got = f.ok("bash_input", map[string]any{"job": "j1", "input": "<C-d>"})
	for i := 0; !strings.Contains(got, "exited") && i < 10; i++ {
		got = f.ok("bash_output", map[string]any{"job": "j1", "wait": 1})
	}
	if _, _, state := splitScreen(t, got); !strings.HasPrefix(state, "[job j1 exited with code 1; next offset ") {
		t.Fatalf("after ^D: %q", got)
	}
}

// The screen is the server's: a call with no cache rebuilds it from the
// job's kept output, and draws the same.
func TestTTYRebuilt(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.env.Terminals = terminal.NewScreens(4, 100_000)
	f.ok("bash", map[string]any{"command": `printf '\033[?1049h\033[2J\033[5;10Hfull screen\033[1;1H'; read x; printf '\033[3;3Hgot %s' "$x"; read y`, "tty": true, "cols": 40, "rows": 10})
	cached := f.ok("bash_input", map[string]any{"job": "j1", "input": "abc<Enter>"})
	// The terminal echoed what was typed where the cursor was.
	if rows, status, _ := splitScreen(t, cached); rows != "abc\n\n  got abc█\n\n         full screen" || status != "[screen 40x10, cursor at row 3, col 10]" {
		t.Fatalf("cached: %q", cached)
	}
	fresh := *f.env
	fresh.Terminals = nil
	if rebuilt := f.callText(&fresh, "bash_output", map[string]any{"job": "j1"}); rebuilt != cached {
		t.Fatalf("rebuilt: %q, want %q", rebuilt, cached)
	}
	// Killed: the last screen, and how it ended.
	got := f.ok("bash_kill", map[string]any{"job": "j1", "signal": "KILL"})
	if !strings.Contains(got, "  got abc█\n") || !strings.Contains(got, "[job j1 was killed by SIGKILL]\n[job j1 exited with code 137; next offset ") {
		t.Fatalf("kill: %q", got)
	}
}

// A resize reaches the program (stty sees it), and the screen is drawn at
// the new size.
func TestTTYResize(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.env.Terminals = terminal.NewScreens(4, 100_000)
	got := f.ok("bash", map[string]any{"command": `stty size; while read -r l; do stty size; done`, "tty": true, "cols": 100, "rows": 30})
	if rows, status, _ := splitScreen(t, got); rows != "30 100\n█" || status != "[screen 100x30, cursor at row 2, col 1]" {
		t.Fatalf("start: %q", got)
	}
	got = f.ok("bash_input", map[string]any{"job": "j1", "cols": 60, "rows": 12, "input": "<Enter>"})
	if rows, status, _ := splitScreen(t, got); rows != "30 100\n\n12 60\n█" || status != "[screen 60x12, cursor at row 4, col 1]" {
		t.Fatalf("after a resize: %q", got)
	}
	f.ok("bash_kill", map[string]any{"job": "j1", "signal": "KILL"})
}

// A Python REPL, and the keys that edit a line: readline sees arrows.
func TestTTYPython(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("SKIPPED: no python3")
	}
	f := newFixture(t)
	f.env.Terminals = terminal.NewScreens(4, 100_000)
	f.ok("bash", map[string]any{"command": "python3 -q -i", "tty": true})
	f.until("j1", ">>> █")
	got := f.ok("bash_input", map[string]any{"job": "j1", "input": "2+3<Left><Left><Del>*<End>0<Enter>"})
	if want := ">>> 2*30\n60\n>>> █"; !strings.Contains(got, want) {
		f.until("j1", want)
	}
	f.ok("bash_input", map[string]any{"job": "j1", "input": "<C-d>"})
}

// callText is the text of a call that must succeed, with env.
func (f *fixture) callText(env *tools.Env, name string, args map[string]any) string {
	f.t.Helper()
	res := f.callEnv(env, name, args)
	if res.IsError {
		f.t.Fatalf("%s(%v): %s", name, args, resultText(f.t, res))
	}
	return resultText(f.t, res)
}

func TestTTYErrors(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.fails("bash", map[string]any{"command": "vim", "cols": 100}, "cols and rows size a terminal: give tty: true with them")
	f.fails("bash", map[string]any{"command": "vim", "tty": true, "cols": 9}, `argument "cols" must be 10 or more, got 9`)
	f.fails("bash", map[string]any{"command": "vim", "tty": true, "rows": 201}, `argument "rows" must be 200 or less, got 201`)
	f.fails("bash", map[string]any{"command": "vim", "tty": true, "reset": true}, "reset applies to a foreground command")
	f.ok("bash", map[string]any{"command": "read x", "tty": true})
	f.fails("bash_input", map[string]any{"job": "j1", "input": "hi<Entr>"}, "unknown key <Entr> in input")
	f.fails("bash_output", map[string]any{"job": "j1", "offset": 0}, "job j1 is on a terminal: bash_output answers its screen; offset pages its raw output: give raw: true with it")
	f.fails("bash_input", map[string]any{"job": "j1", "cols": 501}, `argument "cols" must be 500 or less, got 501`)
	// A job without a terminal: its input is text as it is, key names and
	// all; it has no size.
	id := f.startJob("cat", "")
	f.fails("bash_input", map[string]any{"job": id, "cols": 100}, "job "+id+" is not on a terminal: cols and rows resize the terminal of a job started with bash tty: true")
	if got := f.more(id, f.ok("bash_input", map[string]any{"job": id, "input": "a<Enter>b\n"}), "a<Enter>b\n"); !strings.HasPrefix(got, "a<Enter>b\n[job ") {
		t.Errorf("a pipe job's input: %q", got)
	}
	f.fails("bash_input", map[string]any{"job": "j9", "rows": 10}, "no job j9 in this thread")
}

// A screen rebuilt from output whose start is no longer kept (over a MiB
// printed) says so above it.
func TestTTYRebuiltFromTail(t *testing.T) {
	t.Parallel()
	f := newFixture(t) // no cache: every call rebuilds the screen
	f.ok("bash", map[string]any{"command": `head -c 1200000 /dev/zero | tr '\0' x; printf '\033[2J\033[Hfinal'; read x`, "tty": true})
	got := f.until("j1", "final█")
	m := regexp.MustCompile(`^\[the screen is drawn from the job's output after its first (\d+) characters, which are no longer kept: what the program drew before them and not since is missing\]\nfinal█\n\[screen 80x24, cursor at row 1, col 6\]\n\[job j1 running; next offset \d+\]$`).FindStringSubmatch(got)
	if m == nil || len(m[1]) < 5 {
		t.Fatalf("%q", got)
	}
	f.ok("bash_kill", map[string]any{"job": "j1", "signal": "KILL"})
}
