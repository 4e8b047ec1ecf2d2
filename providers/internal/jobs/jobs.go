// Package jobs is sandbox.Jobs over a sandbox's supervisor (package
// supervisor): what every provider's jobs share once it has its link, the
// shell's argv and the log directory as the supervisor sees it — the
// translation of requests, states and errors, written once.
package jobs

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor"
)

// Settings are the supervisor's settings of a job limited by lim, its log
// in logDir (as the supervisor sees it: sandbox.JobLogDir inside a
// sandbox, its host directory for a supervisor on the host).
func Settings(lim sandbox.JobLimits, logDir string) supervisor.JobSettings {
	return supervisor.JobSettings{MaxJobs: lim.MaxJobs, LogMaxBytes: lim.LogMaxBytes, LogDir: logDir,
		SavedMaxFiles: lim.SavedMaxFiles, SavedMaxBytes: lim.SavedMaxBytes}
}

// Command is how a provider runs a command: the shell's argv, its
// working directory and the jobs' log directory, as the supervisor sees
// them.
type Command struct {
	Argv        []string
	Dir, LogDir string
}

// Enter readies a provider's sandbox for one job call (makes it run, marks
// it in use) until done is called; for a command (StartJob's, else "") it
// also says how it runs.
type Enter func(ctx context.Context, command string) (cmd Command, done func(), err error)

// Runner is sandbox.Jobs over a sandbox's supervisor link: a provider
// embeds one, giving only how a call enters its sandbox.
type Runner struct {
	link  *supervisor.Link
	enter Enter
}

// NewRunner returns the jobs of the sandbox l reaches, entered with enter.
func NewRunner(l *supervisor.Link, enter Enter) *Runner { return &Runner{link: l, enter: enter} }

// StartJob starts the command as the provider's Exec runs it, as a job.
func (r *Runner) StartJob(ctx context.Context, req sandbox.JobRequest) (sandbox.JobInfo, error) {
	c, done, err := r.enter(ctx, req.Command)
	if err != nil {
		return sandbox.JobInfo{}, err
	}
	defer done()
	started := time.Now()
	j, err := r.link.StartJob(ctx, supervisor.JobSpec{Argv: c.Argv, Dir: c.Dir, Stdin: req.Stdin, Shell: req.Shell, JobSettings: Settings(req.JobLimits, c.LogDir)})
	if err != nil {
		return sandbox.JobInfo{}, Err(err)
	}
	cmd := req.Command
	if len(cmd) > 200 {
		cmd = strings.ToValidUTF8(cmd[:200], "")
	}
	return sandbox.JobInfo{ID: j.ID, Command: cmd, State: sandbox.JobRunning, PID: j.PID, StartedAt: started}, nil
}

// JobOutput reads a job's output (sandbox.Jobs).
func (r *Runner) JobOutput(ctx context.Context, id string, offset int64, wait time.Duration) (sandbox.JobOutput, error) {
	_, done, err := r.enter(ctx, "")
	if err != nil {
		return sandbox.JobOutput{}, err
	}
	defer done()
	if offset < 0 {
		offset = supervisor.Unshown
	}
	o, err := r.link.JobOutput(ctx, id, offset, wait)
	if err != nil {
		return sandbox.JobOutput{}, Err(err)
	}
	return sandbox.JobOutput{Data: o.Data, Offset: o.Offset, NextOffset: o.NextOffset, Dropped: o.Dropped, Job: Info(o.Job)}, nil
}

// JobInput writes to a job's stdin (sandbox.Jobs).
func (r *Runner) JobInput(ctx context.Context, id string, data []byte, close bool) (sandbox.JobInfo, error) {
	_, done, err := r.enter(ctx, "")
	if err != nil {
		return sandbox.JobInfo{}, err
	}
	defer done()
	i, err := r.link.JobInput(ctx, id, data, close)
	return Info(i), Err(err)
}

// KillJob signals a job's process group (sandbox.Jobs).
func (r *Runner) KillJob(ctx context.Context, id, signal string) (sandbox.JobInfo, error) {
	_, done, err := r.enter(ctx, "")
	if err != nil {
		return sandbox.JobInfo{}, err
	}
	defer done()
	i, err := r.link.KillJob(ctx, id, signal)
	return Info(i), Err(err)
}

// Jobs lists the sandbox's jobs (sandbox.Jobs).
func (r *Runner) Jobs(ctx context.Context) ([]sandbox.JobInfo, error) {
	_, done, err := r.enter(ctx, "")
	if err != nil {
		return nil, err
	}
	defer done()
	list, err := r.link.Jobs(ctx)
	if err != nil {
		return nil, Err(err)
	}
	out := make([]sandbox.JobInfo, len(list))
	for i, j := range list {
		out[i] = Info(j)
	}
	return out, nil
}

var _ sandbox.Jobs = (*Runner)(nil)

// Info is the sandbox's view of a supervisor's job state.
func Info(i supervisor.JobInfo) sandbox.JobInfo {
	if i.ID == "" {
		return sandbox.JobInfo{}
	}
	out := sandbox.JobInfo{ID: i.ID, Command: i.Command, State: i.State, PID: i.PID, StartedAt: time.UnixMilli(i.StartedAt), Code: i.Code, Signal: i.Signal}
	if i.EndedAt != 0 {
		out.EndedAt = time.UnixMilli(i.EndedAt)
	}
	return out
}

// Err maps the supervisor's job errors to the sandbox's sentinels (its
// message kept: it names the job, or the counts of a limit); any other
// error is returned as it is.
func Err(err error) error {
	var le *supervisor.JobLimitError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &le):
		return fmt.Errorf("%w: %d running, at most %d", sandbox.ErrJobLimit, le.Running, le.Max)
	}
	for _, m := range []struct{ from, to error }{
		{supervisor.ErrNoJob, sandbox.ErrNoJob},
		{supervisor.ErrJobNoInput, sandbox.ErrJobNoInput},
		{supervisor.ErrJobBlocked, sandbox.ErrJobBlocked},
		{supervisor.ErrJobEnded, sandbox.ErrJobEnded},
	} {
		if errors.Is(err, m.from) {
			return &mapped{err: err, sentinel: m.to}
		}
	}
	return err
}

// mapped is a supervisor's error that is also a sandbox sentinel.
type mapped struct{ err, sentinel error }

func (e *mapped) Error() string   { return e.err.Error() }
func (e *mapped) Unwrap() []error { return []error{e.sentinel, e.err} }
