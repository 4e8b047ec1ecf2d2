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
	// grepLineMax is where a long matching line is cut.
	grepLineMax = 500
	// sniffLen is how much of a file decides whether it is binary.
	sniffLen = 8000
)

func grepTool() Tool {
	return Tool{
		Def: mcp.NewTool("grep",
			mcp.WithDescription("Search file contents with a regular expression (RE2 syntax), case-insensitive unless "+
				"case_sensitive. One match a line: path:line: text. Binary files, large files and .git are skipped."),
			mcp.WithString("pattern", mcp.Required(), mcp.Description("RE2 regular expression, or a plain string with literal.")),
			mcp.WithString("path", mcp.Description("File or directory to search (default /mnt/user-data/workspace).")),
			mcp.WithString("glob", mcp.Description(`Only search files matching this glob, e.g. "*.go" (base name) or "src/**/*.ts" (relative path).`)),
			mcp.WithBoolean("literal", mcp.Description("Treat pattern as a plain string (default false).")),
			mcp.WithBoolean("case_sensitive", mcp.Description("Match case (default false).")),
			mcp.WithNumber("max_results", mcp.Description("Most matches to list (default 100).")),
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

	fsys := env.Sandbox.FS()
	fi, err := fsys.Stat(ctx, base)
	if err != nil {
		return fail(err)
	}
	var b strings.Builder
	matches := 0
	truncated := false
	search := func(vp string) error {
		for _, m := range grepFile(ctx, fsys, vp, re, fileRe, env.Limits.GrepMaxFileBytes) {
			if matches == maxResults {
				truncated = true
				return errStop
			}
			matches++
			b.WriteString(m)
			b.WriteByte('\n')
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
		return fail(err)
	}
	if matches == 0 {
		return text(fmt.Sprintf("No matches for %q under %s", pattern, base))
	}
	out := strings.TrimSuffix(b.String(), "\n")
	if truncated {
		out += fmt.Sprintf("\n[truncated: showing the first %d matches; narrow the pattern or path, or raise max_results]", maxResults)
	}
	r := text(out)
	r.Truncated = truncated
	return r
}

// grepFile returns the matching lines of one file as "path:line: text".
// Files it cannot read, binary files and files over maxBytes give nothing.
func grepFile(ctx context.Context, fsys sandbox.FS, vp string, re, fileRe *regexp.Regexp, maxBytes int64) []string {
	f, err := fsys.Open(ctx, vp)
	if err != nil {
		return nil
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() || (maxBytes > 0 && fi.Size() > maxBytes) {
		return nil
	}
	data, err := io.ReadAll(f)
	if err != nil || bytes.IndexByte(data[:min(len(data), sniffLen)], 0) >= 0 {
		return nil
	}
	if !fileRe.Match(data) {
		return nil
	}
	var out []string
	for n := 1; len(data) > 0; n++ {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			data = nil
		}
		if re.Match(line) {
			s := validText(bytes.TrimSuffix(line, []byte("\r")))
			if cut, ok := cutHead(s, grepLineMax); ok {
				s = cut + " [...]"
			}
			out = append(out, fmt.Sprintf("%s:%d: %s", vp, n, s))
		}
	}
	return out
}
