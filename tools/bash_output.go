package tools

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

func bashOutputTool() Tool {
	t := newTool("bash_output", bashOutputArgs{Offset: -1}, readJob,
		mcp.WithDescription("Read a job's output: a command started with bash run_in_background, or one that outran yield_after. "+
			"Answers the output not shown yet (or from offset), then [job J running; next offset N] or [job J exited with code C; next offset N]. "+
			"Use wait to block until there is new output or the job ends (e.g. poll a long build with wait 60). "+
			"A job on a terminal (bash tty: true) answers its screen instead: its rows as text (the cursor's cell shown as █ where it is blank), then [screen CxR, cursor at row R, col C] and its state line "+
			"(wait: until the screen changes); raw: true gives its raw output (escape sequences and all) by offset as for any job. "+
			"Without job: lists the thread's jobs, one per line."),
		// Read-only, not idempotent: it moves the job's "not shown yet" mark.
		mcp.WithToolAnnotation(mcp.ToolAnnotation{Title: "Read job output", ReadOnlyHint: mcp.ToBoolPtr(true),
			DestructiveHint: mcp.ToBoolPtr(false), IdempotentHint: mcp.ToBoolPtr(false), OpenWorldHint: mcp.ToBoolPtr(false)}),
		withIcon("terminal"),
		mcp.WithOutputSchema[jobFacts](),
	)
	t.RunsCommands = true
	return t
}

type bashOutputArgs struct {
	Job    string  `json:"job" jsonschema_description:"The job's id (j1, j2, …); omit to list the jobs."`
	Offset int     `json:"offset" arg:"minimum=0" jsonschema_description:"Characters of the job's output to skip (default: what was not shown yet; 0 reads from the start)."`
	Wait   float64 `json:"wait" arg:"minimum=0" jsonschema_description:"Seconds to wait for new output or the job's end (default 0, max 60)."`
	Raw    bool    `json:"raw" jsonschema_description:"For a job on a terminal: its raw output, the bytes its program wrote (escape sequences and all), from offset, instead of its screen. Other jobs' output is always raw."`
}

func readJob(ctx context.Context, env *Env, a bashOutputArgs) *Result {
	jobs, err := jobsOf(env)
	if err != nil {
		return fail(err)
	}
	if a.Job == "" {
		if a.Offset >= 0 || a.Wait > 0 {
			return failf("offset and wait read one job's output: name the job")
		}
		return listJobs(ctx, jobs)
	}
	if err := checkJobID(a.Job); err != nil {
		return fail(err)
	}
	wait := time.Duration(min(a.Wait, jobWaitMax) * float64(time.Second))
	if !a.Raw {
		info, _, err := jobInfo(ctx, jobs, a.Job)
		if err != nil {
			return jobError(ctx, env, a.Job, err)
		}
		if info.TTY != nil {
			if a.Offset >= 0 {
				return failf("job %s is on a terminal: bash_output answers its screen; offset pages its raw output: give raw: true with it", a.Job)
			}
			return ttyOutput(ctx, env, jobs, info, wait)
		}
	}
	offset := sandbox.Unshown
	if a.Offset >= 0 {
		offset = int64(a.Offset)
	}
	jr, err := readJobOutput(ctx, env, jobs, a.Job, offset, wait, time.Time{})
	if err != nil {
		if ctx.Err() != nil {
			return failf("cancelled: the wait ended; job %s goes on", a.Job)
		}
		return jobError(ctx, env, a.Job, err)
	}
	body, facts := jr.text(env)
	return structured(body, facts.Truncated, facts)
}

// listJobs is one line per job of the thread: id, state, command.
func listJobs(ctx context.Context, jobs sandbox.Jobs) *Result {
	list, err := jobs.Jobs(ctx)
	if err != nil {
		return fail(err)
	}
	entries := []jobEntry{}
	facts := &jobFacts{Jobs: &entries}
	if len(list) == 0 {
		r := text("no jobs")
		r.StructuredContent = facts
		return r
	}
	var b strings.Builder
	for _, j := range list {
		e := jobEntry{Job: j.ID, Command: validText([]byte(j.Command))}
		e.State, e.ExitCode, e.Signal = jobState(j)
		entries = append(entries, e)
		state := "running"
		switch {
		case j.State == sandbox.JobKilled && j.Signal != "":
			state = fmt.Sprintf("killed by SIG%s (code %d)", j.Signal, j.Code)
		case j.State != sandbox.JobRunning:
			state = fmt.Sprintf("exited with code %d", j.Code)
		}
		if j.TTY != nil {
			e.TTY = fmt.Sprintf("%dx%d", j.TTY.Cols, j.TTY.Rows)
			state += fmt.Sprintf(" on a terminal %s", e.TTY)
		}
		cmd := strings.Join(strings.Fields(validText([]byte(j.Command))), " ")
		fmt.Fprintf(&b, "%s %s: %s\n", j.ID, state, cmd)
	}
	r := text(strings.TrimSuffix(b.String(), "\n"))
	r.StructuredContent = facts
	return r
}
