package tools_test

import (
	"regexp"
	"strings"
	"testing"
	"time"
)

// The job tools (SPEC §15) on the local provider's host bash, through the
// thread's real supervisor.

// jobEnd matches a job's state line, with the job id and next offset.
var jobEnd = regexp.MustCompile(`\[job (j\d+) (running|exited with code (\d+)); next offset (\d+)\]$`)

// startedJob matches run_in_background's answer: the output of the job's
// first moments, "[job J started]", and the end line if it ended already.
var startedJob = regexp.MustCompile(`(?s)^(.*?)\[job (j\d+) started\](\n\[job j\d+ exited with code \d+; next offset \d+\])?$`)

// startJob starts command in the background and checks that its output,
// as much as its first moments showed and then bash_output (waiting, for a
// slow machine) adds, is want; it returns the job's id.
func (f *fixture) startJob(command, want string) string {
	f.t.Helper()
	got := f.ok("bash", map[string]any{"command": command, "run_in_background": true})
	m := startedJob.FindStringSubmatch(got)
	if m == nil {
		f.t.Fatalf("run_in_background %q = %q", command, got)
	}
	// Each answer ends its output with a line break: compare without them.
	flat := func(s string) string { return strings.ReplaceAll(s, "\n", "") }
	out, id := m[1], m[2]
	for deadline := time.Now().Add(10 * time.Second); len(flat(out)) < len(flat(want)) && time.Now().Before(deadline); {
		more := f.ok("bash_output", map[string]any{"job": id, "wait": 1})
		out += jobEnd.ReplaceAllString(more, "")
	}
	if flat(out) != flat(want) {
		f.t.Fatalf("job %s (%q) printed %q, want %q", id, command, out, want)
	}
	return id
}

// more adds to got, an answer about job id, what bash_output (waiting)
// says next until got holds want: on a slow machine a job may answer
// after an answer's glimpse. The state lines in between are dropped.
func (f *fixture) more(id, got, want string) string {
	f.t.Helper()
	for i := 0; !strings.Contains(got, want) && i < 10; i++ {
		got = jobEnd.ReplaceAllString(got, "") + f.ok("bash_output", map[string]any{"job": id, "wait": 1})
	}
	return got
}

func (f *fixture) fails(name string, args map[string]any, want string) {
	f.t.Helper()
	res := f.call(name, args)
	got := resultText(f.t, res)
	if !res.IsError || !strings.Contains(got, want) {
		f.t.Errorf("%s(%v) = %q (isError %v), want an error containing %q", name, args, got, res.IsError, want)
	}
}

func TestJobBackground(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	if id := f.startJob("echo ready; pwd; sleep 30", "ready\n"+ws+"\n"); id != "j1" {
		t.Fatalf("the first job is %s", id)
	}
	if got := f.ok("bash_output", map[string]any{}); got != "j1 running: echo ready; pwd; sleep 30" {
		t.Errorf("list = %q", got)
	}
	// What was shown is not shown again; from offset 0 it is.
	if got, want := f.ok("bash_output", map[string]any{"job": "j1"}), "[job j1 running; next offset "; !strings.HasPrefix(got, want) {
		t.Errorf("bash_output = %q, want nothing new then %q", got, want)
	}
	got := f.ok("bash_output", map[string]any{"job": "j1", "offset": 0})
	if !strings.HasPrefix(got, "ready\n"+ws+"\n[job j1 running; next offset ") {
		t.Errorf("bash_output offset 0 = %q", got)
	}
	got = f.ok("bash_kill", map[string]any{"job": "j1"})
	if !strings.Contains(got, "[job j1 was killed by SIGTERM]") || !jobEnd.MatchString(got) || !strings.Contains(got, "exited with code 143") {
		t.Errorf("bash_kill = %q, want killed by SIGTERM and exited with code 143", got)
	}
	if got := f.ok("bash_output", map[string]any{}); !strings.HasPrefix(got, "j1 killed by SIGTERM (code 143): ") {
		t.Errorf("list after kill = %q", got)
	}
	f.fails("bash_kill", map[string]any{"job": "j9"}, "no job j9 in this thread")
}

func TestJobYield(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	got := f.ok("bash", map[string]any{"command": "echo a; sleep 3; echo b", "yield_after": 1})
	if got != "a\n[still running as job j1]" {
		t.Fatalf("yield = %q", got)
	}
	// wait answers once there is new output, or at the end.
	got = f.ok("bash_output", map[string]any{"job": "j1", "wait": 10})
	if !strings.HasPrefix(got, "b\n[job j1 ") || !strings.HasSuffix(got, "; next offset 4]") {
		t.Errorf("bash_output wait = %q", got)
	}
	if !strings.Contains(got, "exited") {
		got = f.ok("bash_output", map[string]any{"job": "j1", "wait": 10})
	}
	if got != "[job j1 exited with code 0; next offset 4]" && got != "b\n[job j1 exited with code 0; next offset 4]" {
		t.Errorf("bash_output at the end = %q", got)
	}
	got = f.ok("bash_output", map[string]any{"job": "j1", "offset": 0})
	if got != "a\nb\n[job j1 exited with code 0; next offset 4]" {
		t.Errorf("bash_output offset 0 = %q", got)
	}
	// A command that became a job in the foreground has no stdin.
	f.ok("bash", map[string]any{"command": "sleep 5", "yield_after": 0.1})
	f.fails("bash_input", map[string]any{"job": "j2", "input": "x\n"}, "job j2 takes no input")
	f.ok("bash_kill", map[string]any{"job": "j2", "signal": "KILL"})
	// yield_after 0: the timeout alone bounds it.
	got = f.ok("bash", map[string]any{"command": "sleep 5", "yield_after": 0, "timeout": 0.3})
	if got != "[timed out after 1s]" {
		t.Errorf("yield_after 0 = %q", got)
	}
}

func TestJobInput(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.startJob(`printf 'name? '; read n; echo "hi $n"; read m; echo "bye $m"`, "name? ")
	got := f.more("j1", f.ok("bash_input", map[string]any{"job": "j1", "input": "bob\n"}), "hi bob\n")
	if !strings.HasPrefix(got, "hi bob\n[job j1 running; next offset") {
		t.Errorf("bash_input = %q", got)
	}
	got = f.more("j1", f.ok("bash_input", map[string]any{"job": "j1", "close": true}), "exited")
	if got != "bye \n[job j1 exited with code 0; next offset 18]" {
		t.Errorf("bash_input close = %q", got)
	}
	f.fails("bash_input", map[string]any{"job": "j1", "input": "late\n"}, "job j1 has ended")
}

func TestJobBadArguments(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.fails("bash_output", map[string]any{"job": "../j1"}, `job "../j1": not a job id`)
	f.fails("bash_output", map[string]any{"job": "j0"}, "not a job id")
	f.fails("bash_output", map[string]any{"wait": 5}, "name the job")
	f.fails("bash_output", map[string]any{"job": "j1", "offset": -1}, "offset")
	f.fails("bash_output", map[string]any{"job": "j1", "wait": "5"}, "wait")
	f.fails("bash_kill", map[string]any{"job": "j1", "signal": "HUP"}, "signal")
	f.fails("bash_input", map[string]any{"job": "j1"}, "nothing to do")
	f.fails("bash_input", map[string]any{"job": "j1", "input": strings.Repeat("x", 64<<10+1)}, "at most 65536")
	f.fails("bash_input", map[string]any{"input": "x"}, "job")
	f.fails("bash", map[string]any{"command": "true", "run_in_background": true, "reset": true}, "reset applies to a foreground command")
	f.fails("bash", map[string]any{"command": "true", "yield_after": -1}, "yield_after")
	if got := f.ok("bash_output", map[string]any{}); got != "no jobs" {
		t.Errorf("list = %q", got)
	}
}

func TestJobCap(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	env := *f.env
	env.Limits.JobsMax = 2
	for range 2 {
		if res := f.callEnv(&env, "bash", map[string]any{"command": "sleep 30", "run_in_background": true}); res.IsError {
			t.Fatalf("start: %s", resultText(t, res))
		}
	}
	res := f.callEnv(&env, "bash", map[string]any{"command": "sleep 30", "run_in_background": true})
	if got := resultText(t, res); !res.IsError || !strings.Contains(got, "2") || !strings.Contains(got, "bash_kill") {
		t.Errorf("third job = %q, want refused naming the cap and bash_kill", got)
	}
	// A foreground command past yield_after at the cap stays in the
	// foreground: its timeout ends it.
	if got := resultText(t, f.callEnv(&env, "bash", map[string]any{"command": "sleep 3; echo done", "yield_after": 0.2, "timeout": 10})); got != "done\n[exit code 0]" {
		t.Errorf("yield at the cap = %q", got)
	}
	f.ok("bash_kill", map[string]any{"job": "j1", "signal": "KILL"})
	if res := f.callEnv(&env, "bash", map[string]any{"command": "sleep 30", "run_in_background": true}); res.IsError {
		t.Errorf("a job after one ended: %s", resultText(t, res))
	}
}

// A job whose sandbox ended (its supervisor killed here, as a release or a
// restart would) is not "no such job": its log says it ran, and the error
// says what became of it and where its output is.
func TestJobOfAnEndedSandbox(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.startJob("echo started; sleep 30", "started\n")
	f.call("bash", map[string]any{"command": "kill -9 $PPID"}) // the supervisor
	f.fails("bash_output", map[string]any{"job": "j1"}, "job j1 no longer runs here: its sandbox was ended since it started")
	f.fails("bash_kill", map[string]any{"job": "j1"}, "its output is in /mnt/user-data/outputs/.tool-results/jobs/j1.log")
	f.fails("bash_output", map[string]any{"job": "j7"}, "no job j7 in this thread")
}

// The shell state through the bash tool: cd and export carry over, reset
// starts afresh, a job starts from the state.
func TestBashShellState(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.ok("bash", map[string]any{"command": "mkdir -p sub && cd sub && export GREETING=hello"})
	if got := f.ok("bash", map[string]any{"command": `pwd; echo "$GREETING"`}); got != ws+"/sub\nhello\n[exit code 0]" {
		t.Errorf("state: %q", got)
	}
	f.startJob(`pwd; echo "$GREETING"`, ws+"/sub\nhello\n") // a job starts from the state
	if got := f.ok("bash", map[string]any{"command": `pwd; echo "[$GREETING]"`, "reset": true}); got != ws+"\n[]\n[exit code 0]" {
		t.Errorf("reset: %q", got)
	}
	// bash's errors quote the agent's line, not the state's machinery (nor
	// the spare shell's: "eval: line 1:" there, where bash -c says "-c:
	// line 1:").
	got := f.ok("bash", map[string]any{"command": "if then fi"})
	if !strings.HasSuffix(got, " line 1: `if then fi'\n[exit code 2]") || strings.Contains(got, "trap") || strings.Contains(got, "__smcp") ||
		!strings.Contains(got, ": -c: line 1: ") && !strings.Contains(got, ": eval: line 1: ") {
		t.Errorf("syntax error: %q", got)
	}
}

// Job ids go on after the logs of an earlier life of the sandbox: a new
// job never takes an old one's id (nor overwrites its log), and a planted
// log name cannot push ids past what the tools take.
func TestJobIDsOutliveTheSandbox(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.ok("bash", map[string]any{"command": "echo first; sleep 30", "run_in_background": true})
	f.call("bash", map[string]any{"command": "kill -9 $PPID"}) // the supervisor
	if id := f.startJob("echo second", "second\n"); id != "j2" {
		t.Errorf("after a new supervisor, the job is %s, want j2", id)
	}
	if got := f.ok("read_file", map[string]any{"path": "/mnt/user-data/outputs/.tool-results/jobs/j1.log"}); got != "first\n" {
		t.Errorf("j1's log: %q", got)
	}
	f.call("bash", map[string]any{"command": "touch /mnt/user-data/outputs/.tool-results/jobs/j99999999999.log /mnt/user-data/outputs/.tool-results/jobs/j41.log; kill -9 $PPID"})
	if got := f.ok("bash", map[string]any{"command": "true", "run_in_background": true}); !strings.HasPrefix(got, "[job j42 started]") {
		t.Errorf("after planted logs: %q", got)
	}
}

// A command cut past the output limit that becomes a job names the job's
// log, which keeps its whole output, not a file that stops at the yield.
func TestJobYieldTruncatedNamesTheLog(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	env := *f.env
	env.Limits.BashOutputMaxChars = 100
	res := f.callEnv(&env, "bash", map[string]any{"command": "seq 1000; sleep 5", "yield_after": 1})
	got := resultText(t, res)
	if !strings.Contains(got, "the whole output is in /mnt/user-data/outputs/.tool-results/jobs/j1.log") || !strings.HasSuffix(got, "[still running as job j1]") {
		t.Errorf("a cut output that became a job: %q", got)
	}
	f.ok("bash_kill", map[string]any{"job": "j1", "signal": "KILL"})
}
