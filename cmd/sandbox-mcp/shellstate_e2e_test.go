package main

import (
	"regexp"
	"strings"
	"testing"
	"time"
)

// A command that exports BASH_ENV naming a hook that exits 0 (#24 item
// 9) silences nothing: later calls and jobs answer their output and exit
// code, the shell state is still saved, and the command's children still
// read the hook. Nor does a working directory the command made
// unenterable, or a umask of 777, stop the state's save. On the local
// provider in bubblewrap (commands run as nobody there).
func TestE2EShellStateSurvivesBashEnv(t *testing.T) {
	t.Parallel()
	requireBwrap(t)
	p := start(t, opts{isolation: "bwrap"})
	shellStateSurvives(t, p.call)
}

// The same on the docker provider (the base image: bash, a non-root user).
func TestE2EDockerShellStateSurvivesBashEnv(t *testing.T) {
	t.Parallel()
	shellStateSurvives(t, dockerCall(t, "bashenv", 3*time.Minute))
}

func shellStateSurvives(t *testing.T, call func(string, map[string]any) (string, bool)) {
	t.Helper()
	want := func(command, want string) {
		t.Helper()
		if got, _ := call("bash", map[string]any{"command": command}); got != want {
			t.Errorf("bash %q = %q, want %q", command, got, want)
		}
	}
	want(`printf 'exit 0\n' > hook.sh; export BASH_ENV=$PWD/hook.sh`, "[exit code 0]")
	want(`echo hi; exit 3`, "hi\n[exit code 3]")
	got, _ := call("bash", map[string]any{"command": "echo job; exit 4", "run_in_background": true})
	m := regexp.MustCompile(`\[job (j\d+) started\]`).FindStringSubmatch(got)
	if m == nil {
		t.Fatalf("run_in_background: %q", got)
	}
	if got, _ := call("bash_output", map[string]any{"job": m[1], "offset": 0, "wait": 10}); !strings.HasPrefix(got, "job\n") || !strings.Contains(got, "exited with code 4") {
		t.Errorf("the job: %q, want its output and its exit code 4", got)
	}
	want(`cd /tmp && export X=1`, "[exit code 0]")
	want(`pwd; echo "$X" "$BASH_ENV"; bash -c 'echo a child reads the hook'; echo "child: $?"`,
		"/tmp\n1 /mnt/user-data/workspace/hook.sh\nchild: 0\n[exit code 0]")

	// A directory that cannot be entered: the next command starts in the
	// workspace, its variables kept.
	if got, _ := call("bash", map[string]any{"command": "cd /mnt/user-data/workspace && mkdir -p locked && cd locked && export K=kept && chmod 000 .", "reset": true}); got != "[exit code 0]" {
		t.Fatalf("locked: %q", got)
	}
	want(`pwd; echo "$K"; chmod 755 locked`, "/mnt/user-data/workspace\nkept\n[exit code 0]")
	// umask 777: the state file the trap writes is still read.
	want(`umask 777; cd /tmp; export U=1`, "[exit code 0]")
	want(`pwd; echo "$U"`, "/tmp\n1\n[exit code 0]")
}
