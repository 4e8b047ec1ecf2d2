package local

import (
	"context"

	"github.com/sandbox-mcp/sandbox-mcp/providers/internal/jobs"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

var _ sandbox.Jobs = (*Sandbox)(nil)

// Jobs run through the thread's supervisor (jobs.Runner) as Exec runs
// commands: they outlive the call, not the thread's supervisor.
func (s *Sandbox) enterJobs(_ context.Context, command string) (jobs.Command, func(), error) {
	if command == "" {
		return jobs.Command{}, func() {}, s.bashOff()
	}
	argv, dir, logDir, err := s.command(command)
	return jobs.Command{Argv: argv, Dir: dir, LogDir: logDir}, s.holdForJobs, err
}

// bashOff is why commands do not run here, if they do not: the job calls
// then do not start a supervisor on the host only to find no job.
func (s *Sandbox) bashOff() error {
	if s.p.cfg.Isolation == IsolationBwrap {
		return nil
	}
	return s.p.BashDisabled()
}
