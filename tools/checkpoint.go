package tools

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/checkpoint"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// The checkpoint tools (SPEC §18): checkpoint, checkpoints, diff and
// restore save the thread's user-data, list what was saved, show what
// changed and put it back. The sandbox runs the engine (on the host for
// local and docker, in the box for kubernetes); these tools word its
// answers. The server takes automatic checkpoints besides (Tool.ChangesFiles).

// Checkpointer is what a sandbox with checkpoints answers (the method set
// of providers/internal/supervised).
type Checkpointer interface {
	SaveCheckpoint(ctx context.Context, opts checkpoint.SaveOptions, maxBytes int64) (checkpoint.SaveResult, error)
	ListCheckpoints(ctx context.Context) ([]checkpoint.Info, error)
	CheckpointChanges(ctx context.Context, from, to string) ([]checkpoint.Change, error)
	OpenCheckpointFile(ctx context.Context, id, rel string) (io.ReadCloser, checkpoint.Entry, error)
	RestoreCheckpoint(ctx context.Context, id, undoMessage string, maxBytes int64) (checkpoint.RestoreResult, error)
}

// checkpointMessageMax bounds a checkpoint's message (bytes).
const checkpointMessageMax = 1000

// checkpointID is the form of a checkpoint's id; anything else is refused
// before it reaches the sandbox.
var checkpointID = regexp.MustCompile(`^[1-9][0-9]{0,17}$`)

func checkpointsOf(env *Env) (Checkpointer, error) {
	c, ok := env.Sandbox.(Checkpointer)
	if !ok {
		return nil, errors.New("this sandbox keeps no checkpoints")
	}
	return c, nil
}

// checkCheckpointID refuses what is not a checkpoint id, naming the
// argument.
func checkCheckpointID(arg, id string) error {
	if !checkpointID.MatchString(id) {
		return fmt.Errorf("%s %q: not a checkpoint id (1, 2, …; checkpoints lists them)", arg, cutHeadOnly(id, 40))
	}
	return nil
}

// checkpointError words an engine's error for the agent.
func checkpointError(id string, err error) *Result {
	switch {
	case errors.Is(err, checkpoint.ErrNotFound) && id != "":
		return failf("no checkpoint %s in this thread (checkpoints lists them)", id)
	case errors.Is(err, checkpoint.ErrCorrupt):
		return failf("checkpoint %s cannot be read: its stored data is damaged (%v)", id, err)
	}
	return fail(err)
}

// oneLine is a message shown on one line.
// A control character (ESC, BEL, a C1 code: what moves a terminal's
// cursor or writes its clipboard) is written as \xNN or \uNNNN: the text is
// the agent's, and the command line prints it to a person's terminal.
func oneLine(s string) string {
	return Printable(strings.Join(strings.Fields(s), " "))
}

// Printable is s with every control character and invalid byte written
// as an escape, for a person's terminal.
func Printable(s string) string {
	var b strings.Builder
	for len(s) > 0 {
		r, n := utf8.DecodeRuneInString(s)
		switch {
		case r == utf8.RuneError && n == 1, unicode.IsControl(r) && r < 0x80:
			fmt.Fprintf(&b, `\x%02x`, s[0])
		case unicode.IsControl(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[:n])
		}
		s = s[n:]
	}
	return b.String()
}

// userDataPath is the virtual path of a path relative to user-data.
func userDataPath(rel string) string {
	if rel == "" || rel == "." {
		return sandbox.UserDataDir
	}
	return sandbox.UserDataDir + "/" + rel
}

func checkpointTool() Tool {
	t := newTool("checkpoint", checkpointArgs{}, saveCheckpoint,
		mcp.WithDescription("Save the thread's files (everything under /mnt/user-data: contents, directories, modes, symlinks) as a checkpoint "+
			"that restore can put back later. Answers [checkpoint C saved: N files changed]. When nothing changed since the latest "+
			"checkpoint saved with this tool, none is made and the answer names it. Checkpoints are also taken automatically before the calls "+
			"that may change files; take one yourself to mark a state worth returning to (e.g. before a risky refactor). "+
			"/mnt/user-data/outputs/.tool-results is never saved."),
		mcp.WithToolAnnotation(mcp.ToolAnnotation{Title: "Save a checkpoint", ReadOnlyHint: mcp.ToBoolPtr(false),
			DestructiveHint: mcp.ToBoolPtr(false), IdempotentHint: mcp.ToBoolPtr(true), OpenWorldHint: mcp.ToBoolPtr(false)}),
		withIcon("file"),
		mcp.WithOutputSchema[checkpointFacts](),
	)
	t.UsesCheckpoints = true
	return t
}

type checkpointArgs struct {
	Message string `json:"message" jsonschema_description:"What this state is, shown by checkpoints (at most 1000 bytes)."`
}

// checkpointFacts is checkpoint's structured content.
type checkpointFacts struct {
	ID       string `json:"id" jsonschema_description:"The checkpoint saved, or the latest when nothing changed."`
	Saved    bool   `json:"saved" jsonschema_description:"False when nothing changed since the latest checkpoint: none was made."`
	Changed  int    `json:"changed" jsonschema_description:"Paths added, modified or deleted since the checkpoint before it."`
	Files    int    `json:"files" jsonschema_description:"Regular files the checkpoint holds."`
	Bytes    int64  `json:"bytes" jsonschema_description:"Their total size."`
	NotSaved int    `json:"not_saved,omitempty" jsonschema_description:"Special files (FIFOs, sockets, devices) and unreadable paths whose content was not saved."`
}

func saveCheckpoint(ctx context.Context, env *Env, a checkpointArgs) *Result {
	if len(a.Message) > checkpointMessageMax {
		return failf("argument \"message\" is %d bytes: at most %d", len(a.Message), checkpointMessageMax)
	}
	cp, err := checkpointsOf(env)
	if err != nil {
		return fail(err)
	}
	res, err := cp.SaveCheckpoint(ctx, checkpoint.SaveOptions{Message: a.Message}, env.CheckpointMaxBytes)
	if err == nil && !res.Saved && res.Info.Auto {
		// Nothing changed since an automatic checkpoint (the server takes
		// one after every call that may change files): the agent's own
		// is made all the same, so that its message marks this state.
		res, err = cp.SaveCheckpoint(ctx, checkpoint.SaveOptions{Message: a.Message, Force: true}, env.CheckpointMaxBytes)
	}
	if err != nil && res.Info.ID == "" {
		return checkpointError("", err)
	}
	info := res.Info
	facts := checkpointFacts{ID: info.ID, Saved: res.Saved, Changed: info.Changed(), Files: info.Files, Bytes: info.Size, NotSaved: len(res.Skipped)}
	var s string
	if res.Saved {
		s = fmt.Sprintf("[checkpoint %s saved: %d files changed]", info.ID, info.Changed())
	} else {
		s = fmt.Sprintf("[nothing changed since checkpoint %s: no new checkpoint made]", info.ID)
	}
	s += skippedNote(res.Skipped)
	if err != nil {
		s += "\n[" + oneLine(err.Error()) + "]" // saved, but the oldest were not pruned
	}
	return structured(s, false, facts)
}

// skippedNote names what a save could not hold (at most a few paths).
func skippedNote(skipped []checkpoint.Skip) string {
	if len(skipped) == 0 {
		return ""
	}
	var names []string
	for i, sk := range skipped {
		if i == 3 {
			names = append(names, fmt.Sprintf("and %d more", len(skipped)-i))
			break
		}
		names = append(names, fmt.Sprintf("%s (%s)", userDataPath(sk.Path), sk.Reason))
	}
	return fmt.Sprintf("\n[not saved: %d path(s) whose content no checkpoint holds: %s]", len(skipped), strings.Join(names, ", "))
}
