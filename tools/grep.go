package tools

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"path"
	"regexp"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

const (
	grepDefaultMax = 100
	grepMaxContext = 20
	// grepLineMax is where a long matching line is cut.
	grepLineMax = 500
	// sniffLen is how much of a file decides whether it is binary.
	sniffLen = 8000
)

func grepTool() Tool {
	return Tool{
		Def: mcp.NewTool("grep",
			mcp.WithDescription("Search file contents with a regular expression (RE2 syntax), case-insensitive unless "+
				"case_sensitive. One match a line: path:line: text (context lines: path-line- text, groups "+
				"separated by --). Binary files, large files and .git are skipped. A cut result is saved whole "+
				"under /mnt/user-data/outputs/.tool-results/ and the note names the file."),
			mcp.WithString("pattern", mcp.Required(), mcp.Description("RE2 regular expression, or a plain string with literal.")),
			mcp.WithString("path", mcp.Description("File or directory to search (default /mnt/user-data/workspace).")),
			mcp.WithString("glob", mcp.Description(`Only search files matching this glob, e.g. "*.go" (base name) or "src/**/*.ts" (relative path).`)),
			mcp.WithBoolean("literal", mcp.Description("Treat pattern as a plain string (default false).")),
			mcp.WithBoolean("case_sensitive", mcp.Description("Match case (default false).")),
			mcp.WithNumber("max_results", mcp.Description("Most results to list: matches, or files with output_mode files/count (default 100).")),
			mcp.WithNumber("context", mcp.Description("Lines of context before and after each match (default 0, max 20).")),
			mcp.WithString("output_mode", mcp.Enum("content", "files", "count"), mcp.Description("content: matching lines (default); files: paths of matching files; count: path:matches per file.")),
			mcp.WithNumber("offset", mcp.Description("Skip this many results first, to page through a long result (default 0).")),
			readOnly("Search file contents"),
		),
		Handle: grep,
	}
}

func grep(ctx context.Context, env *Env, req mcp.CallToolRequest) *Result {
	pattern, err := requiredString(req, "pattern")
	if err != nil {
		return fail(err)
	}
	if pattern == "" {
		return failf("pattern is empty")
	}
	base, err := pathArg(req, "path")
	if err != nil {
		return fail(err)
	}
	expr := pattern
	if req.GetBool("literal", false) {
		expr = regexp.QuoteMeta(pattern)
	}
	if !req.GetBool("case_sensitive", false) {
		expr = "(?i)" + expr
	}
	re, err := regexp.Compile(expr)
	if err != nil {
		return failf("invalid regular expression: %s", strings.TrimPrefix(err.Error(), "error parsing regexp: "))
	}
	// A whole file that does not match in multi-line mode has no matching
	// line: one pass over it skips most files.
	fileRe := regexp.MustCompile("(?m)" + expr)
	filter := req.GetString("glob", "")
	maxResults := req.GetInt("max_results", grepDefaultMax)
	if maxResults <= 0 {
		maxResults = grepDefaultMax
	}
	offset := max(req.GetInt("offset", 0), 0)
	contextLines := min(max(req.GetInt("context", 0), 0), grepMaxContext)
	mode := req.GetString("output_mode", "content")
	if mode != "content" && mode != "files" && mode != "count" {
		return failf("output_mode %q: want content, files or count", mode)
	}

	fsys := env.Sandbox.FS()
	fi, err := fsys.Stat(ctx, base)
	if err != nil {
		return fail(err)
	}
	var out strings.Builder
	saved := newSpill(ctx, fsys, "grep", 1<<20)
	results, shown := 0, 0 // results seen so far; results in out
	search := func(vp string) error {
		lines, matches := grepFile(ctx, fsys, vp, re, fileRe, env.Limits.GrepMaxFileBytes)
		if len(matches) == 0 {
			return nil
		}
		// The records of this file: matches (content) or the file itself.
		n := len(matches)
		if mode != "content" {
			n = 1
		}
		first, last := max(offset-results, 0), min(offset+maxResults-results, n) // shown: [first, last)
		results += n
		if first < last {
			out.WriteString(renderGrep(mode, vp, lines, matches, contextLines, first, last, shown > 0))
			shown += last - first
		}
		io.WriteString(saved, renderGrep(mode, vp, lines, matches, contextLines, 0, n, results > n))
		if results > offset+maxResults && saved.Full() {
			return errStop // more than we show, and the saved copy is full: stop
		}
		return nil
	}
	if fi.IsDir() {
		err = walk(ctx, fsys, base, true, func(vp, rel string, d fs.DirEntry) error {
			if d.IsDir() || (filter != "" && !matchName(filter, rel)) {
				return nil
			}
			return search(vp)
		})
	} else if filter == "" || matchName(filter, path.Base(base)) {
		err = search(base)
	}
	if err != nil && err != errStop {
		saved.Finish(false)
		return fail(err)
	}
	truncated := results > offset+shown
	savedAt := saved.Finish(truncated)
	if shown == 0 {
		if results == 0 {
			return text(fmt.Sprintf("No matches for %q under %s", pattern, base))
		}
		return text(fmt.Sprintf("No more results for %q under %s: %d in all, offset %d", pattern, base, results, offset))
	}
	s := strings.TrimSuffix(out.String(), "\n")
	if truncated {
		what := map[string]string{"content": "matches", "files": "files", "count": "files"}[mode]
		if offset == 0 {
			s += fmt.Sprintf("\n[truncated: showing the first %d %s; narrow the pattern or path, or raise max_results", maxResults, what)
		} else {
			s += fmt.Sprintf("\n[truncated: showing %d %s from offset %d", shown, what, offset)
		}
		s += fmt.Sprintf("; next page: offset %d", offset+shown)
		if savedAt != "" {
			s += "; every result is in " + savedAt
		}
		s += "]"
	}
	r := text(s)
	r.Truncated = truncated
	return r
}

// renderGrep writes the records [first, last) of one file. content: the
// matching lines ("path:n: text") with their context ("path-n- text"),
// groups apart separated by "--"; files: the path; count: "path:matches".
func renderGrep(mode, vp string, lines [][]byte, matches []int, ctxLines, first, last int, after bool) string {
	var b strings.Builder
	switch mode {
	case "files":
		return vp + "\n"
	case "count":
		return fmt.Sprintf("%s:%d\n", vp, len(matches))
	}
	isMatch := map[int]bool{}
	for _, m := range matches[first:last] {
		isMatch[m] = true
	}
	prevEnd := -1
	for _, m := range matches[first:last] {
		from, to := max(m-ctxLines, 0), min(m+ctxLines, len(lines)-1)
		if ctxLines > 0 && (prevEnd >= 0 || after) && from > prevEnd+1 {
			b.WriteString("--\n")
		}
		for i := max(from, prevEnd+1); i <= to; i++ {
			sep := "-"
			if isMatch[i] {
				sep = ":"
			}
			s := validText(bytes.TrimSuffix(lines[i], []byte("\r")))
			if cut, ok := cutHead(s, grepLineMax); ok {
				s = cut + " [...]"
			}
			fmt.Fprintf(&b, "%s%s%d%s %s\n", vp, sep, i+1, sep, s)
		}
		prevEnd = max(prevEnd, to)
	}
	return b.String()
}

// grepFile returns the lines of one file and the 0-based indexes of the
// matching ones. Files it cannot read, binary files and files over
// maxBytes give nothing.
func grepFile(ctx context.Context, fsys sandbox.FS, vp string, re, fileRe *regexp.Regexp, maxBytes int64) ([][]byte, []int) {
	f, err := fsys.Open(ctx, vp)
	if err != nil {
		return nil, nil
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() || (maxBytes > 0 && fi.Size() > maxBytes) {
		return nil, nil
	}
	data, err := io.ReadAll(f)
	if err != nil || bytes.IndexByte(data[:min(len(data), sniffLen)], 0) >= 0 || !fileRe.Match(data) {
		return nil, nil
	}
	lines := bytes.SplitAfter(data, []byte("\n"))
	if len(lines[len(lines)-1]) == 0 {
		lines = lines[:len(lines)-1]
	}
	var matches []int
	for i, l := range lines {
		lines[i] = bytes.TrimSuffix(l, []byte("\n"))
		if re.Match(lines[i]) {
			matches = append(matches, i)
		}
	}
	return lines, matches
}
