// Package jobs is sandbox.Jobs over a sandbox's supervisor (package
// supervisor, which speaks the sandbox's types and sentinels): what every
// provider's jobs share once it has its link — how a call enters the
// sandbox, written once.
package jobs

import (
	"context"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor"
)

// Command is how a provider runs a command: the shell's argv, its
// working directory and the jobs' log directory, as the supervisor sees
// them.
type Command = supervisor.Command

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

var _ sandbox.Jobs = (*Runner)(nil)

// StartJob starts the command as the provider's Exec runs it, as a job.
func (r *Runner) StartJob(ctx context.Context, req sandbox.JobRequest) (sandbox.JobInfo, error) {
	c, done, err := r.enter(ctx, req.Command)
	if err != nil {
		return sandbox.JobInfo{}, err
	}
	defer done()
	return r.link.StartJob(ctx, c, req)
}

// JobOutput reads a job's output (sandbox.Jobs).
func (r *Runner) JobOutput(ctx context.Context, id string, offset int64, wait time.Duration) (sandbox.JobOutput, error) {
	return entered(r, ctx, func() (sandbox.JobOutput, error) { return r.link.JobOutput(ctx, id, offset, wait) })
}

// JobInput writes to a job's stdin (sandbox.Jobs).
func (r *Runner) JobInput(ctx context.Context, id string, data []byte, close bool) (sandbox.JobInfo, error) {
	return entered(r, ctx, func() (sandbox.JobInfo, error) { return r.link.JobInput(ctx, id, data, close) })
}

// KillJob signals a job's process group (sandbox.Jobs).
func (r *Runner) KillJob(ctx context.Context, id, signal string) (sandbox.JobInfo, error) {
	return entered(r, ctx, func() (sandbox.JobInfo, error) { return r.link.KillJob(ctx, id, signal) })
}

// Jobs lists the sandbox's jobs (sandbox.Jobs).
func (r *Runner) Jobs(ctx context.Context) ([]sandbox.JobInfo, error) {
	return entered(r, ctx, func() ([]sandbox.JobInfo, error) { return r.link.Jobs(ctx) })
}

// entered runs call inside the sandbox, entered for it.
func entered[T any](r *Runner, ctx context.Context, call func() (T, error)) (T, error) {
	_, done, err := r.enter(ctx, "")
	if err != nil {
		var zero T
		return zero, err
	}
	defer done()
	return call()
}
