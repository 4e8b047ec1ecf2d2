package tools

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

func bashKillTool() Tool {
	t := newTool("bash_kill", bashKillArgs{Signal: "TERM"}, bashKill,
		mcp.WithDescription("Stop a job: send a signal to its whole process group (the command and every process it started). "+
			"Answers the job's last output and how it ended."),
		destructive("Kill a job", false),
		withIcon("stop"),
		mcp.WithOutputSchema[jobFacts](),
	)
	t.RunsCommands = true
	return t
}

type bashKillArgs struct {
	Job    string `json:"job" arg:"required" jsonschema_description:"The job's id (j1, j2, …)."`
	Signal string `json:"signal" jsonschema:"enum=TERM,enum=INT,enum=KILL" jsonschema_description:"TERM (default), INT (like Ctrl-C) or KILL."`
}

func bashKill(ctx context.Context, env *Env, a bashKillArgs) *Result {
	if err := checkJobID(a.Job); err != nil {
		return fail(err)
	}
	sig := strings.TrimPrefix(strings.ToUpper(a.Signal), "SIG")
	switch sig {
	case "TERM", "INT", "KILL":
	default:
		return failf("signal %q: want TERM, INT or KILL", cutHeadOnly(a.Signal, 40))
	}
	jobs, err := jobsOf(env)
	if err != nil {
		return fail(err)
	}
	info, err := jobs.KillJob(ctx, a.Job, sig)
	if err != nil && !errors.Is(err, sandbox.ErrJobEnded) {
		return jobError(ctx, env, a.Job, err)
	}
	if info.TTY != nil {
		return ttyKill(ctx, env, jobs, info, sig)
	}
	// Its last output, until it ends (or jobKillWait).
	deadline := time.Now().Add(jobKillWait)
	jr := &jobRead{id: a.Job}
	for {
		o, err := jobs.JobOutput(ctx, a.Job, sandbox.Unshown, max(time.Until(deadline), 0))
		if err != nil {
			return jobError(ctx, env, a.Job, err)
		}
		jr.add(o)
		if o.Job.State != sandbox.JobRunning || time.Now().After(deadline) || ctx.Err() != nil || len(jr.buf) >= jobReadMax/2 {
			break
		}
	}
	jr.withContext(context.WithoutCancel(ctx), jobs, env.Mask)
	body, facts := jr.text(env)
	if jr.job.State == sandbox.JobRunning {
		body += fmt.Sprintf("\n[job %s did not end within %ds of SIG%s; bash_kill with signal KILL ends it]", a.Job, int(jobKillWait/time.Second), sig)
	}
	return structured(body, facts.Truncated, facts)
}
