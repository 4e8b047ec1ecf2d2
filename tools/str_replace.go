package tools

import (
	"context"
	"fmt"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

func strReplaceTool() Tool {
	return Tool{
		Def: mcp.NewTool("str_replace",
			mcp.WithDescription("Replace text in a file. old_str must occur exactly once unless replace_all; "+
				"include enough surrounding lines to make it unique. The write is atomic."),
			mcp.WithString("path", mcp.Required(), mcp.Description("File to edit; relative paths are under /mnt/user-data/workspace.")),
			mcp.WithString("old_str", mcp.Required(), mcp.Description("Exact text to find.")),
			mcp.WithString("new_str", mcp.Required(), mcp.Description("Text to put in its place (may be empty).")),
			mcp.WithBoolean("replace_all", mcp.Description("Replace every occurrence (default false).")),
			destructive("Edit file", false),
		),
		Handle: strReplace,
	}
}

func strReplace(ctx context.Context, env *Env, req mcp.CallToolRequest) *Result {
	raw, err := requiredString(req, "path")
	if err != nil {
		return fail(err)
	}
	oldStr, err := requiredString(req, "old_str")
	if err != nil {
		return fail(err)
	}
	newStr, err := requiredString(req, "new_str")
	if err != nil {
		return fail(err)
	}
	if oldStr == "" {
		return failf("old_str is empty")
	}
	name, err := sandbox.Clean(raw)
	if err != nil {
		return fail(err)
	}
	all := req.GetBool("replace_all", false)
	var n int
	err = env.Sandbox.FS().Edit(ctx, name, func(old []byte, exists bool) ([]byte, error) {
		if !exists {
			return nil, &sandbox.PathError{Path: name, Err: sandbox.ErrNotFound}
		}
		content := string(old)
		n = strings.Count(content, oldStr)
		switch {
		case n == 0:
			return nil, fmt.Errorf("old_str not found in %s", name)
		case n > 1 && !all:
			return nil, fmt.Errorf("old_str found %d times in %s; add surrounding context to make it unique, or set replace_all", n, name)
		}
		return []byte(strings.ReplaceAll(content, oldStr, newStr)), nil
	})
	if err != nil {
		return fail(err)
	}
	return text(fmt.Sprintf("Replaced %d occurrence(s) in %s", n, name))
}
