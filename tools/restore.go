package tools

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/checkpoint"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

const (
	// restoreListMax: restore lists at most this many changed paths.
	restoreListMax = 100
	// restoreJobsWait bounds the wait for force's killed jobs to end.
	restoreJobsWait = 10 * time.Second
)

func restoreTool() Tool {
	return newTool("restore", restoreArgs{}, restoreCheckpoint,
		mcp.WithDescription("Put the thread's files (/mnt/user-data) back exactly as checkpoint id holds them: contents, directories, "+
			"modes, symlinks; what was added since is removed. The files as they are first become a checkpoint, so a restore is "+
			"itself undone by restoring the id it answers. Refused while a job of the thread runs (it could write meanwhile); "+
			"force: true kills the jobs first. /mnt/user-data/outputs/.tool-results is left as it is."),
		destructive("Restore a checkpoint", false),
		withIcon("file"),
		mcp.WithOutputSchema[restoreFacts](),
	)
}

type restoreArgs struct {
	ID    string `json:"id" arg:"required" jsonschema_description:"The checkpoint to restore (checkpoints lists them)."`
	Force bool   `json:"force" jsonschema_description:"Kill the thread's running jobs first, rather than refuse (default false)."`
}

// restoreFacts is restore's structured content.
type restoreFacts struct {
	ID       string   `json:"id" jsonschema_description:"The checkpoint restored."`
	Undo     string   `json:"undo" jsonschema_description:"The checkpoint holding the files as they were before: restore it to undo."`
	Added    int      `json:"added"`
	Modified int      `json:"modified"`
	Deleted  int      `json:"deleted"`
	Killed   []string `json:"killed,omitempty" jsonschema_description:"The jobs force killed."`
}

func restoreCheckpoint(ctx context.Context, env *Env, a restoreArgs) *Result {
	if err := checkCheckpointID("id", a.ID); err != nil {
		return fail(err)
	}
	cp, err := checkpointsOf(env)
	if err != nil {
		return fail(err)
	}
	killed, err := EndJobsFor(ctx, env.Sandbox, a.Force, "restore")
	if err != nil {
		return fail(err)
	}
	res, err := cp.RestoreCheckpoint(ctx, a.ID, "before restore of checkpoint "+a.ID)
	if err != nil {
		return checkpointError(a.ID, err)
	}
	facts := restoreFacts{ID: a.ID, Undo: res.Undo.ID, Killed: killed}
	var list []string
	var changed []string
	for _, c := range res.Changes {
		switch c.Kind {
		case checkpoint.Added:
			facts.Added++
		case checkpoint.Modified:
			facts.Modified++
		case checkpoint.Deleted:
			facts.Deleted++
		}
		if len(list) < restoreListMax {
			list = append(list, fmt.Sprintf("%-8s %s", c.Kind, entryName(c)))
		}
		if p := userDataPath(c.Path); sandbox.Within(p, sandbox.OutputsDir) && len(changed) == 0 {
			changed = append(changed, sandbox.OutputsDir)
		}
	}
	var b strings.Builder
	if len(killed) > 0 {
		fmt.Fprintf(&b, "[killed job(s) %s first]\n", strings.Join(killed, ", "))
	}
	if len(res.Changes) == 0 {
		fmt.Fprintf(&b, "Nothing to restore: the files are as checkpoint %s holds them.", a.ID)
	} else {
		fmt.Fprintf(&b, "Restored checkpoint %s: %d path(s) changed (%d added, %d modified, %d deleted)\n", a.ID, len(res.Changes), facts.Added, facts.Modified, facts.Deleted)
		b.WriteString(strings.Join(list, "\n"))
		if n := len(res.Changes) - len(list); n > 0 {
			fmt.Fprintf(&b, "\n[and %d more path(s); diff from %s to %s lists them all]", n, res.Undo.ID, a.ID)
		}
	}
	fmt.Fprintf(&b, "\n[undo: restore id %s puts back the files as they were before]", res.Undo.ID)
	b.WriteString(skippedNote(res.Skipped))
	r := structured(b.String(), false, facts)
	r.Changed = changed
	return r
}

// EndJobsFor refuses, naming them, while jobs of sb run — unless force,
// which kills each (KILL to its process group) and waits for its end — and
// answers the jobs killed. what names the operation in the error. A
// sandbox without jobs, or that runs no commands, has none.
func EndJobsFor(ctx context.Context, sb sandbox.Sandbox, force bool, what string) ([]string, error) {
	jobs, ok := sb.(sandbox.Jobs)
	if !ok {
		return nil, nil
	}
	running := func() ([]sandbox.JobInfo, error) {
		list, err := jobs.Jobs(ctx)
		if errors.Is(err, sandbox.ErrBashDisabled) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: cannot tell whether jobs run: %w", what, err)
		}
		var run []sandbox.JobInfo
		for _, j := range list {
			if j.State == sandbox.JobRunning {
				run = append(run, j)
			}
		}
		return run, nil
	}
	run, err := running()
	if err != nil || len(run) == 0 {
		return nil, err
	}
	if !force {
		var names []string
		for _, j := range run {
			names = append(names, fmt.Sprintf("%s (%s)", j.ID, oneLine(cutHeadOnly(j.Command, 60))))
		}
		return nil, fmt.Errorf("%s refused: job(s) of this thread still run and could write meanwhile: %s; end them (bash_kill) or pass force: true to kill them first",
			what, strings.Join(names, ", "))
	}
	var killed []string
	for _, j := range run {
		if _, err := jobs.KillJob(ctx, j.ID, "KILL"); err != nil && !errors.Is(err, sandbox.ErrJobEnded) && !errors.Is(err, sandbox.ErrNoJob) {
			return killed, fmt.Errorf("%s: kill job %s: %w", what, j.ID, err)
		}
		killed = append(killed, j.ID)
	}
	deadline := time.Now().Add(restoreJobsWait)
	for {
		run, err := running()
		if err != nil {
			return killed, err
		}
		if len(run) == 0 {
			return killed, nil
		}
		if time.Now().After(deadline) {
			return killed, fmt.Errorf("%s: job %s was killed but has not ended after %s", what, run[0].ID, restoreJobsWait)
		}
		select {
		case <-ctx.Done():
			return killed, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
