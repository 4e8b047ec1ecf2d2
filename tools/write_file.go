package tools

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

func writeFileTool() Tool {
	t := newTool("write_file", writeFileArgs{}, writeFile,
		mcp.WithDescription("Write a file, creating it and its parent directories when needed. The write is atomic "+
			"(readers never see half a file) and an existing file keeps its mode."),
		destructive("Write file", false),
		withIcon("pencil"),
		mcp.WithOutputSchema[EditedFile](),
	)
	t.ChangesFiles = true
	return t
}

type writeFileArgs struct {
	Path           string `json:"path" arg:"required" jsonschema_description:"File to write; relative paths are under /mnt/user-data/workspace."`
	Content        string `json:"content" arg:"required" jsonschema_description:"The file's new content (or what to append)."`
	Append         bool   `json:"append" jsonschema_description:"Add content at the end instead of replacing the file (default false)."`
	ExpectedSHA256 string `json:"expected_sha256" jsonschema_description:"Refuse the write unless the file exists with this sha256 (from read_file): no lost update."`
}

func writeFile(ctx context.Context, env *Env, a writeFileArgs) *Result {
	name, err := sandbox.Clean(a.Path)
	if err != nil {
		return fail(err)
	}
	content, appendTo, expected := a.Content, a.Append, a.ExpectedSHA256
	var facts EditedFile
	err = env.Sandbox.FS().Edit(ctx, name, func(old []byte, exists bool) ([]byte, error) {
		if err := checkExpected(name, expected, old, exists); err != nil {
			return nil, err
		}
		updated := []byte(content)
		if appendTo {
			updated = append(old, content...)
		}
		facts = editedFile(name, updated)
		return updated, nil
	})
	if err != nil {
		return fail(err)
	}
	r := structured(fmt.Sprintf("Wrote %d bytes to %s", len(content), name), false, facts)
	r.Changed = []string{name}
	return r
}

// checkExpected refuses an edit when the caller read another version of
// the file than the one there now (or the file is gone).
func checkExpected(name, expected string, old []byte, exists bool) error {
	if expected == "" {
		return nil
	}
	sum := sha256.Sum256(old)
	if !exists || !strings.EqualFold(strings.TrimSpace(expected), hex.EncodeToString(sum[:])) {
		return fmt.Errorf("file changed since read: %s", name)
	}
	return nil
}

// EditedFile is write_file's structured content, and part of
// str_replace's: the file as the call left it, so that the next edit can
// pass its hash as expected_sha256 without reading it again.
type EditedFile struct {
	Path   string `json:"path"`
	Bytes  int    `json:"bytes" jsonschema_description:"The file's size after the call."`
	SHA256 string `json:"sha256" jsonschema_description:"The sha256 of the file after the call (hex)."`
}

func editedFile(name string, content []byte) EditedFile {
	sum := sha256.Sum256(content)
	return EditedFile{Path: name, Bytes: len(content), SHA256: hex.EncodeToString(sum[:])}
}
