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
	t := newTool("restore", restoreArgs{}, restoreCheckpoint,
		mcp.WithDescription("Put the thread's files (/mnt/user-data) back exactly as checkpoint id holds them: contents, directories, "+
			"modes, symlinks; what was added since is removed. The files as they are first become a checkpoint, so a restore is "+
			"itself undone by restoring the id it answers. Refused while a job of the thread runs (it could write meanwhile); "+
			"force: true kills the jobs first. /mnt/user-data/outputs/.tool-results is left as it is."),
		destructive("Restore a checkpoint", false),
		withIcon("file"),
		mcp.WithOutputSchema[restoreFacts](),
	)
	t.UsesCheckpoints = true
	// Its result is a checkpoint's state, which the automatic one after
	// it lists ("after restore: ID"), so that undoing the next call is
	// restoring the newest before it.
	t.ChangesFiles = true
	t.Exclusive = true
	return t
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
	run, err := RunningJobs(ctx, env.Sandbox)
	if err != nil {
		return failf("restore: %v", err)
	}
	var killed []string
	if len(run) > 0 && !a.Force {
		return failf("restore refused: job(s) of this thread still run and could write meanwhile: %s; end them (bash_kill) or pass force: true to kill them first", JobNames(run))
	}
	if len(run) > 0 {
		if err := KillJobs(ctx, env.Sandbox, run); err != nil {
			return failf("restore: %v", err)
		}
		for _, j := range run {
			killed = append(killed, j.ID)
		}
	}
	res, err := cp.RestoreCheckpoint(ctx, a.ID, "before restore of checkpoint "+a.ID, env.CheckpointMaxBytes)
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

// RunningJobs lists the jobs of sb that run (none for a sandbox without
// jobs, or one that runs no commands).
func RunningJobs(ctx context.Context, sb sandbox.Sandbox) ([]sandbox.JobInfo, error) {
	jobs, ok := sb.(sandbox.Jobs)
	if !ok {
		return nil, nil
	}
	list, err := jobs.Jobs(ctx)
	if errors.Is(err, sandbox.ErrBashDisabled) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("cannot tell whether jobs run: %w", err)
	}
	var run []sandbox.JobInfo
	for _, j := range list {
		if j.State == sandbox.JobRunning {
			run = append(run, j)
		}
	}
	return run, nil
}

// JobNames names jobs for an error: "j1 (npm run dev), j3 (...)".
func JobNames(jobs []sandbox.JobInfo) string {
	var names []string
	for _, j := range jobs {
		names = append(names, fmt.Sprintf("%s (%s)", j.ID, oneLine(cutHeadOnly(j.Command, 60))))
	}
	return strings.Join(names, ", ")
}

// KillJobs kills each of jobs (KILL, to its process group) and waits until
// no job of sb runs, for at most restoreJobsWait.
func KillJobs(ctx context.Context, sb sandbox.Sandbox, run []sandbox.JobInfo) error {
	jobs, ok := sb.(sandbox.Jobs)
	if !ok {
		return nil
	}
	for _, j := range run {
		if _, err := jobs.KillJob(ctx, j.ID, "KILL"); err != nil && !errors.Is(err, sandbox.ErrJobEnded) && !errors.Is(err, sandbox.ErrNoJob) {
			return fmt.Errorf("kill job %s: %w", j.ID, err)
		}
	}
	deadline := time.Now().Add(restoreJobsWait)
	for {
		left, err := RunningJobs(ctx, sb)
		if err != nil {
			return err
		}
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("job %s was killed but has not ended after %s", left[0].ID, restoreJobsWait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
