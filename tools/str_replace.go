package tools

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

func strReplaceTool() Tool {
	t := newTool("str_replace", strReplaceArgs{}, strReplace,
		mcp.WithDescription("Replace text in a file. old_str must occur exactly once unless replace_all; "+
			"include enough surrounding lines to make it unique. In a file that is not UTF-8 text the bytes outside the match are kept exactly. The file keeps its line endings (an old_str "+
			"written with LF matches a CRLF file; the lines of new_str take the file's line ending), BOM, final newline and mode. The write is atomic."),
		destructive("Edit file", false),
		withIcon("pencil"),
		mcp.WithOutputSchema[replaceFacts](),
	)
	t.ChangesFiles = true
	return t
}

type strReplaceArgs struct {
	Path           string `json:"path" arg:"required" jsonschema_description:"File to edit; relative paths are under /mnt/user-data/workspace."`
	OldStr         string `json:"old_str" arg:"required" jsonschema_description:"Exact text to find."`
	NewStr         string `json:"new_str" arg:"required" jsonschema_description:"Text to put in its place (may be empty)."`
	ReplaceAll     bool   `json:"replace_all" jsonschema_description:"Replace every occurrence (default false)."`
	ExpectedSHA256 string `json:"expected_sha256" jsonschema_description:"Refuse the edit unless the file's sha256 is this (from read_file): no lost update."`
	DryRun         bool   `json:"dry_run" jsonschema_description:"Return the unified diff of the edit without writing it (default false)."`
}

// errDryRun stops an edit after the new content is computed.
var errDryRun = errors.New("dry run")

func strReplace(ctx context.Context, env *Env, a strReplaceArgs) *Result {
	oldStr, newStr := a.OldStr, a.NewStr
	if oldStr == "" {
		return failf("old_str is empty")
	}
	name, err := sandbox.Clean(a.Path)
	if err != nil {
		return fail(err)
	}
	all, dryRun, expected := a.ReplaceAll, a.DryRun, a.ExpectedSHA256
	var n int
	var diff string
	var facts replaceFacts
	err = env.Sandbox.FS().Edit(ctx, name, func(old []byte, exists bool) ([]byte, error) {
		if !exists {
			return nil, &sandbox.PathError{Path: name, Err: sandbox.ErrNotFound}
		}
		if err := checkExpected(name, expected, old, exists); err != nil {
			return nil, err
		}
		var updated string
		var err error
		updated, n, err = replace(string(old), oldStr, newStr, all, name)
		if err != nil {
			return nil, err
		}
		if dryRun {
			facts = replaceFacts{EditedFile: editedFile(name, old), DryRun: true}
			diff = unifiedDiff(name, string(old), updated)
			if !utf8.Valid(old) {
				diff = validText([]byte(diff)) + "[not UTF-8 text: bytes that are not UTF-8 are shown as \uFFFD here; the edit keeps them as they are]\n"
			}
			return nil, errDryRun
		}
		facts = replaceFacts{EditedFile: editedFile(name, []byte(updated))}
		return []byte(updated), nil
	})
	facts.Replacements = n
	switch {
	case errors.Is(err, errDryRun):
		if diff == "" {
			diff = "(no change)"
		}
		return structured(fmt.Sprintf("Dry run: would replace %d occurrence(s) in %s\n%s", n, name, strings.TrimSuffix(diff, "\n")), false, facts)
	case err != nil:
		return fail(err)
	}
	r := structured(fmt.Sprintf("Replaced %d occurrence(s) in %s", n, name), false, facts)
	r.Changed = []string{name}
	return r
}

// replace replaces oldStr in content the way an editor would: exactly when
// it occurs, else with LF line breaks read as the file's CRLF ones. The
// lines of newStr take the file's own line ending (SPEC §13), and a BOM
// stays first. When nothing matches, the error names the nearest line that
// differs only in whitespace.
func replace(content, oldStr, newStr string, all bool, name string) (string, int, error) {
	bom := ""
	if strings.HasPrefix(content, "\uFEFF") {
		bom, content = "\uFEFF", content[len("\uFEFF"):]
	}
	switch lineEnding(content) {
	case "\r\n":
		newStr = strings.ReplaceAll(strings.ReplaceAll(newStr, "\r\n", "\n"), "\n", "\r\n")
	case "\n":
		newStr = strings.ReplaceAll(newStr, "\r\n", "\n")
	}
	n := strings.Count(content, oldStr)
	if n == 0 && strings.Contains(content, "\r\n") && strings.Contains(oldStr, "\n") && !strings.Contains(oldStr, "\r\n") {
		crlf := strings.ReplaceAll(oldStr, "\n", "\r\n")
		if c := strings.Count(content, crlf); c > 0 {
			oldStr, n = crlf, c
		}
	}
	if n > 0 {
		oldStr, newStr = wholeLineEndings(content, oldStr, newStr, n)
	}
	switch {
	case n == 0:
		if line := nearMiss(content, oldStr); line > 0 {
			return "", 0, fmt.Errorf("old_str not found in %s; line %d differs from it only in whitespace or indentation", name, line)
		}
		return "", 0, fmt.Errorf("old_str not found in %s", name)
	case n > 1 && !all:
		return "", 0, fmt.Errorf("old_str found %d times in %s; add surrounding context to make it unique, or set replace_all", n, name)
	}
	return bom + strings.ReplaceAll(content, oldStr, newStr), n, nil
}

// wholeLineEndings widens a match that would split a CRLF line ending
// (old_str copied up to the \r, or from the \n) to the whole ending, where
// every one of the n matches would: the edit then never leaves a lone LF or
// CR in the file. The widened new_str ends (or starts) with the CRLF the
// agent cut through, once, whether or not it repeated the \r.
func wholeLineEndings(content, oldStr, newStr string, n int) (string, string) {
	if strings.HasSuffix(oldStr, "\r") && strings.Count(content, oldStr+"\n") == n {
		oldStr += "\n"
		newStr = strings.TrimSuffix(newStr, "\r") + "\r\n"
	}
	if strings.HasPrefix(oldStr, "\n") && strings.Count(content, "\r"+oldStr) == n {
		oldStr = "\r" + oldStr
		if !strings.HasPrefix(newStr, "\r") && strings.HasPrefix(newStr, "\n") {
			newStr = "\r" + newStr
		}
	}
	return oldStr, newStr
}

// lineEnding is the file's own line ending: "\r\n" when most of its line
// breaks are CRLF, "\n" when most are LF, "" when it has none (new text is
// then written as given).
func lineEnding(content string) string {
	lf := strings.Count(content, "\n")
	crlf := strings.Count(content, "\r\n")
	switch {
	case lf == 0:
		return ""
	case crlf > lf-crlf:
		return "\r\n"
	}
	return "\n"
}

// nearMiss returns the 1-based line where a run of lines equals oldStr's
// lines once whitespace is folded, or 0.
func nearMiss(content, oldStr string) int {
	want := splitLines(oldStr)
	for len(want) > 0 && fold(want[len(want)-1]) == "" {
		want = want[:len(want)-1]
	}
	if len(want) == 0 {
		return 0
	}
	lines := splitLines(content)
	for i := 0; i+len(want) <= len(lines); i++ {
		ok := true
		for j, w := range want {
			if fold(lines[i+j]) != fold(w) {
				ok = false
				break
			}
		}
		if ok {
			return i + 1
		}
	}
	return 0
}

func splitLines(s string) []string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimSuffix(l, "\r")
	}
	return lines
}

// fold collapses runs of white space and trims it.
func fold(s string) string { return strings.Join(strings.Fields(s), " ") }

// replaceFacts is str_replace's structured content.
type replaceFacts struct {
	EditedFile
	Replacements int  `json:"replacements" jsonschema_description:"Occurrences replaced (a dry run: that would be)."`
	DryRun       bool `json:"dry_run,omitempty" jsonschema_description:"dry_run: nothing was written; sha256 is the file's as it is."`
}
