package tools

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/checkpoint"
)

const checkpointsDefaultMax = 50

func checkpointsTool() Tool {
	t := newTool("checkpoints", checkpointsArgs{MaxResults: checkpointsDefaultMax}, listCheckpoints,
		mcp.WithDescription("List the thread's checkpoints, newest last: one a line, id, time (UTC), auto (taken by the server "+
			"before a call that may change files) or saved (by the checkpoint tool), the paths it changed (+added ~modified -deleted) "+
			"and its message. Shows the newest max_results; offset pages back to older ones. Use the id with diff and restore."),
		readOnly("List checkpoints"),
		withIcon("file"),
		mcp.WithOutputSchema[checkpointsFacts](),
	)
	t.UsesCheckpoints = true
	return t
}

type checkpointsArgs struct {
	MaxResults int `json:"max_results" arg:"minimum=1" jsonschema_description:"Most checkpoints to list, the newest ones (default 50)."`
	Offset     int `json:"offset" arg:"minimum=0" jsonschema_description:"Skip this many of the newest first, to page back to older ones (default 0)."`
}

// checkpointsFacts is checkpoints' structured content.
type checkpointsFacts struct {
	Total       int              `json:"total" jsonschema_description:"Checkpoints the thread has."`
	Checkpoints []checkpointFact `json:"checkpoints" jsonschema_description:"Those listed, oldest first."`
	NextOffset  *int             `json:"next_offset,omitempty" jsonschema_description:"The offset of the next page (older checkpoints), when there is one."`
}

// checkpointFact is one checkpoint.
type checkpointFact struct {
	ID       string    `json:"id"`
	Time     time.Time `json:"time"`
	Auto     bool      `json:"auto" jsonschema_description:"Taken by the server, not by the checkpoint tool."`
	Message  string    `json:"message"`
	Added    int       `json:"added"`
	Modified int       `json:"modified"`
	Deleted  int       `json:"deleted"`
	Files    int       `json:"files" jsonschema_description:"Regular files it holds."`
	Bytes    int64     `json:"bytes" jsonschema_description:"Their total size."`
}

func listCheckpoints(ctx context.Context, env *Env, a checkpointsArgs) *Result {
	cp, err := checkpointsOf(env)
	if err != nil {
		return fail(err)
	}
	list, err := cp.ListCheckpoints(ctx)
	if err != nil {
		return checkpointError("", err)
	}
	facts := checkpointsFacts{Total: len(list), Checkpoints: []checkpointFact{}}
	if len(list) == 0 {
		return structured("No checkpoints in this thread yet (checkpoint saves one).", false, facts)
	}
	end := max(len(list)-a.Offset, 0)
	start := max(end-a.MaxResults, 0)
	if end == 0 {
		return structured(fmt.Sprintf("No more checkpoints: %d in all, offset %d", len(list), a.Offset), false, facts)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d checkpoint(s), newest last:\n", len(list))
	for _, info := range list[start:end] {
		b.WriteString(FormatCheckpoint(info))
		b.WriteByte('\n')
		facts.Checkpoints = append(facts.Checkpoints, checkpointFact{ID: info.ID, Time: info.Time.UTC(), Auto: info.Auto, Message: info.Message,
			Added: info.Added, Modified: info.Modified, Deleted: info.Deleted, Files: info.Files, Bytes: info.Size})
	}
	s := strings.TrimSuffix(b.String(), "\n")
	truncated := start > 0
	if truncated {
		next := len(list) - start
		facts.NextOffset = &next
		s += fmt.Sprintf("\n[truncated: %d older checkpoint(s) not shown; next page: offset %d]", start, next)
	}
	return structured(s, truncated, facts)
}

// FormatCheckpoint is one checkpoint on one line, as checkpoints and the
// command line show it: id, time, auto or saved, changes, message.
func FormatCheckpoint(info checkpoint.Info) string {
	kind := "saved"
	if info.Auto {
		kind = "auto "
	}
	return fmt.Sprintf("%-4s %s  %s  +%d ~%d -%d  %s", info.ID, info.Time.UTC().Format("2006-01-02 15:04:05Z"), kind,
		info.Added, info.Modified, info.Deleted, oneLine(info.Message))
}
