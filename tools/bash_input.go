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
			"Nothing is added: end the input with \\n to press Enter. Answers the job's output of the next 0.3 s, then its state line. "+
			"A job on a terminal (bash tty: true) takes key names in angle brackets beside text — <Enter>, <Tab>, <Esc>, <BS>, <Del>, <Space>, "+
			"<Up>, <Down>, <Left>, <Right>, <Home>, <End>, <PageUp>, <PageDown>, <F1>…<F12>, <C-a>…<C-z>, <M-x>; <lt> is a literal < — "+
			"e.g. \"ihello<Esc>:wq<Enter>\" in vim; cols and rows resize its terminal; it answers the screen once the program settles."),
		destructive("Write to a job", true),
		withIcon("terminal"),
		mcp.WithOutputSchema[jobFacts](),
	)
	t.RunsCommands = true
	t.ChangesFiles = true
	return t
}

type bashInputArgs struct {
	Job   string `json:"job" arg:"required" jsonschema_description:"The job's id (j1, j2, …)."`
	Input string `json:"input" jsonschema_description:"What to write (at most 64 KiB). For a job on a terminal: text and key names (<Enter>, <Esc>, <C-c>, <Up>, …; <lt> for a literal <)."`
	Close bool   `json:"close" jsonschema_description:"Close the job's stdin after the input (end of file, like Ctrl-D); a terminal job's: type Ctrl-D."`
	Cols  int    `json:"cols" arg:"minimum=10,maximum=500" jsonschema_description:"A terminal job's new width in columns (its program gets SIGWINCH and redraws)."`
	Rows  int    `json:"rows" arg:"minimum=5,maximum=200" jsonschema_description:"A terminal job's new height in rows."`
}

// maxJobInput is the most bytes one bash_input writes.
const maxJobInput = 64 << 10

func bashInput(ctx context.Context, env *Env, a bashInputArgs) *Result {
	if err := checkJobID(a.Job); err != nil {
		return fail(err)
	}
	resize := a.Cols > 0 || a.Rows > 0
	if a.Input == "" && !a.Close && !resize {
		return failf("nothing to do: give input, close, or both (or cols and rows for a terminal job)")
	}
	if len(a.Input) > maxJobInput {
		return failf("input is %d bytes: at most %d in one call", len(a.Input), maxJobInput)
	}
	jobs, err := jobsOf(env)
	if err != nil {
		return fail(err)
	}
	// A terminal job reads key names; any other takes its input as it is.
	info, ok, err := jobInfo(ctx, jobs, a.Job)
	if err != nil {
		return jobError(ctx, env, a.Job, err)
	}
	switch {
	case ok && info.TTY != nil:
		return ttyInput(ctx, env, jobs, info, a)
	case resize && ok:
		return failf("job %s is not on a terminal: cols and rows resize the terminal of a job started with bash tty: true", a.Job)
	case resize:
		return jobError(ctx, env, a.Job, sandbox.ErrNoJob)
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
