package local

import (
	"context"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/providers/internal/jobs"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

var _ sandbox.Jobs = (*Sandbox)(nil)

// StartJob starts the command through the thread's supervisor as Exec runs
// it, but as a job: it outlives the call, not the thread's supervisor.
func (s *Sandbox) StartJob(ctx context.Context, req sandbox.JobRequest) (sandbox.JobInfo, error) {
	argv, dir, logDir, err := s.command(req.Command)
	if err != nil {
		return sandbox.JobInfo{}, err
	}
	return jobs.Start(ctx, s.link, argv, dir, logDir, req)
}

// JobOutput reads a job's output (sandbox.Jobs).
func (s *Sandbox) JobOutput(ctx context.Context, id string, offset int64, wait time.Duration) (sandbox.JobOutput, error) {
	if err := s.bashOff(); err != nil {
		return sandbox.JobOutput{}, err
	}
	return jobs.Output(ctx, s.link, id, offset, wait)
}

// JobInput writes to a job's stdin (sandbox.Jobs).
func (s *Sandbox) JobInput(ctx context.Context, id string, data []byte, close bool) (sandbox.JobInfo, error) {
	if err := s.bashOff(); err != nil {
		return sandbox.JobInfo{}, err
	}
	return jobs.Input(ctx, s.link, id, data, close)
}

// KillJob signals a job's process group (sandbox.Jobs).
func (s *Sandbox) KillJob(ctx context.Context, id, signal string) (sandbox.JobInfo, error) {
	if err := s.bashOff(); err != nil {
		return sandbox.JobInfo{}, err
	}
	return jobs.Kill(ctx, s.link, id, signal)
}

// Jobs lists the thread's jobs (sandbox.Jobs).
func (s *Sandbox) Jobs(ctx context.Context) ([]sandbox.JobInfo, error) {
	if err := s.bashOff(); err != nil {
		return nil, err
	}
	return jobs.List(ctx, s.link)
}

// bashOff is why commands do not run here, if they do not: the job calls
// then do not start a supervisor on the host only to find no job.
func (s *Sandbox) bashOff() error {
	if s.p.cfg.Isolation == IsolationBwrap {
		return nil
	}
	return s.p.BashDisabled()
}
