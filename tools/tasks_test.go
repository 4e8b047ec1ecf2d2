package tools_test

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/sandbox-mcp/sandbox-mcp/tools"
)

// Jobs as MCP tasks (SPEC §20), on the local provider's host bash through
// the thread's real supervisor.

// taskOf starts command as a bash call of a client that takes tasks, past
// yield_after: it answers §15's text and names its task.
func (f *fixture) taskOf(command string) string {
	f.t.Helper()
	env := *f.env
	env.Tasks = true
	res := f.callEnv(&env, "bash", map[string]any{"command": command, "yield_after": 0.5})
	if res.Task == "" || !strings.HasSuffix(resultText(f.t, res), "[still running as job "+res.Task+"]") {
		f.t.Fatalf("bash %q as a task: %q, task %q", command, resultText(f.t, res), res.Task)
	}
	return res.Task
}

// ended polls the task until it is no longer working.
func (f *fixture) ended(id string) tools.JobTask {
	f.t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		task, err := tools.ReadTask(f.t.Context(), f.env, id)
		if err != nil {
			f.t.Fatalf("ReadTask %s: %v", id, err)
		}
		if task.State != tools.TaskWorking {
			return task
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("task %s still working after a minute: %+v", id, task)
		}
	}
}

// A completed task's result is what the bash call would have answered had
// it waited: the same output, cut by the same rule (head and tail within
// the output limit, the notice in between counting what it leaves out and
// naming the job's log, which keeps it whole, where bash names its saved
// output), and the same exit line — also past what the job keeps in memory
// (its head then comes from the log).
func TestTaskResultIsTheWaitedAnswer(t *testing.T) {
	t.Parallel()
	seq := func(n int) string {
		var b strings.Builder
		for i := 1; i <= n; i++ {
			fmt.Fprintf(&b, "%d\n", i)
		}
		return b.String()
	}
	for _, tt := range []struct{ name, command, full string }{
		{"short", `printf 'a\nb\n'; echo c >&2`, ""},
		{"no output", `true`, ""},
		{"exit code", `echo x; exit 3`, ""},
		{"cut", `seq 1 20000`, seq(20000)},
		{"past memory", `seq 1 300000`, seq(300000)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			waited := f.call("bash", map[string]any{"command": tt.command, "yield_after": 0})
			id := f.taskOf("sleep 1; " + tt.command)
			task := f.ended(id)
			if task.State != tools.TaskCompleted || task.Result == nil || task.Updated.Before(task.Created) {
				t.Fatalf("%+v", task)
			}
			want, got := resultText(t, waited), resultText(t, task.Result)
			if task.Result.Truncated != waited.Truncated || *task.Result.ExitCode != *waited.ExitCode || task.Result.IsError {
				t.Errorf("facts: task %+v, waited %+v", task.Result, waited)
			}
			checkFacts(t, "bash", task.Result)
			if tt.full == "" {
				if got != want {
					t.Errorf("task result %q, the waited call's %q", got, want)
				}
				return
			}
			for _, c := range []struct{ what, text, saved string }{
				{"the waited call's", want, `\S+-bash-\S+\.txt`},
				{"the task's", got, regexp.QuoteMeta("/mnt/user-data/outputs/.tool-results/jobs/" + id + ".log")},
			} {
				m := regexp.MustCompile(`(?s)^(.*)\n\[\.\.\. (\d+) bytes of output truncated; the whole output is in ` + c.saved +
					` \(read it with read_file and line ranges\) \.\.\.\]\n(.*)\[exit code 0\]$`).FindStringSubmatch(c.text)
				if m == nil {
					t.Errorf("%s result: %.300q…", c.what, c.text)
					continue
				}
				head, tail := m[1], m[3]
				n, _ := strconv.Atoi(m[2])
				if !strings.HasPrefix(tt.full, head) || !strings.HasSuffix(tt.full, tail) || len(head)+n+len(tail) != len(tt.full) ||
					utf8.RuneCountInString(c.text) > tools.DefaultLimits().BashOutputMaxChars+len("[exit code 0]") || len(head) < 9000 || len(tail) < 9000 {
					t.Errorf("%s result: head %d bytes, %d left out, tail %d bytes, of %d", c.what, len(head), n, len(tail), len(tt.full))
				}
			}
		})
	}
}

func TestTaskLife(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id := f.taskOf(`for i in 1 2 3 4 5 6 7; do echo line$i; done; echo "in $PWD"; read x; echo got $x; read y; echo then $y`)
	// Working: the last lines of its output, masked, as the status.
	var task tools.JobTask
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(task.Message, "in "); time.Sleep(20 * time.Millisecond) {
		var err error
		if task, err = tools.ReadTask(f.t.Context(), f.env, id); err != nil || time.Now().After(deadline) {
			t.Fatalf("%+v %v", task, err)
		}
	}
	if task.State != tools.TaskWorking || task.Message != "line4\nline5\nline6\nline7\nin "+ws || !task.Created.Equal(task.Updated) {
		t.Errorf("working: %+v", task)
	}
	// Reading the task shows the agent nothing: bash_output still has it
	// all to show (past what the call answered).
	if got := f.ok("bash_output", map[string]any{"job": id}); strings.Contains(got, "line1") || !strings.HasPrefix(got, "[job "+id+" running") && !strings.Contains(got, "in "+ws) {
		t.Errorf("bash_output after the task was read: %q", got)
	}
	if err := tools.TaskInput(f.t.Context(), f.env, id, "one\n", false); err != nil {
		t.Fatal(err)
	}
	if err := tools.TaskInput(f.t.Context(), f.env, id, "", true); err != nil {
		t.Fatal(err)
	}
	task = f.ended(id)
	if text := resultText(t, task.Result); !strings.HasSuffix(text, "in "+ws+"\ngot one\nthen\n[exit code 0]") || task.Message != "exited with code 0" {
		t.Errorf("ended: %q %+v", text, task)
	}
	for _, err := range []error{
		tools.TaskInput(f.t.Context(), f.env, id, "late\n", false),
		tools.TaskInput(f.t.Context(), f.env, id, "", false),
	} {
		if !errors.Is(err, tools.ErrTaskRefused) {
			t.Errorf("input to an ended task: %v", err)
		}
	}
	// Cancel: TERM to the group; a task that ignores it gets KILL.
	id = f.taskOf(`trap '' TERM; echo stubborn; sleep 60 & wait; sleep 60`)
	if err := tools.CancelTask(f.t.Context(), f.env, id); err != nil {
		t.Fatal(err)
	}
	if task := f.ended(id); task.State != tools.TaskCancelled || task.Result != nil || !strings.Contains(task.Message, "SIGKILL") {
		t.Errorf("cancelled: %+v", task)
	}
	if err := tools.CancelTask(f.t.Context(), f.env, id); err != nil {
		t.Errorf("cancel of an ended task: %v", err)
	}
	// A job that was no task's call is still a task by its id: no stdin.
	bg := f.startJob("echo bg; sleep 60", "bg\n")
	if err := tools.TaskInput(f.t.Context(), f.env, bg, "x\n", false); err != nil {
		t.Errorf("a background job's stdin: %v", err)
	}
	// One that outran yield_after for a caller that takes no tasks has no
	// stdin (§15 as it was).
	if res := f.call("bash", map[string]any{"command": "sleep 60", "yield_after": 0.2}); res.Task != "" {
		t.Errorf("a caller that takes no tasks got one: %q", res.Task)
	}
	list := f.ok("bash_output", map[string]any{})
	m := regexp.MustCompile(`(j\d+) running: sleep 60`).FindStringSubmatch(list)
	if m == nil {
		t.Fatalf("jobs: %q", list)
	}
	if err := tools.TaskInput(f.t.Context(), f.env, m[1], "x\n", false); !errors.Is(err, tools.ErrTaskRefused) || !strings.Contains(err.Error(), "takes no input") {
		t.Errorf("stdin of a §15 job: %v", err)
	}
	for _, id := range []string{"j99", "bogus", "", "../j1"} {
		if _, err := tools.ReadTask(f.t.Context(), f.env, id); !errors.Is(err, tools.ErrNoTask) {
			t.Errorf("ReadTask %q: %v", id, err)
		}
		if err := tools.CancelTask(f.t.Context(), f.env, id); !errors.Is(err, tools.ErrNoTask) {
			t.Errorf("CancelTask %q: %v", id, err)
		}
	}
	tools.CancelTask(f.t.Context(), f.env, bg)
	tools.CancelTask(f.t.Context(), f.env, m[1])
}
