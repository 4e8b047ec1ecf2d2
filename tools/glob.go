package tools

import (
	"context"
	"fmt"
	"io/fs"
	"path"
	"strings"

	"github.com/bmatcuk/doublestar/v4"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

const globDefaultMax = 200

func globTool() Tool {
	return Tool{
		Def: mcp.NewTool("glob",
			mcp.WithDescription("Find files whose path matches a glob pattern (** matches any number of directories, "+
				"{a,b} alternatives), relative to path. .git directories are skipped."),
			mcp.WithString("pattern", mcp.Required(), mcp.Description(`Glob pattern, e.g. "**/*.go"; an absolute pattern searches from its fixed prefix.`)),
			mcp.WithString("path", mcp.Description("Directory to search (default /mnt/user-data/workspace).")),
			mcp.WithBoolean("include_dirs", mcp.Description("Also list matching directories (default false).")),
			mcp.WithNumber("max_results", mcp.Description("Most paths to list (default 200).")),
			readOnly("Find files"),
		),
		Handle: glob,
	}
}

func glob(ctx context.Context, env *Env, req mcp.CallToolRequest) *Result {
	pattern, err := requiredString(req, "pattern")
	if err != nil {
		return fail(err)
	}
	base, err := pathArg(req, "path")
	if err != nil {
		return fail(err)
	}
	if strings.HasPrefix(pattern, "/") {
		dir, pat := doublestar.SplitPattern(pattern)
		if base, err = sandbox.Clean(dir); err != nil {
			return fail(err)
		}
		pattern = pat
	}
	pattern = strings.TrimPrefix(pattern, "./")
	if pattern == "" || !doublestar.ValidatePattern(pattern) {
		return failf("invalid glob pattern: %q", pattern)
	}
	includeDirs := req.GetBool("include_dirs", false)
	maxResults := req.GetInt("max_results", globDefaultMax)
	if maxResults <= 0 {
		maxResults = globDefaultMax
	}

	fsys := env.Sandbox.FS()
	fi, err := fsys.Stat(ctx, base)
	if err != nil {
		return fail(err)
	}
	if !fi.IsDir() {
		return fail(&sandbox.PathError{Path: base, Err: sandbox.ErrNotDir})
	}
	var found []string
	total := 0
	err = walk(ctx, fsys, base, true, func(vp, rel string, d fs.DirEntry) error {
		if d.IsDir() && !includeDirs {
			return nil
		}
		if ok, _ := doublestar.Match(pattern, rel); ok {
			total++
			if len(found) < maxResults {
				found = append(found, vp)
			}
		}
		return nil
	})
	if err != nil {
		return fail(err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Found %d paths under %s", total, base)
	for _, p := range found {
		b.WriteByte('\n')
		b.WriteString(p)
	}
	r := text(b.String())
	if total > len(found) {
		fmt.Fprintf(&b, "\n[truncated: showing the first %d of %d paths; narrow the pattern or raise max_results]", len(found), total)
		r = text(b.String())
		r.Truncated = true
	}
	return r
}

// matchName matches a file filter: a pattern with a slash against the
// relative path, otherwise against the base name.
func matchName(pattern, rel string) bool {
	if strings.Contains(pattern, "/") {
		ok, _ := doublestar.Match(pattern, rel)
		return ok
	}
	ok, _ := doublestar.Match(pattern, path.Base(rel))
	return ok
}
