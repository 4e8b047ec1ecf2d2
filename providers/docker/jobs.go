package docker

import (
	"context"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/providers/internal/jobs"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

var _ sandbox.Jobs = (*Sandbox)(nil)

// Jobs run under the container's supervisor: they outlive the call, the
// thread's release and a restart of the server, and end with the
// container. Each call marks the container busy, as Exec does; between
// calls a running job keeps the idle reaper away (supervisorBusy).

// StartJob starts the command as Exec runs it, as a job.
func (s *Sandbox) StartJob(ctx context.Context, req sandbox.JobRequest) (sandbox.JobInfo, error) {
	_, done, err := s.container(ctx)
	if err != nil {
		return sandbox.JobInfo{}, err
	}
	defer done()
	argv, err := s.argv(ctx, req.Command)
	if err != nil {
		return sandbox.JobInfo{}, err
	}
	return jobs.Start(ctx, s.link, argv, sandbox.WorkspaceDir, sandbox.JobLogDir, req)
}

// JobOutput reads a job's output (sandbox.Jobs).
func (s *Sandbox) JobOutput(ctx context.Context, id string, offset int64, wait time.Duration) (sandbox.JobOutput, error) {
	_, done, err := s.container(ctx)
	if err != nil {
		return sandbox.JobOutput{}, err
	}
	defer done()
	return jobs.Output(ctx, s.link, id, offset, wait)
}

// JobInput writes to a job's stdin (sandbox.Jobs).
func (s *Sandbox) JobInput(ctx context.Context, id string, data []byte, close bool) (sandbox.JobInfo, error) {
	_, done, err := s.container(ctx)
	if err != nil {
		return sandbox.JobInfo{}, err
	}
	defer done()
	return jobs.Input(ctx, s.link, id, data, close)
}

// KillJob signals a job's process group (sandbox.Jobs).
func (s *Sandbox) KillJob(ctx context.Context, id, signal string) (sandbox.JobInfo, error) {
	_, done, err := s.container(ctx)
	if err != nil {
		return sandbox.JobInfo{}, err
	}
	defer done()
	return jobs.Kill(ctx, s.link, id, signal)
}

// Jobs lists the container's jobs (sandbox.Jobs).
func (s *Sandbox) Jobs(ctx context.Context) ([]sandbox.JobInfo, error) {
	_, done, err := s.container(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	return jobs.List(ctx, s.link)
}
