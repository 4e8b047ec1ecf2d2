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
			mcp.WithString("pattern", mcp.Required(), mcp.Description(`Glob pattern, e.g. "**/*.go"; an absolute pattern searches from its fixed prefix. At most 4096 bytes and 256 patterns once {a,b} groups are expanded.`)),
			mcp.WithString("path", mcp.Description("Directory to search (default /mnt/user-data/workspace).")),
			mcp.WithBoolean("include_dirs", mcp.Description("Also list matching directories (default false).")),
			mcp.WithInteger("max_results", mcp.Min(1), mcp.Description("Most paths to list (default 200).")),
			mcp.WithString("sort", mcp.Enum("path", "mtime"), mcp.Description("path: by path (default); mtime: newest first.")),
			mcp.WithInteger("offset", mcp.Min(0), mcp.Description("Skip this many paths first, to page through a long result (default 0).")),
			readOnly("Find files"),
		),
		Args:   globArgs{},
		Handle: glob,
	}
}

type globArgs struct {
	Pattern     string `json:"pattern" arg:"required"`
	Path        string `json:"path"`
	IncludeDirs bool   `json:"include_dirs"`
	MaxResults  int    `json:"max_results" arg:"min=1"`
	Sort        string `json:"sort"`
	Offset      int    `json:"offset" arg:"min=0"`
}

func glob(ctx context.Context, env *Env, req mcp.CallToolRequest) *Result {
	a := globArgs{MaxResults: globDefaultMax, Sort: "path"}
	if err := bindArgs("glob", req, &a); err != nil {
		return fail(err)
	}
	pattern := a.Pattern
	base, err := sandbox.Clean(a.Path)
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
	match, err := compileGlob("pattern", pattern)
	if err != nil {
		return fail(err)
	}
	includeDirs, maxResults, offset, sortBy := a.IncludeDirs, a.MaxResults, a.Offset, a.Sort
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
	err = walk(ctx, fsys, base, true, func(vp, rel string, d fs.DirEntry) error {
		if d.IsDir() && !includeDirs {
			return nil
		}
		if ok, err := match.match(ctx, rel); !ok {
			return err
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
		if ctx.Err() != nil {
			return failf("cancelled: glob stopped")
		}
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

// Bounds of a glob pattern (glob's pattern, grep's glob). Braces multiply:
// "{a,b}{c,d}" stands for four patterns, and doublestar tries them by
// backtracking, so a few dozen "{,}" groups would take hours for every
// entry of the tree. A pattern is expanded here, up to globMaxAlternatives
// brace-free patterns, each matched in linear time, with the call's context
// checked between them.
const (
	globMaxPatternBytes = 4096
	globMaxAlternatives = 256
)

// globPattern is a compiled glob pattern: the brace-free patterns it stands
// for, each with its matcher.
type globPattern struct {
	alts []func(rel string) bool
}

// compileGlob validates and bounds a glob pattern given as argument arg.
func compileGlob(arg, pattern string) (*globPattern, error) {
	return compile(arg, pattern, false)
}

// compileFilter compiles a file filter (grep's glob): an alternative with a
// slash matches the relative path, one without only the base name — each
// alternative of "{*.txt,docs/*.md}" by its own form.
func compileFilter(arg, pattern string) (*globPattern, error) {
	return compile(arg, pattern, true)
}

func compile(arg, pattern string, filter bool) (*globPattern, error) {
	if len(pattern) > globMaxPatternBytes {
		return nil, fmt.Errorf("%s: the glob pattern is %d bytes long, over the limit of %d", arg, len(pattern), globMaxPatternBytes)
	}
	if pattern == "" || !doublestar.ValidatePattern(pattern) {
		return nil, fmt.Errorf("%s: invalid glob pattern: %q", arg, pattern)
	}
	alts, ok := expandBraces(pattern, globMaxAlternatives)
	if !ok {
		return nil, fmt.Errorf("%s: the glob pattern's {...} groups expand to more than %d patterns (the limit); use fewer alternatives or split the search", arg, globMaxAlternatives)
	}
	g := &globPattern{}
	for _, a := range alts {
		m := globMatcher(a)
		if filter && !strings.Contains(a, "/") {
			full := m
			m = func(rel string) bool { return full(path.Base(rel)) }
		}
		g.alts = append(g.alts, m)
	}
	return g, nil
}

// match reports whether rel matches; it stops with ctx's error when the
// call is cancelled.
func (g *globPattern) match(ctx context.Context, rel string) (bool, error) {
	for _, m := range g.alts {
		if err := ctx.Err(); err != nil {
			return false, err
		}
		if m(rel) {
			return true, nil
		}
	}
	return false, nil
}

// expandBraces returns the brace-free patterns a valid pattern stands for,
// reading braces as doublestar does ("\\" escapes the next byte, a class
// [...] is taken whole, alternatives nest), or false when there are more
// than limit. No intermediate list grows past limit either.
func expandBraces(pattern string, limit int) ([]string, bool) {
	alts, _, ok := expandSeq(pattern, 0, false, limit)
	return alts, ok
}

// expandSeq expands pattern from i up to the end, or, when nested, up to
// the "," or "}" ending an alternative (returned as the new i).
func expandSeq(pattern string, i int, nested bool, limit int) ([]string, int, bool) {
	out := []string{""}
	lit := i // start of the literal run not yet appended
	flush := func(end int) {
		if end > lit {
			for k := range out {
				out[k] += pattern[lit:end]
			}
		}
	}
	for i < len(pattern) {
		switch c := pattern[i]; {
		case c == '\\':
			i += 2
		case c == '[':
			i++
			for i < len(pattern) && pattern[i] != ']' {
				if pattern[i] == '\\' {
					i++
				}
				i++
			}
			i++
		case nested && (c == ',' || c == '}'):
			flush(i)
			return out, i, true
		case c == '{':
			flush(i)
			var group []string
			for i < len(pattern) && pattern[i] != '}' {
				alt, next, ok := expandSeq(pattern, i+1, true, limit)
				if !ok || len(group)+len(alt) > limit {
					return nil, 0, false
				}
				group = append(group, alt...)
				i = next
			}
			i++ // the "}"
			lit = i
			if len(out)*len(group) > limit {
				return nil, 0, false
			}
			next := make([]string, 0, len(out)*len(group))
			for _, o := range out {
				for _, a := range group {
					next = append(next, o+a)
				}
			}
			out = next
		default:
			i++
		}
	}
	flush(min(i, len(pattern)))
	return out, i, true
}

// globMatcher returns a function reporting whether a relative path matches
// a valid brace-free pattern, as doublestar.Match does. It runs for every
// entry of the tree, so the commonest patterns take a short cut: "**/NAME"
// with no other slash only looks at the base name (a leading "**/" matches
// any run of directories, none included), and "**/*SUFFIX" is a suffix test.
func globMatcher(pattern string) func(rel string) bool {
	if name, ok := strings.CutPrefix(pattern, "**/"); ok && name != "" && !strings.Contains(name, "/") && !strings.Contains(name, "**") {
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
