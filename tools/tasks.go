package tools

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// A job as an MCP task (SPEC §20). A bash call of a client that takes
// tasks, still running at yield_after, goes on as a task (Env.Tasks,
// Result.Task); the server's tasks/get, tasks/update and tasks/cancel
// (server/tasks.go) read, feed and end it through ReadTask, TaskInput and
// CancelTask. The task is the job: the same id, the state the sandbox's
// supervisor keeps for it, nothing stored beside it — where the job
// outlives the server (docker, kubernetes), so does the task. Any job of
// the thread answers by its id, and only the thread's: the caller's
// sandbox is the only one asked.

// Task states, as the MCP tasks extension names them.
const (
	TaskWorking   = "working"
	TaskCompleted = "completed"
	TaskCancelled = "cancelled"
)

// Errors of the task operations: the request names no task of the thread
// (ErrNoTask), or one that cannot take it now (ErrTaskRefused); errors.Is
// tells them, their text says why. Any other error is the sandbox's.
var (
	ErrNoTask      = errors.New("no such task")
	ErrTaskRefused = errors.New("the task refuses it")
)

// taskErr is an error of kind ErrNoTask or ErrTaskRefused.
type taskErr struct {
	kind error
	msg  string
}

func (e *taskErr) Error() string { return e.msg }
func (e *taskErr) Unwrap() error { return e.kind }

func noTask(format string, args ...any) error {
	return &taskErr{kind: ErrNoTask, msg: fmt.Sprintf(format, args...)}
}

func refused(format string, args ...any) error {
	return &taskErr{kind: ErrTaskRefused, msg: fmt.Sprintf(format, args...)}
}

const (
	// taskTailLines and taskTailChars bound a working task's status
	// message: the last lines of its output.
	taskTailLines = 5
	taskTailChars = 500
	// taskCancelGrace: tasks/cancel sends TERM, then KILL to a group
	// still running after it.
	taskCancelGrace = 2 * time.Second
	// atEnd, as an offset, reads nothing but where the output ends.
	atEnd = int64(1) << 60
)

// JobTask is a job as a task sees it.
type JobTask struct {
	ID    string
	State string // TaskWorking, TaskCompleted or TaskCancelled
	// Created is when the job began; Updated when it ended (Created while
	// it runs: what changes then is its output, in Message).
	Created, Updated time.Time
	// Message says, masked: the last lines of the output while it runs;
	// how it ended once it did.
	Message string
	// Result is a completed task's: what the bash call would have answered
	// had it waited — its output (masked, its middle cut past the output
	// limit, the notice naming the job's log, which keeps it whole), then
	// [exit code N].
	Result *Result
}

// ReadTask is the task of job id, read without moving what bash_output
// shows next.
func ReadTask(ctx context.Context, env *Env, id string) (JobTask, error) {
	jobs, err := taskJobs(env, id)
	if err != nil {
		return JobTask{}, err
	}
	end, err := jobs.PeekJobOutput(ctx, id, atEnd, 0)
	if err != nil {
		return JobTask{}, taskError(ctx, env, id, err)
	}
	info := end.Job
	t := JobTask{ID: id, Created: info.StartedAt, Updated: info.StartedAt}
	if info.State != sandbox.JobRunning && !info.EndedAt.IsZero() {
		t.Updated = info.EndedAt
	}
	switch {
	case info.State == sandbox.JobRunning:
		t.State = TaskWorking
		t.Message = taskTail(ctx, env, jobs, id, end.NextOffset)
	case info.KillRequested && info.State == sandbox.JobKilled:
		// Ended by a kill request (tasks/cancel, bash_kill): cancelled. One
		// that survived the signal and exited is completed, as its end says.
		t.State = TaskCancelled
		t.Message = fmt.Sprintf("cancelled: its process group was ended (SIG%s)", info.Signal)
	default:
		t.State = TaskCompleted
		t.Message = fmt.Sprintf("exited with code %d", info.Code)
		if t.Result, err = waitedResult(ctx, env, jobs, info); err != nil {
			return JobTask{}, taskError(ctx, env, id, err)
		}
	}
	return t, nil
}

// TaskInput writes input (at most 64 KiB) to the task's stdin, then
// closes it with close.
func TaskInput(ctx context.Context, env *Env, id, input string, close bool) error {
	jobs, err := taskJobs(env, id)
	if err != nil {
		return err
	}
	if input == "" && !close {
		return refused("nothing to do: give input, close, or both")
	}
	if len(input) > maxJobInput {
		return refused("input is %d bytes: at most %d in one update", len(input), maxJobInput)
	}
	if _, err := jobs.JobInput(ctx, id, []byte(input), close); err != nil {
		return taskError(ctx, env, id, err)
	}
	return nil
}

// CancelTask ends the task's whole process group: TERM, then KILL when it
// still runs taskCancelGrace later. A task that ended already stays as it
// ended.
func CancelTask(ctx context.Context, env *Env, id string) error {
	jobs, err := taskJobs(env, id)
	if err != nil {
		return err
	}
	for _, sig := range []string{"TERM", "KILL"} {
		info, err := jobs.KillJob(ctx, id, sig)
		if errors.Is(err, sandbox.ErrJobEnded) {
			return nil
		}
		if err != nil {
			return taskError(ctx, env, id, err)
		}
		if info.State != sandbox.JobRunning || jobEnds(ctx, jobs, id, taskCancelGrace) {
			return nil
		}
	}
	return nil
}

// jobEnds waits up to d for the job's end, and reports whether it ended.
func jobEnds(ctx context.Context, jobs sandbox.Jobs, id string, d time.Duration) bool {
	for deadline := time.Now().Add(d); ; {
		o, err := jobs.PeekJobOutput(ctx, id, atEnd, max(time.Until(deadline), 0))
		if err != nil || o.Job.State != sandbox.JobRunning {
			return err == nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
	}
}

// taskJobs is the jobs of the caller's sandbox, once id is a job's id.
func taskJobs(env *Env, id string) (sandbox.Jobs, error) {
	if !jobID.MatchString(id) {
		return nil, noTask("%q is no task of this thread (its tasks are its jobs: j1, j2, …)", cutHeadOnly(id, 40))
	}
	jobs, err := jobsOf(env)
	if err != nil {
		return nil, noTask("%v", err)
	}
	return jobs, nil
}

// taskError words a sandbox's job error for a task request.
func taskError(ctx context.Context, env *Env, id string, err error) error {
	switch {
	case errors.Is(err, sandbox.ErrNoJob):
		if _, serr := env.Sandbox.FS().Stat(ctx, logPath(id)); serr == nil {
			return noTask("task %s no longer runs here: its sandbox was ended since it started (released, removed or restarted), or it ended long ago and was forgotten; its output is in %s", id, logPath(id))
		}
		return noTask("no task %s in this thread", id)
	case errors.Is(err, sandbox.ErrJobNoInput):
		return refused("task %s takes no input: its stdin was closed, or its bash call did not come as a task's", id)
	case errors.Is(err, sandbox.ErrJobEnded):
		return refused("task %s has ended: it takes no input", id)
	case errors.Is(err, sandbox.ErrJobBlocked):
		return refused("task %s is not reading its input: nothing was written (it may be busy; try again)", id)
	}
	return err
}

// taskTail is the last lines of a running job's output (next: where it
// ends), masked whole before they are cut: at most taskTailLines lines
// and taskTailChars characters.
func taskTail(ctx context.Context, env *Env, jobs sandbox.Jobs, id string, next int64) string {
	const none = "running; no output yet"
	from := max(next-int64(taskTailChars*utf8.UTFMax+maskMargin), 0)
	o, err := jobs.PeekJobOutput(ctx, id, from, 0)
	if err != nil || len(o.Data) == 0 {
		return none
	}
	buf := o.Data
	if o.Offset > 0 {
		// The read starts inside the output: its first line is partial,
		// and a host path cut there would not be masked.
		if i := strings.IndexByte(string(buf), '\n'); i >= 0 && i < len(buf)-1 {
			buf = buf[i+1:]
		} else {
			buf = trimCutWord(buf, true)
		}
	}
	s := strings.TrimRight(validText(buf), "\r\n")
	if env.Mask != nil {
		s = env.Mask(s)
	}
	lines := strings.Split(s, "\n")
	s = strings.Join(lines[max(len(lines)-taskTailLines, 0):], "\n")
	if s = cutTail(s, taskTailChars); strings.TrimSpace(s) == "" {
		return none
	}
	return s
}

// waitedResult is the answer a bash call that waited for the ended job
// would have given: its output cut as bash cuts it (the job's log keeps it
// whole and is named when it is cut), then its exit code.
func waitedResult(ctx context.Context, env *Env, jobs sandbox.Jobs, info sandbox.JobInfo) (*Result, error) {
	limit := env.Limits.BashOutputMaxChars
	c := outputCapture(limit)
	o, err := jobs.PeekJobOutput(ctx, info.ID, 0, 0)
	if err != nil {
		return nil, err
	}
	if o.Offset > 0 {
		// Its start is no longer in memory (the last MiB is): the log's
		// head, then a gap of what is in neither (counted in characters,
		// as offsets are).
		head := logHead(ctx, env.Sandbox.FS(), logPath(info.ID), captureHalf(limit))
		c.Write(head)
		c.Skip(o.Offset - charCount(head))
	}
	for len(o.Data) > 0 {
		c.Write(o.Data)
		if o, err = jobs.PeekJobOutput(ctx, info.ID, o.NextOffset, 0); err != nil {
			return nil, err
		}
	}
	body, truncated := bashOutput(c, limit, env.Mask, "")
	facts := &bashFacts{Truncated: truncated}
	if truncated {
		facts.Saved = savedAt(logPath(info.ID))
		body, _ = bashOutput(c, limit, env.Mask, facts.SavedTo)
	}
	if body != "" && !strings.HasSuffix(body, "\n") {
		body += "\n"
	}
	code := info.Code
	facts.ExitCode = &code
	r := &Result{CallToolResult: mcp.NewToolResultText(body + fmt.Sprintf("[exit code %d]", code)), ExitCode: &code, Truncated: truncated}
	r.StructuredContent = facts
	return r, nil
}

// logHead is the first n bytes of a job's log; nothing when it cannot be
// read.
func logHead(ctx context.Context, fsys sandbox.FS, name string, n int) []byte {
	f, err := fsys.Open(ctx, name)
	if err != nil {
		return nil
	}
	defer f.Close()
	b, _ := io.ReadAll(io.LimitReader(f, int64(n)))
	return b
}

// charCount counts the characters of b as job offsets do: the bytes that
// start a UTF-8 sequence.
func charCount(b []byte) int64 {
	var n int64
	for _, c := range b {
		if utf8.RuneStart(c) {
			n++
		}
	}
	return n
}
