package tools

import (
	"cmp"
	"context"
	"fmt"
	"io/fs"
	"path"
	"slices"
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
			mcp.WithString("sort", mcp.Enum("path", "mtime"), mcp.Description("path: by path (default); mtime: newest first.")),
			mcp.WithNumber("offset", mcp.Description("Skip this many paths first, to page through a long result (default 0).")),
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
	offset := max(req.GetInt("offset", 0), 0)
	sortBy := req.GetString("sort", "path")
	if sortBy != "path" && sortBy != "mtime" {
		return failf("sort %q: want path or mtime", sortBy)
	}

	fsys := env.Sandbox.FS()
	fi, err := fsys.Stat(ctx, base)
	if err != nil {
		return fail(err)
	}
	if !fi.IsDir() {
		return fail(&sandbox.PathError{Path: base, Err: sandbox.ErrNotDir})
	}
	type hit struct {
		path  string
		mtime int64
	}
	var found []hit
	total := 0
	match := globMatcher(pattern)
	err = walk(ctx, fsys, base, true, func(vp, rel string, d fs.DirEntry) error {
		if d.IsDir() && !includeDirs {
			return nil
		}
		if !match(rel) {
			return nil
		}
		total++
		if sortBy == "path" && len(found) >= offset+maxResults {
			return nil // walked in path order: later ones are not shown
		}
		h := hit{path: vp}
		if sortBy == "mtime" {
			if fi, err := d.Info(); err == nil {
				h.mtime = fi.ModTime().UnixNano()
			}
		}
		found = append(found, h)
		return nil
	})
	if err != nil {
		return fail(err)
	}
	if sortBy == "mtime" {
		slices.SortStableFunc(found, func(a, b hit) int { return cmp.Compare(b.mtime, a.mtime) })
	}
	shown := found[min(offset, len(found)):min(offset+maxResults, len(found))]
	var b strings.Builder
	fmt.Fprintf(&b, "Found %d paths under %s", total, base)
	for _, h := range shown {
		b.WriteByte('\n')
		b.WriteString(h.path)
	}
	r := &Result{}
	switch {
	case offset == 0 && total > len(shown):
		fmt.Fprintf(&b, "\n[truncated: showing the first %d of %d paths; narrow the pattern or raise max_results; next page: offset %d]", len(shown), total, len(shown))
		r.Truncated = true
	case offset > 0:
		fmt.Fprintf(&b, "\n[showing %d of %d paths from offset %d", len(shown), total, offset)
		if offset+len(shown) < total {
			fmt.Fprintf(&b, "; next page: offset %d", offset+len(shown))
			r.Truncated = true
		}
		b.WriteString("]")
	}
	r.CallToolResult = mcp.NewToolResultText(b.String())
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

// globMatcher returns a function reporting whether a relative path matches
// a valid pattern, as doublestar.Match does. It runs for every entry of the
// tree, so the commonest patterns take a short cut: "**/NAME" with no other
// slash only looks at the base name (a leading "**/" matches any run of
// directories, none included), and "**/*SUFFIX" is a suffix test.
func globMatcher(pattern string) func(rel string) bool {
	if name, ok := strings.CutPrefix(pattern, "**/"); ok && !strings.Contains(name, "/") && !strings.Contains(name, "**") {
		if suffix, ok := strings.CutPrefix(name, "*"); ok && !strings.ContainsAny(suffix, `*?[]{}\`) {
			return func(rel string) bool { return strings.HasSuffix(path.Base(rel), suffix) }
		}
		return func(rel string) bool {
			ok, _ := doublestar.Match(name, path.Base(rel))
			return ok
		}
	}
	return func(rel string) bool {
		ok, _ := doublestar.Match(pattern, rel)
		return ok
	}
}
