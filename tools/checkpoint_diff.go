package tools

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/checkpoint"
)

const (
	diffDefaultMax = 400
	// diffFileMax: a larger file is listed as changed, not diffed.
	diffFileMax = 1 << 20
	// diffReadMax bounds what one diff reads of files in all: past it the
	// other text files are named, not diffed.
	diffReadMax = 32 << 20
)

func diffTool() Tool {
	t := newTool("diff", diffArgs{MaxResults: diffDefaultMax}, diffCheckpoints,
		mcp.WithDescription("Show what changed between two checkpoints, or from a checkpoint to the files as they are now: "+
			"first one line per changed path (added, modified or deleted; directories end in /, symlinks show their target, "+
			"binary files their sizes, mode changes their modes), then a unified diff of the text files. from defaults to the "+
			"latest checkpoint, to to now. Long diffs are paged: max_results lines from offset; a cut result is saved whole under "+
			"/mnt/user-data/outputs/.tool-results/ and the note names the file."),
		readOnly("Diff checkpoints"),
		withIcon("search"),
		mcp.WithOutputSchema[diffFacts](),
	)
	t.UsesCheckpoints = true
	return t
}

type diffArgs struct {
	From       string `json:"from" jsonschema_description:"The checkpoint to compare from (default: the latest)."`
	To         string `json:"to" jsonschema_description:"The checkpoint to compare to (default: the files as they are now)."`
	MaxResults int    `json:"max_results" arg:"minimum=1" jsonschema_description:"Most lines to show (default 400)."`
	Offset     int    `json:"offset" arg:"minimum=0" jsonschema_description:"Skip this many lines first, to page through a long diff (default 0)."`
}

// diffFacts is diff's structured content.
type diffFacts struct {
	From       string `json:"from"`
	To         string `json:"to" jsonschema_description:"The checkpoint compared to; \"\" for the files as they are now."`
	Added      int    `json:"added"`
	Modified   int    `json:"modified"`
	Deleted    int    `json:"deleted"`
	Lines      int    `json:"lines" jsonschema_description:"Lines of the whole diff."`
	Shown      int    `json:"shown" jsonschema_description:"Lines shown."`
	NextOffset *int   `json:"next_offset,omitempty" jsonschema_description:"The offset of the next page, when there is one."`
	Saved
}

func diffCheckpoints(ctx context.Context, env *Env, a diffArgs) *Result {
	cp, err := checkpointsOf(env)
	if err != nil {
		return fail(err)
	}
	from, to := a.From, a.To
	if from != "" {
		if err := checkCheckpointID("from", from); err != nil {
			return fail(err)
		}
	}
	if to != "" {
		if err := checkCheckpointID("to", to); err != nil {
			return fail(err)
		}
	}
	if err := checkPage(a.MaxResults, a.Offset); err != nil {
		return fail(err)
	}
	if from == "" {
		list, err := cp.ListCheckpoints(ctx)
		if err != nil {
			return checkpointError("", err)
		}
		if len(list) == 0 {
			return failf("no checkpoints in this thread yet: nothing to compare with (checkpoint saves one)")
		}
		from = list[len(list)-1].ID
	}
	changes, err := cp.CheckpointChanges(ctx, from, to)
	if err != nil {
		missing := from
		if errors.Is(err, checkpoint.ErrNotFound) && to != "" {
			if list, lerr := cp.ListCheckpoints(ctx); lerr == nil && slices.ContainsFunc(list, func(i checkpoint.Info) bool { return i.ID == from }) {
				missing = to
			}
		}
		return checkpointError(missing, err)
	}
	toName := "now"
	if to != "" {
		toName = "checkpoint " + to
	}
	facts := &diffFacts{From: from, To: to}
	d := &differ{ctx: ctx, env: env, cp: cp, from: from, to: to, toName: toName}
	var lines []string
	for _, c := range changes {
		switch c.Kind {
		case checkpoint.Added:
			facts.Added++
		case checkpoint.Modified:
			facts.Modified++
		case checkpoint.Deleted:
			facts.Deleted++
		}
		lines = append(lines, fmt.Sprintf("%-8s %s%s", c.Kind, entryName(c), d.describe(c)))
	}
	if len(changes) == 0 {
		return structured(fmt.Sprintf("No changes from checkpoint %s to %s.", from, toName), false, facts)
	}
	header := fmt.Sprintf("Changes from checkpoint %s to %s: %d path(s) (%d added, %d modified, %d deleted)", from, toName,
		len(changes), facts.Added, facts.Modified, facts.Deleted)
	for _, c := range changes {
		if ctx.Err() != nil {
			return failf("cancelled: diff stopped")
		}
		lines = append(lines, d.textDiff(c)...)
	}

	saved := newSpill(ctx, env.Sandbox.FS(), "diff", 1<<20)
	io.WriteString(saved, header+"\n")
	var out strings.Builder
	shown := 0
	for i, l := range lines {
		if env.Mask != nil { // whole, before a long line is cut (as grep)
			l = env.Mask(l)
		}
		io.WriteString(saved, l+"\n")
		if i < a.Offset || shown == a.MaxResults {
			continue
		}
		if cut, ok := cutHead(l, grepLineMax); ok {
			l = cut + " [...]"
		}
		out.WriteString(l + "\n")
		shown++
	}
	truncated := len(lines) > a.Offset+shown
	savedTo := saved.Finish(truncated)
	facts.Lines, facts.Shown, facts.Saved = len(lines), shown, savedAt(savedTo)
	if shown == 0 {
		return structured(fmt.Sprintf("%s\nNo more lines: %d in all, offset %d", header, len(lines), a.Offset), false, facts)
	}
	s := header + "\n" + strings.TrimSuffix(out.String(), "\n")
	if truncated {
		next := a.Offset + shown
		facts.NextOffset = &next
		if a.Offset == 0 {
			s += fmt.Sprintf("\n[truncated: showing the first %d lines of %d; raise max_results", shown, len(lines))
		} else {
			s += fmt.Sprintf("\n[truncated: showing %d lines from offset %d of %d", shown, a.Offset, len(lines))
		}
		s += fmt.Sprintf("; next page: offset %d", next)
		if savedTo != "" {
			s += "; the whole diff is in " + savedTo
		}
		s += "]"
	}
	return structured(s, truncated, facts)
}

// entryName is a change's virtual path, a directory's ending in "/".
func entryName(c checkpoint.Change) string {
	e := c.New
	if e == nil {
		e = c.Old
	}
	name := userDataPath(c.Path)
	if e != nil && e.Mode.IsDir() {
		name += "/"
	}
	return name
}

// differ reads the two sides of a diff.
type differ struct {
	ctx       context.Context
	env       *Env
	cp        Checkpointer
	from, to  string
	toName    string
	bytesRead int64 // of files, so far
}

// kindOf names an entry's type.
func kindOf(e *checkpoint.Entry) string {
	switch {
	case e == nil:
		return "nothing"
	case e.Skipped != "":
		return e.Skipped
	case e.Mode.IsDir():
		return "directory"
	case e.Mode&fs.ModeSymlink != 0:
		return "symlink"
	case e.Mode.IsRegular():
		return "file"
	}
	return "special file"
}

// describe is what a change's line says besides its path.
func (d *differ) describe(c checkpoint.Change) string {
	o, n := c.Old, c.New
	var parts []string
	switch {
	case o != nil && n != nil && kindOf(o) != kindOf(n):
		parts = append(parts, kindOf(o)+" -> "+kindOf(n))
	case n != nil && n.Mode&fs.ModeSymlink != 0 && o != nil:
		parts = append(parts, fmt.Sprintf("symlink: %s -> %s", o.Target, n.Target))
	case (n != nil && n.Mode&fs.ModeSymlink != 0) || (o != nil && o.Mode&fs.ModeSymlink != 0 && n == nil):
		e := n
		if e == nil {
			e = o
		}
		parts = append(parts, "symlink to "+e.Target)
	case (n != nil && n.Skipped != "") || (o != nil && o.Skipped != ""):
		parts = append(parts, "not saved: "+kindOf(n))
	case (n != nil && n.Mode.IsRegular()) || (o != nil && o.Mode.IsRegular()):
		switch {
		case o == nil:
			parts = append(parts, fmt.Sprintf("%d bytes", n.Size))
		case n == nil:
			parts = append(parts, fmt.Sprintf("%d bytes", o.Size))
		case o.Hash != n.Hash || o.Size != n.Size:
			parts = append(parts, fmt.Sprintf("%d -> %d bytes", o.Size, n.Size))
		}
	}
	if o != nil && n != nil && kindOf(o) == kindOf(n) && o.Mode.Perm() != n.Mode.Perm() {
		parts = append(parts, fmt.Sprintf("mode %04o -> %04o", o.Mode.Perm(), n.Mode.Perm()))
	}
	if len(parts) == 0 {
		return ""
	}
	return "  (" + strings.Join(parts, ", ") + ")"
}

// textDiff is the unified diff of a changed regular file, when both sides
// are text (or absent); a note when a side is binary or too large; nothing
// for the rest (their line above says it all).
func (d *differ) textDiff(c checkpoint.Change) []string {
	o, n := c.Old, c.New
	isFile := func(e *checkpoint.Entry) bool { return e != nil && e.Skipped == "" && e.Mode.IsRegular() }
	if !isFile(o) && !isFile(n) {
		return nil
	}
	if isFile(o) && isFile(n) && o.Hash != "" && o.Hash == n.Hash {
		return nil // its mode alone changed
	}
	name := userDataPath(c.Path)
	var a, b string
	if isFile(o) {
		s, why := d.read(d.from, c.Path, o)
		if why != "" {
			return []string{fmt.Sprintf("(%s: %s in checkpoint %s, not diffed)", name, why, d.from)}
		}
		a = s
	}
	if isFile(n) {
		s, why := d.read(d.to, c.Path, n)
		if why != "" {
			return []string{fmt.Sprintf("(%s: %s in %s, not diffed)", name, why, d.toName)}
		}
		b = s
	}
	if a == b {
		return nil
	}
	oldName, newName := name+"\t(checkpoint "+d.from+")", name+"\t("+d.toName+")"
	if !isFile(o) {
		oldName = "/dev/null"
	}
	if !isFile(n) {
		newName = "/dev/null"
	}
	out := []string{"--- " + oldName, "+++ " + newName}
	return append(out, hunks(lineDiff(linesOf(a), linesOf(b)))...)
}

// read reads a regular file of checkpoint id ("": the live tree), or says
// why it is not diffed (binary, too large, gone).
func (d *differ) read(id, rel string, e *checkpoint.Entry) (string, string) {
	if e.Size > diffFileMax {
		return "", fmt.Sprintf("%d bytes, larger than %d", e.Size, diffFileMax)
	}
	if d.bytesRead+e.Size > diffReadMax {
		return "", fmt.Sprintf("the diff read %d bytes of files already", d.bytesRead)
	}
	d.bytesRead += e.Size
	var r io.ReadCloser
	if id == "" {
		f, err := d.env.Sandbox.FS().Open(d.ctx, userDataPath(rel))
		if err != nil {
			return "", "cannot be read now"
		}
		r = f
	} else {
		f, _, err := d.cp.OpenCheckpointFile(d.ctx, id, rel)
		if err != nil {
			return "", "cannot be read (" + err.Error() + ")"
		}
		r = f
	}
	defer r.Close()
	data, err := io.ReadAll(io.LimitReader(r, diffFileMax+1))
	switch {
	case err != nil:
		return "", "cannot be read (" + err.Error() + ")"
	case len(data) > diffFileMax:
		return "", fmt.Sprintf("larger than %d bytes", diffFileMax)
	case bytes.IndexByte(data, 0) >= 0 || !utf8.Valid(data):
		return "", "binary"
	}
	return string(data), ""
}
