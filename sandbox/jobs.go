package sandbox

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Jobs is what a Sandbox whose processes may outlive the call that started
// them implements (SPEC §15): bash run_in_background and yield_after, and
// bash_output, bash_input, bash_kill. It is a separate, optional interface
// so that a provider without a resident process (or a test double) is
// still a Sandbox; tools ask for it with a type assertion. A job belongs
// to the sandbox: any user of the thread may name it by its id, and it
// ends when it exits, is killed, or the sandbox goes.
type Jobs interface {
	// StartJob starts the command as the thread's shell would run it (in
	// the workspace) and returns at once; its output goes to memory (the
	// last MiB) and to JobLogDir/<id>.log.
	StartJob(ctx context.Context, req JobRequest) (JobInfo, error)
	// JobOutput reads the job's output from offset (characters of its
	// output so far; Unshown: what no caller was shown yet). With wait (at
	// most a minute) it waits for output past offset or the job's end; a
	// cancelled ctx ends the wait, never the job.
	JobOutput(ctx context.Context, id string, offset int64, wait time.Duration) (JobOutput, error)
	// PeekJobOutput is JobOutput from offset (0 or more) that leaves what
	// no caller was shown yet as it was: a read that is not the agent's
	// (an MCP task's poll) does not take output from bash_output.
	PeekJobOutput(ctx context.Context, id string, offset int64, wait time.Duration) (JobOutput, error)
	// JobInput writes data (at most 64 KiB) to the job's stdin, then closes
	// it with close.
	JobInput(ctx context.Context, id string, data []byte, close bool) (JobInfo, error)
	// KillJob signals the job's whole process group: TERM, INT or KILL.
	// A terminal job's: every process group of its session.
	KillJob(ctx context.Context, id, signal string) (JobInfo, error)
	// ResizeJob sets a terminal job's size (ErrJobNoTTY for another job):
	// its programs get SIGWINCH and redraw.
	ResizeJob(ctx context.Context, id string, size TermSize) (JobInfo, error)
	// Jobs lists the sandbox's jobs, running and recently ended, oldest
	// first.
	Jobs(ctx context.Context) ([]JobInfo, error)
}

// EndJobs kills every running job of j (KILL, to its process group): what
// a thread that no one can name again leaves running would run on unseen.
func EndJobs(ctx context.Context, j Jobs) error {
	list, err := j.Jobs(ctx)
	if err != nil {
		return fmt.Errorf("list jobs: %w", err)
	}
	var errs []error
	for _, info := range list {
		if info.State != JobRunning {
			continue
		}
		if _, err := j.KillJob(ctx, info.ID, "KILL"); err != nil {
			errs = append(errs, fmt.Errorf("kill job %s: %w", info.ID, err))
		}
	}
	return errors.Join(errs...)
}

// JobLogDir is where a job's whole output is kept, as <id>.log (bounded
// by JobLimits.LogMaxBytes): among the tools' other saved results
// (SavedDir), so the agent can read it with the file tools; an ended
// job's log counts in their bound.
const JobLogDir = SavedDir + "/jobs"

// Unshown as JobOutput's offset reads what no caller was shown yet.
const Unshown int64 = -1

// JobLimits bound a job; the server's limits give them.
type JobLimits struct {
	MaxJobs     int   // the job is refused (ErrJobLimit) when this many run; 0: the provider's own cap
	LogMaxBytes int64 // the log keeps the first this many bytes; 0: no limit
	// The bound of the thread's saved results (SavedDir), kept when the
	// job starts and when it ends (PruneSaved); 0: no limit.
	SavedMaxFiles int
	SavedMaxBytes int64
}

// JobRequest starts a job.
type JobRequest struct {
	Command string
	Stdin   bool // a pipe for JobInput; else stdin is empty
	// Shell: the job starts in the sandbox's shell state (ExecRequest.Shell)
	// and changes none.
	Shell bool
	Env   []string // as ExecRequest.Env
	// TTY: the job runs on a pseudo-terminal of this size (SPEC §20): its
	// stdin, stdout and stderr, TERM=xterm-256color; its output is what
	// the terminal shows, escape sequences and all, and its input what is
	// typed there (Stdin is moot). nil: pipes.
	TTY *TermSize
	JobLimits
}

// TermSize is a terminal's size in character cells.
type TermSize struct{ Cols, Rows int }

// A terminal's bounds (JobRequest.TTY, ResizeJob).
const (
	MinTermCols, MaxTermCols = 10, 500
	MinTermRows, MaxTermRows = 5, 200
)

// Job states.
const (
	JobRunning = "running"
	JobExited  = "exited"
	JobKilled  = "killed" // ended by a signal
)

// JobInfo is a job's state.
type JobInfo struct {
	ID        string // "j1", "j2", …
	Command   string // its first 200 bytes
	State     string // JobRunning, JobExited or JobKilled
	PID       int    // inside the sandbox
	StartedAt time.Time
	EndedAt   time.Time // zero while it runs
	Code      int       // exit code; 128+N when ended by signal N
	Signal    string    // the signal that ended it: TERM, KILL, …
	// KillRequested: KillJob signalled it while it ran (bash_kill, an MCP
	// task's cancel), however it then ended.
	KillRequested bool
	TTY           *TermSize // a terminal job's size now; nil: not on a terminal
}

// JobOutput is output of a job.
type JobOutput struct {
	Data       []byte
	Offset     int64 // characters of output before Data
	NextOffset int64 // Offset + Data's characters
	Dropped    int64 // characters asked for that are no longer kept
	Job        JobInfo
}

// IfRunning marks ctx so that what runs under it (a Jobs call, a dial)
// uses the thread's box only if it runs: none is made or started for it
// (ErrNotRunning). The server asks whether jobs run this way when a
// session ends: a box that idled out runs no job, and making it again
// only to ask would start a Pod, a container or a supervisor for nothing.
func IfRunning(ctx context.Context) context.Context {
	return context.WithValue(ctx, ifRunningKey{}, true)
}

// OnlyIfRunning says whether ctx is IfRunning's: a box that does not run
// must not be made or started under it.
func OnlyIfRunning(ctx context.Context) bool {
	b, _ := ctx.Value(ifRunningKey{}).(bool)
	return b
}

type ifRunningKey struct{}

// ErrNotRunning: the thread's box does not run, and IfRunning said not to
// make or start it.
var ErrNotRunning = errors.New("the sandbox does not run")
