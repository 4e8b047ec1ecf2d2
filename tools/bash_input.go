package tools

import (
	"context"
	"errors"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

func bashInputTool() Tool {
	t := newTool("bash_input", bashInputArgs{}, bashInput,
		mcp.WithDescription("Type into a job's stdin (a job started with bash run_in_background): answer a prompt, drive a REPL. "+
			"Nothing is added: end the input with \\n to press Enter. Answers the job's output of the next 0.3 s, then its state line."),
		destructive("Write to a job", true),
		withIcon("terminal"),
		mcp.WithOutputSchema[jobFacts](),
	)
	t.RunsCommands = true
	return t
}

type bashInputArgs struct {
	Job   string `json:"job" arg:"required" jsonschema_description:"The job's id (j1, j2, …)."`
	Input string `json:"input" jsonschema_description:"What to write (at most 64 KiB)."`
	Close bool   `json:"close" jsonschema_description:"Close the job's stdin after the input (end of file, like Ctrl-D)."`
}

// maxJobInput is the most bytes one bash_input writes.
const maxJobInput = 64 << 10

func bashInput(ctx context.Context, env *Env, a bashInputArgs) *Result {
	if err := checkJobID(a.Job); err != nil {
		return fail(err)
	}
	if a.Input == "" && !a.Close {
		return failf("nothing to do: give input, close, or both")
	}
	if len(a.Input) > maxJobInput {
		return failf("input is %d bytes: at most %d in one call", len(a.Input), maxJobInput)
	}
	jobs, err := jobsOf(env)
	if err != nil {
		return fail(err)
	}
	if _, err := jobs.JobInput(ctx, a.Job, []byte(a.Input), a.Close); err != nil {
		if errors.Is(err, sandbox.ErrJobBlocked) {
			return failf("job %s is not reading its input: nothing was written (it may be busy; try again, or bash_output to see what it waits for)", a.Job)
		}
		return jobError(ctx, env, a.Job, err)
	}
	jr, err := readJobOutput(ctx, env, jobs, a.Job, sandbox.Unshown, jobInputGlimpse, time.Now().Add(jobInputGlimpse))
	if err != nil {
		return jobError(ctx, env, a.Job, err)
	}
	body, facts := jr.text(env)
	return structured(body, facts.Truncated, facts)
}
