package kubernetes

import (
	"context"

	"github.com/sandbox-mcp/sandbox-mcp/providers/internal/jobs"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

var _ sandbox.Jobs = (*Sandbox)(nil)

// Jobs run under the Pod's supervisor (jobs.Runner): they outlive the
// call, the thread's release and a restart of any replica, and end with
// the Pod. Each call marks the Pod busy, as Exec does; between calls a
// running job keeps the idle reaper away (supervisorBusy).
func (s *Sandbox) enterJobs(ctx context.Context, command string) (jobs.Command, func(), error) {
	c, done, err := s.channel(ctx)
	if err != nil || command == "" {
		return jobs.Command{}, done, err
	}
	argv, err := s.argv(c, command)
	if err != nil {
		done()
		return jobs.Command{}, nil, err
	}
	return jobs.Command{Argv: argv, Dir: sandbox.WorkspaceDir, LogDir: sandbox.JobLogDir}, done, nil
}
