package supervised

import (
	"context"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// The sandbox's jobs (sandbox.Jobs) run under the box's supervisor, as
// Exec's commands do, and outlive the call; each call enters the box.

// StartJob starts the command as Exec runs it, as a job; in a traced
// call, its span ends once the job runs.
func (s *Sandbox) StartJob(ctx context.Context, req sandbox.JobRequest) (sandbox.JobInfo, error) {
	ctx, span := childSpan(ctx, spanExec)
	if span.IsRecording() {
		span.SetAttributes(attrBackground.Bool(true))
	}
	info, err := s.startJob(ctx, req)
	endExec(span, sandbox.ExecResult{Job: info.ID}, err)
	return info, err
}

func (s *Sandbox) startJob(ctx context.Context, req sandbox.JobRequest) (sandbox.JobInfo, error) {
	done, err := s.box.Enter(ctx)
	if err != nil {
		return sandbox.JobInfo{}, err
	}
	c, err := s.command(ctx, req.Command)
	if err == nil {
		req.Env, err = s.withEgress(ctx, req.Env)
	}
	if err != nil {
		done()
		return sandbox.JobInfo{}, err
	}
	defer func() { done(); s.jobStarted() }()
	return s.link.StartJob(ctx, c, req)
}

// JobOutput reads a job's output (sandbox.Jobs).
func (s *Sandbox) JobOutput(ctx context.Context, id string, offset int64, wait time.Duration) (sandbox.JobOutput, error) {
	return entered(s, ctx, func() (sandbox.JobOutput, error) { return s.link.JobOutput(ctx, id, offset, wait) })
}

// PeekJobOutput reads a job's output, moving no cursor (sandbox.Jobs).
func (s *Sandbox) PeekJobOutput(ctx context.Context, id string, offset int64, wait time.Duration) (sandbox.JobOutput, error) {
	return entered(s, ctx, func() (sandbox.JobOutput, error) { return s.link.PeekJobOutput(ctx, id, offset, wait) })
}

// JobInput writes to a job's stdin (sandbox.Jobs).
func (s *Sandbox) JobInput(ctx context.Context, id string, data []byte, close bool) (sandbox.JobInfo, error) {
	return entered(s, ctx, func() (sandbox.JobInfo, error) { return s.link.JobInput(ctx, id, data, close) })
}

// KillJob signals a job's process group (sandbox.Jobs).
func (s *Sandbox) KillJob(ctx context.Context, id, signal string) (sandbox.JobInfo, error) {
	return entered(s, ctx, func() (sandbox.JobInfo, error) { return s.link.KillJob(ctx, id, signal) })
}

// ResizeJob sets a terminal job's size (sandbox.Jobs).
func (s *Sandbox) ResizeJob(ctx context.Context, id string, size sandbox.TermSize) (sandbox.JobInfo, error) {
	return entered(s, ctx, func() (sandbox.JobInfo, error) { return s.link.ResizeJob(ctx, id, size) })
}

// Jobs lists the sandbox's jobs (sandbox.Jobs).
func (s *Sandbox) Jobs(ctx context.Context) ([]sandbox.JobInfo, error) {
	return entered(s, ctx, func() ([]sandbox.JobInfo, error) { return s.link.Jobs(ctx) })
}

// entered runs call inside the box, entered for it.
func entered[T any](s *Sandbox, ctx context.Context, call func() (T, error)) (T, error) {
	done, err := s.box.Enter(ctx)
	if err != nil {
		var zero T
		return zero, err
	}
	defer done()
	return call()
}
