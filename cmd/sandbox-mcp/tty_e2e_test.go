package main

import (
	"context"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// Terminals (SPEC §20) through the real binary and go-sdk's client, on
// every provider: vim edits a file, top shows its header and quits on q,
// a Python REPL answers and sees its terminal resized, git add -p stages
// a hunk. The programs are the sandbox's own: the host's in bubblewrap
// (.ci/run installs vim-tiny, git, python3), the base image's in a
// container and a Pod (deploy/docker/build-images.sh).

// ttyCall is a tool call: the result's text and whether it is an error.
type ttyCall func(name string, args map[string]any) (string, bool)

// ttyScreen is a screen answer: its rows, the line under them, its last.
var ttyScreen = regexp.MustCompile(`(?s)^(.*)\n(\[screen (\d+)x(\d+), [^\n]*\])\n(\[job (j\d+) [^\n]*\])$`)

// started is the id of the job a bash tty: true answer started.
func started(t *testing.T, got string) string {
	t.Helper()
	m := regexp.MustCompile(`(?s)\n\[screen \d+x\d+, [^\n]*\]\n\[job (j\d+) started\](\n\[job j\d+ exited [^\n]*\])?$`).FindStringSubmatch(got)
	if m == nil {
		t.Fatalf("bash tty: not a started screen: %q", got)
	}
	return m[1]
}

// untilScreen calls bash_output on job id (waiting) until its screen
// holds want, and returns that answer.
func untilScreen(t *testing.T, call ttyCall, id, want string) string {
	t.Helper()
	var got string
	for deadline := time.Now().Add(45 * time.Second); time.Now().Before(deadline); {
		var isErr bool
		got, isErr = call("bash_output", map[string]any{"job": id, "wait": 2})
		if isErr {
			t.Fatalf("bash_output %s: %s", id, got)
		}
		if !ttyScreen.MatchString(got) {
			t.Fatalf("bash_output %s: not a screen answer: %q", id, got)
		}
		if strings.Contains(got, want) {
			return got
		}
	}
	t.Fatalf("job %s: no %q on its screen:\n%s", id, want, got)
	return ""
}

// input is bash_input on a terminal job; the answer is its screen.
func input(t *testing.T, call ttyCall, id string, args map[string]any) string {
	t.Helper()
	args["job"] = id
	got, isErr := call("bash_input", args)
	if isErr || !ttyScreen.MatchString(got) {
		t.Fatalf("bash_input %v: %q", args, got)
	}
	return got
}

func ttyScenario(t *testing.T, call ttyCall) {
	t.Helper()
	// vim: open a file, insert a line above the first, write and quit.
	if got, isErr := call("write_file", map[string]any{"path": "notes.txt", "content": "first line\n"}); isErr {
		t.Fatal(got)
	}
	got, isErr := call("bash", map[string]any{"command": "vi notes.txt", "tty": true})
	if isErr {
		t.Fatalf("bash tty: %s", got)
	}
	vi := started(t, got)
	got = untilScreen(t, call, vi, "first line")
	if !strings.HasPrefix(got, "first line\n~\n") || !strings.Contains(got, `"notes.txt"`) || !strings.Contains(got, "[screen 80x24, cursor at row 1, col 1 on \"f\"]") {
		t.Fatalf("vi's first screen: %q", got)
	}
	// Back in normal mode (a lone Esc is waited on: vim takes it as Esc
	// only once no key's sequence follows), the cursor on the last letter.
	got = input(t, call, vi, map[string]any{"input": "Ohello from vim<Esc>"})
	if want := "hello from vim\nfirst line\n"; !strings.HasPrefix(got, want) || !strings.Contains(got, `[screen 80x24, cursor at row 1, col 14 on "m"]`) {
		got = untilScreen(t, call, vi, `[screen 80x24, cursor at row 1, col 14 on "m"]`)
		if !strings.HasPrefix(got, want) {
			t.Fatalf("vi after the insert: %q", got)
		}
	}
	input(t, call, vi, map[string]any{"input": ":wq<Enter>"})
	untilScreen(t, call, vi, "["+"job "+vi+" exited with code 0;")
	if got, _ := call("read_file", map[string]any{"path": "notes.txt"}); got != "hello from vim\nfirst line\n" {
		t.Fatalf("the file vim wrote: %q", got)
	}

	// top: its header on a wider screen, the cursor hidden; q quits.
	got, isErr = call("bash", map[string]any{"command": "top", "tty": true, "cols": 120, "rows": 30})
	if isErr {
		t.Fatalf("bash tty top: %s", got)
	}
	top := started(t, got)
	got = untilScreen(t, call, top, "load average")
	if m := ttyScreen.FindStringSubmatch(got); !strings.HasPrefix(m[1], "top - ") || !strings.Contains(m[1], "PID USER") || m[2] != "[screen 120x30, cursor hidden]" {
		t.Fatalf("top's screen: %q", got)
	}
	input(t, call, top, map[string]any{"input": "q"})
	untilScreen(t, call, top, "[job "+top+" exited with code 0;")

	// A Python REPL: it is on a terminal, computes, and sees a resize.
	got, isErr = call("bash", map[string]any{"command": "python3 -q -i", "tty": true})
	if isErr {
		t.Fatalf("bash tty python3: %s", got)
	}
	py := started(t, got)
	untilScreen(t, call, py, ">>> █")
	got = input(t, call, py, map[string]any{"input": "2+2<Enter>"})
	if want := ">>> 2+2\n4\n>>> █"; !strings.Contains(got, want) {
		got = untilScreen(t, call, py, want)
	}
	got = input(t, call, py, map[string]any{"input": "import os, shutil; print(os.isatty(0), tuple(shutil.get_terminal_size()))<Enter>", "cols": 100, "rows": 30})
	if want := "True (100, 30)\n>>> █"; !strings.Contains(got, want) {
		got = untilScreen(t, call, py, want)
	}
	if m := ttyScreen.FindStringSubmatch(got); m[3] != "100" || m[4] != "30" {
		t.Fatalf("after a resize: %q", got)
	}
	input(t, call, py, map[string]any{"input": "<C-d>"})
	untilScreen(t, call, py, "[job "+py+" exited with code 0;")

	// git add -p: a repository with a change; the hunk staged with y.
	if got, isErr := call("bash", map[string]any{"command": "(git init -q repo && cd repo && git config user.email e2e@example.com && git config user.name e2e && " +
		"printf 'a\\nb\\n' > f && git add f && git commit -qm one && printf 'a\\nB\\n' > f) && echo ready"}); isErr || !strings.HasPrefix(got, "ready\n") {
		t.Fatalf("the repository: %q", got)
	}
	got, isErr = call("bash", map[string]any{"command": "git -C repo add -p", "tty": true})
	if isErr {
		t.Fatalf("bash tty git add -p: %s", got)
	}
	git := started(t, got)
	untilScreen(t, call, git, "Stage this hunk")
	input(t, call, git, map[string]any{"input": "y<Enter>"})
	untilScreen(t, call, git, "[job "+git+" exited with code 0;")
	if got, _ := call("bash", map[string]any{"command": "git -C repo diff --cached"}); !strings.Contains(got, "\n-b\n+B\n") {
		t.Fatalf("git diff --cached: %q", got)
	}

	// The list says which jobs were on a terminal.
	if got, _ := call("bash_output", map[string]any{}); !strings.Contains(got, vi+" exited with code 0 on a terminal 80x24: vi notes.txt") {
		t.Fatalf("the list: %q", got)
	}
}

// The local provider, in bubblewrap: the terminal is the sandbox's own
// devpts (--dev).
func TestE2ETTYLocal(t *testing.T) {
	t.Parallel()
	requireBwrap(t)
	for _, tool := range []string{"vi", "top", "python3", "git"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("SKIPPED: no %s on the host (apt-get install vim-tiny procps python3 git)", tool)
		}
	}
	p := start(t, opts{isolation: "bwrap", thread: "tty"})
	ttyScenario(t, p.call)
}

// The docker provider, in the base image.
func TestE2ETTYDocker(t *testing.T) {
	t.Parallel()
	ttyScenario(t, dockerCall(t, "tty", 4*time.Minute))
}

// The kubernetes provider, in the base image (SANDBOX_MCP_K8S_IMAGE).
func TestE2ETTYKubernetes(t *testing.T) {
	t.Parallel()
	cfgFile, dir := k8sPythonConfig(t, "256Mi")
	cmd := exec.Command(binary(t), "--config", cfgFile, "--state-dir", filepath.Join(dir, "state"), "--audit-log", "off", "--thread", "tty")
	ctx, cancel := context.WithTimeout(t.Context(), 6*time.Minute)
	defer cancel()
	cs, stderr := stdioSession(t, ctx, cmd)
	defer cs.Close()
	ttyScenario(t, caller(t, ctx, cs, stderr))
}
