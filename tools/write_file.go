package tools

import (
	"context"
	"fmt"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

func writeFileTool() Tool {
	return Tool{
		Def: mcp.NewTool("write_file",
			mcp.WithDescription("Write a file, creating it and its parent directories when needed. The write is atomic "+
				"(readers never see half a file) and an existing file keeps its mode."),
			mcp.WithString("path", mcp.Required(), mcp.Description("File to write; relative paths are under /mnt/user-data/workspace.")),
			mcp.WithString("content", mcp.Required(), mcp.Description("The file's new content (or what to append).")),
			mcp.WithBoolean("append", mcp.Description("Add content at the end instead of replacing the file (default false).")),
			destructive("Write file", false),
		),
		Handle: writeFile,
	}
}

func writeFile(ctx context.Context, env *Env, req mcp.CallToolRequest) *Result {
	raw, err := requiredString(req, "path")
	if err != nil {
		return fail(err)
	}
	content, err := requiredString(req, "content")
	if err != nil {
		return fail(err)
	}
	name, err := sandbox.Clean(raw)
	if err != nil {
		return fail(err)
	}
	appendTo := req.GetBool("append", false)
	err = env.Sandbox.FS().Edit(ctx, name, func(old []byte, _ bool) ([]byte, error) {
		if appendTo {
			return append(old, content...), nil
		}
		return []byte(content), nil
	})
	if err != nil {
		return fail(err)
	}
	return text(fmt.Sprintf("Wrote %d bytes to %s", len(content), name))
}
