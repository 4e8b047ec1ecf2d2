package tools

import (
	"context"
	"fmt"
	"strings"

	"github.com/bmatcuk/doublestar/v4"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/search"
)

const globDefaultMax = 200

func globTool() Tool {
	return newTool("glob", globArgs{MaxResults: globDefaultMax, Sort: "path"}, glob,
		mcp.WithDescription("Find files whose path matches a glob pattern (** matches any number of directories, "+
			"{a,b} alternatives), relative to path. .git directories are skipped."),
		readOnly("Find files"),
		withIcon("search"),
		mcp.WithOutputSchema[globFacts](),
	)
}

type globArgs struct {
	Pattern     string `json:"pattern" arg:"required" jsonschema_description:"Glob pattern, e.g. \"**/*.go\"; an absolute pattern searches from its fixed prefix. At most 4096 bytes and 256 patterns once {a,b} groups are expanded."`
	Path        string `json:"path" jsonschema_description:"Directory to search (default /mnt/user-data/workspace)."`
	IncludeDirs bool   `json:"include_dirs" jsonschema_description:"Also list matching directories (default false)."`
	MaxResults  int    `json:"max_results" arg:"minimum=1" jsonschema_description:"Most paths to list (default 200)."`
	Sort        string `json:"sort" jsonschema:"enum=path,enum=mtime" jsonschema_description:"path: by path (default); mtime: newest first."`
	Offset      int    `json:"offset" arg:"minimum=0" jsonschema_description:"Skip this many paths first, to page through a long result (default 0)."`
}

func glob(ctx context.Context, env *Env, a globArgs) *Result {
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
	maxResults, offset := a.MaxResults, a.Offset
	if err := checkPage(maxResults, offset); err != nil {
		return fail(err)
	}
	// One page is shown: the search keeps and sends no more than its hits.
	sreq := search.GlobRequest{Root: base, Pattern: pattern, IncludeDirs: a.IncludeDirs, Sort: a.Sort, Limit: offset + maxResults}
	if err := sreq.Validate(); err != nil {
		return fail(err)
	}

	var shown []search.Hit // the page: the hits from offset on
	seen := 0
	total, err := searcherOf(env).Glob(ctx, sreq, func(h search.Hit) error {
		if seen++; seen > offset {
			shown = append(shown, h)
		}
		return nil
	})
	if err != nil {
		if ctx.Err() != nil {
			return failf("cancelled: glob stopped")
		}
		return fail(err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Found %d paths under %s", total, base)
	facts := &globFacts{Paths: make([]string, 0, len(shown)), Total: total, Offset: offset}
	for _, h := range shown {
		b.WriteByte('\n')
		b.WriteString(h.Path)
		facts.Paths = append(facts.Paths, h.Path)
	}
	if next := offset + len(shown); next < total {
		facts.NextOffset = &next
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
	r.StructuredContent = facts
	return r
}

// globFacts is glob's structured content.
type globFacts struct {
	Paths      []string `json:"paths" jsonschema_description:"The virtual paths shown (this page)."`
	Total      int      `json:"total" jsonschema_description:"Paths found in all."`
	Offset     int      `json:"offset"`
	NextOffset *int     `json:"next_offset,omitempty" jsonschema_description:"The offset of the next page, when there is one."`
}
