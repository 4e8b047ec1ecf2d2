package docker

import (
	"context"

	"github.com/sandbox-mcp/sandbox-mcp/providers/internal/jobs"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

var _ sandbox.Jobs = (*Sandbox)(nil)

// Jobs run under the container's supervisor (jobs.Runner): they outlive
// the call, the thread's release and a restart of the server, and end with
// the container. Each call marks the container busy, as Exec does; between
// calls a running job keeps the idle reaper away (supervisorBusy).
func (s *Sandbox) enterJobs(ctx context.Context, command string) (jobs.Command, func(), error) {
	_, done, err := s.container(ctx)
	if err != nil || command == "" {
		return jobs.Command{}, done, err
	}
	argv, err := s.argv(ctx, command)
	if err != nil {
		done()
		return jobs.Command{}, nil, err
	}
	return jobs.Command{Argv: argv, Dir: sandbox.WorkspaceDir, LogDir: sandbox.JobLogDir}, done, nil
}
