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
	return supervisor.JobSettings{MaxJobs: lim.MaxJobs, LogMaxBytes: lim.LogMaxBytes, LogDir: logDir}
}

// Start starts argv in dir as a job.
func Start(ctx context.Context, l *supervisor.Link, argv []string, dir, logDir string, req sandbox.JobRequest) (sandbox.JobInfo, error) {
	started := time.Now()
	j, err := l.StartJob(ctx, supervisor.JobSpec{Argv: argv, Dir: dir, Stdin: req.Stdin, JobSettings: Settings(req.JobLimits, logDir)})
	if err != nil {
		return sandbox.JobInfo{}, Err(err)
	}
	cmd := req.Command
	if len(cmd) > 200 {
		cmd = strings.ToValidUTF8(cmd[:200], "")
	}
	return sandbox.JobInfo{ID: j.ID, Command: cmd, State: sandbox.JobRunning, PID: j.PID, StartedAt: started}, nil
}

// Output is sandbox.Jobs.JobOutput over l.
func Output(ctx context.Context, l *supervisor.Link, id string, offset int64, wait time.Duration) (sandbox.JobOutput, error) {
	if offset < 0 {
		offset = supervisor.Unshown
	}
	o, err := l.JobOutput(ctx, id, offset, wait)
	if err != nil {
		return sandbox.JobOutput{}, Err(err)
	}
	return sandbox.JobOutput{Data: o.Data, Offset: o.Offset, NextOffset: o.NextOffset, Dropped: o.Dropped, Job: Info(o.Job)}, nil
}

// Input is sandbox.Jobs.JobInput over l.
func Input(ctx context.Context, l *supervisor.Link, id string, data []byte, close bool) (sandbox.JobInfo, error) {
	i, err := l.JobInput(ctx, id, data, close)
	return Info(i), Err(err)
}

// Kill is sandbox.Jobs.KillJob over l.
func Kill(ctx context.Context, l *supervisor.Link, id, signal string) (sandbox.JobInfo, error) {
	i, err := l.KillJob(ctx, id, signal)
	return Info(i), Err(err)
}

// List is sandbox.Jobs.Jobs over l.
func List(ctx context.Context, l *supervisor.Link) ([]sandbox.JobInfo, error) {
	list, err := l.Jobs(ctx)
	if err != nil {
		return nil, Err(err)
	}
	out := make([]sandbox.JobInfo, len(list))
	for i, j := range list {
		out[i] = Info(j)
	}
	return out, nil
}

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
