package tools

import (
	"context"
	"errors"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

func bashInputTool() Tool {
	return Tool{
		Def: mcp.NewTool("bash_input",
			mcp.WithDescription("Type into a job's stdin (a job started with bash run_in_background): answer a prompt, drive a REPL. "+
				"Nothing is added: end the input with \\n to press Enter. Answers the job's output of the next 0.3 s, then its state line."),
			mcp.WithString("job", mcp.Required(), mcp.Description("The job's id (j1, j2, …).")),
			mcp.WithString("input", mcp.Description("What to write (at most 64 KiB).")),
			mcp.WithBoolean("close", mcp.Description("Close the job's stdin after the input (end of file, like Ctrl-D).")),
			destructive("Write to a job", true),
			withIcon("terminal"),
			mcp.WithOutputSchema[jobFacts](),
		),
		Args:         bashInputArgs{},
		RunsCommands: true,
		Handle:       bashInput,
	}
}

type bashInputArgs struct {
	Job   string `json:"job" arg:"required"`
	Input string `json:"input"`
	Close bool   `json:"close"`
}

// maxJobInput is the most bytes one bash_input writes.
const maxJobInput = 64 << 10

func bashInput(ctx context.Context, env *Env, req mcp.CallToolRequest) *Result {
	var a bashInputArgs
	if err := bindArgs("bash_input", req, &a); err != nil {
		return fail(err)
	}
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
