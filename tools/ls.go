package tools

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"unicode/utf8"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

const (
	lsDefaultDepth = 2
	lsMaxDepth     = 5
)

// errStop ends a listing early without an error.
var errStop = errors.New("stop listing")

func lsTool() Tool {
	return newTool("ls", lsArgs{Depth: lsDefaultDepth}, ls,
		mcp.WithDescription("List a directory as a tree: one entry a line, children indented under their directory, "+
			"directories ending in /, sorted by name."),
		readOnly("List directory"),
		withIcon("folder"),
	)
}

type lsArgs struct {
	Path  string `json:"path" jsonschema_description:"Directory to list (default /mnt/user-data/workspace)."`
	Depth int    `json:"depth" arg:"minimum=1" jsonschema_description:"How many levels to show (default 2, max 5: more is shown as 5)."`
}

func ls(ctx context.Context, env *Env, a lsArgs) *Result {
	dir, err := sandbox.Clean(a.Path)
	if err != nil {
		return fail(err)
	}
	depth := min(a.Depth, lsMaxDepth)
	fsys := env.Sandbox.FS()
	fi, err := fsys.Stat(ctx, dir)
	if err != nil {
		return fail(err)
	}
	if !fi.IsDir() {
		return text(dir)
	}

	limit := env.Limits.LsOutputMaxChars
	var b strings.Builder
	b.WriteString(strings.TrimSuffix(dir, "/") + "/\n")
	truncated := false
	var list func(dir string, level int) error
	list = func(dir string, level int) error {
		entries, err := fsys.ReadDir(ctx, dir)
		if err != nil {
			return nil // an unreadable subdirectory shows as empty
		}
		for _, e := range entries {
			if limit > 0 && b.Len() > limit*utf8.UTFMax { // more than limit characters
				truncated = true
				return errStop
			}
			b.WriteString(strings.Repeat("  ", level))
			b.WriteString(e.Name())
			if e.IsDir() {
				b.WriteByte('/')
			} else if e.Type()&fs.ModeSymlink != 0 {
				b.WriteByte('@')
			}
			b.WriteByte('\n')
			if e.IsDir() && level < depth {
				if err := list(strings.TrimSuffix(dir, "/")+"/"+e.Name(), level+1); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := list(dir, 1); err != nil && err != errStop {
		return fail(err)
	}
	out := strings.TrimSuffix(b.String(), "\n")
	if cut, ok := cutHead(out, limit); ok || truncated {
		if i := strings.LastIndexByte(cut, '\n'); i > 0 {
			cut = cut[:i]
		}
		out = cut + fmt.Sprintf("\n[... listing truncated at %d characters: list a subdirectory or lower depth]", limit)
		truncated = true
	}
	r := text(out)
	r.Truncated = truncated
	return r
}
