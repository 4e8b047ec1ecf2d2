package tools

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/search"
)

const (
	grepDefaultMax = 100
	// grepLineMax is where a long matching line is cut.
	grepLineMax = 500
	// sniffLen is how much of a file decides whether it is binary: read_file
	// calls binary what grep passes over.
	sniffLen = search.SniffLen
)

func grepTool() Tool {
	return newTool("grep", grepArgs{MaxResults: grepDefaultMax, OutputMode: "content"}, grep,
		mcp.WithDescription("Search file contents with a regular expression (RE2 syntax), case-insensitive unless "+
			"case_sensitive. One match a line: path:line: text (context lines: path-line- text, groups "+
			"separated by --). Binary files, large files and .git are skipped; lines that are not UTF-8 show invalid bytes as \uFFFD, with a note. A cut result is saved whole "+
			"under /mnt/user-data/outputs/.tool-results/ and the note names the file."),
		readOnly("Search file contents"),
		withIcon("search"),
		mcp.WithOutputSchema[grepFacts](),
	)
}

type grepArgs struct {
	Pattern       string `json:"pattern" arg:"required" jsonschema_description:"RE2 regular expression, or a plain string with literal."`
	Path          string `json:"path" jsonschema_description:"File or directory to search (default /mnt/user-data/workspace)."`
	Glob          string `json:"glob" jsonschema_description:"Only search files matching this glob, e.g. \"*.go\" (base name) or \"src/**/*.ts\" (relative path)."`
	Literal       bool   `json:"literal" jsonschema_description:"Treat pattern as a plain string (default false)."`
	CaseSensitive bool   `json:"case_sensitive" jsonschema_description:"Match case (default false)."`
	MaxResults    int    `json:"max_results" arg:"minimum=1" jsonschema_description:"Most results to list: matches, or files with output_mode files/count (default 100)."`
	Context       int    `json:"context" arg:"minimum=0" jsonschema_description:"Lines of context before and after each match (default 0, max 20: more is taken as 20)."`
	OutputMode    string `json:"output_mode" jsonschema:"enum=content,enum=files,enum=count" jsonschema_description:"content: matching lines (default); files: paths of matching files; count: path:matches per file."`
	Offset        int    `json:"offset" arg:"minimum=0" jsonschema_description:"Skip this many results first, to page through a long result (default 0)."`
}

func grep(ctx context.Context, env *Env, a grepArgs) *Result {
	pattern := a.Pattern
	if pattern == "" {
		return failf("pattern is empty")
	}
	base, err := sandbox.Clean(a.Path)
	if err != nil {
		return fail(err)
	}
	expr := pattern
	if a.Literal {
		expr = regexp.QuoteMeta(pattern)
	}
	if _, err := regexp.Compile(expr); err != nil {
		// The error quotes the agent's own pattern, not the flags added below.
		return failf("invalid regular expression: %s", strings.TrimPrefix(err.Error(), "error parsing regexp: "))
	}
	if !a.CaseSensitive {
		expr = "(?i)" + expr
	}
	sreq := search.GrepRequest{Root: base, Pattern: expr, Glob: a.Glob, Mode: a.OutputMode,
		Context: min(a.Context, search.MaxContext), MaxFileBytes: env.Limits.GrepMaxFileBytes}
	if err := sreq.Validate(); err != nil {
		return fail(err)
	}
	maxResults, offset, mode := a.MaxResults, a.Offset, a.OutputMode
	if err := checkPage(maxResults, offset); err != nil {
		return fail(err)
	}

	var out strings.Builder
	saved := newSpill(ctx, env.Sandbox.FS(), "grep", 1<<20)
	results, shown := 0, 0 // results seen so far; results in out
	matches, files, stopped := 0, 0, false
	var notUTF8 []string // files shown with lines that are not UTF-8
	// found takes the results of one file, in walk order.
	found := func(fm search.FileMatch) error {
		// The records of this file: matches (content) or the file itself.
		n := len(fm.Matches)
		matches, files = matches+n, files+1
		if mode != search.ModeContent {
			n = 1
		}
		first, last := max(offset-results, 0), min(offset+maxResults-results, n) // shown: [first, last)
		results += n
		if first < last {
			s, valid := renderGrep(mode, fm, sreq.Context, first, last, shown > 0, env.Mask)
			out.WriteString(s)
			shown += last - first
			if !valid {
				notUTF8 = append(notUTF8, fm.Path)
			}
		}
		s, _ := renderGrep(mode, fm, sreq.Context, 0, n, results > n, env.Mask)
		io.WriteString(saved, s)
		if results > offset+maxResults && saved.Full() {
			stopped = true
			return search.ErrStop // more than we show, and the saved copy is full: stop
		}
		return nil
	}
	err = searcherOf(env).Grep(ctx, sreq, found)
	if err != nil {
		saved.Finish(false)
		if ctx.Err() != nil {
			return failf("cancelled: grep stopped")
		}
		return fail(err)
	}
	truncated := results > offset+shown
	savedTo := saved.Finish(truncated)
	facts := &grepFacts{Files: files, Shown: shown, Complete: !stopped, Saved: savedAt(savedTo)}
	if mode != search.ModeFiles {
		facts.Matches = &matches
	}
	if truncated {
		next := offset + shown
		facts.NextOffset = &next
	}
	if shown == 0 {
		if results == 0 {
			return structured(fmt.Sprintf("No matches for %q under %s", pattern, base), false, facts)
		}
		return structured(fmt.Sprintf("No more results for %q under %s: %d in all, offset %d", pattern, base, results, offset), false, facts)
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
		if savedTo != "" {
			s += "; every result is in " + savedTo
		}
		s += "]"
	}
	if len(notUTF8) > 0 {
		s += fmt.Sprintf("\n[not UTF-8 text: the lines shown of %d file(s) (%s", len(notUTF8), notUTF8[0])
		if len(notUTF8) > 1 {
			s += ", ..."
		}
		s += ") have bytes that are not UTF-8, shown as \uFFFD; the files hold them as they are (convert with bash iconv to read them)]"
	}
	return structured(s, truncated, facts)
}

// renderGrep writes the records [first, last) of one file. content: the
// matching lines ("path:n: text") with their context ("path-n- text"),
// groups apart separated by "--"; files: the path; count: "path:matches".
// A line is masked whole before a long one is cut: a host path cut in half
// would not be masked. valid is false when a line shown is not UTF-8 (its
// invalid bytes are shown as U+FFFD).
//
// fm.Lines holds every line of the file within ctxLines of a match, so a
// match's context is the lines of fm.Lines in [m-ctxLines, m+ctxLines]; a
// window running past the file's start or end simply finds none there.
func renderGrep(mode string, fm search.FileMatch, ctxLines, first, last int, after bool, mask func(string) string) (_ string, valid bool) {
	var b strings.Builder
	switch mode {
	case search.ModeFiles:
		return fm.Path + "\n", true
	case search.ModeCount:
		return fmt.Sprintf("%s:%d\n", fm.Path, len(fm.Matches)), true
	}
	valid = true
	shown := fm.Matches[first:last]
	lines := fm.Lines
	next := 0 // the first of shown not yet passed
	prevEnd := 0
	for _, m := range shown {
		from, to := m-ctxLines, m+ctxLines
		if ctxLines > 0 && (prevEnd > 0 || after) && from > prevEnd+1 {
			b.WriteString("--\n")
		}
		for len(lines) > 0 && lines[0].N < max(from, prevEnd+1) {
			lines = lines[1:]
		}
		for ; len(lines) > 0 && lines[0].N <= to; lines = lines[1:] {
			n := lines[0].N
			for next < len(shown) && shown[next] < n {
				next++
			}
			sep := "-"
			if next < len(shown) && shown[next] == n {
				sep = ":"
			}
			line := bytes.TrimSuffix(lines[0].Text, []byte("\r"))
			valid = valid && utf8.Valid(line)
			s := validText(line)
			if mask != nil {
				s = mask(s)
			}
			if cut, ok := cutHead(s, grepLineMax); ok {
				s = cut + " [...]"
			}
			fmt.Fprintf(&b, "%s%s%d%s %s\n", fm.Path, sep, n, sep, s)
		}
		prevEnd = max(prevEnd, to)
	}
	return b.String(), valid
}

// grepFacts is grep's structured content: its counts.
type grepFacts struct {
	Matches    *int `json:"matches,omitempty" jsonschema_description:"Matching lines found; absent in output_mode files, which stops at a file's first match."`
	Files      int  `json:"files" jsonschema_description:"Files with a match."`
	Shown      int  `json:"shown" jsonschema_description:"Records shown (lines, files or counts, by output_mode)."`
	Complete   bool `json:"complete" jsonschema_description:"matches and files count every match; false when the search stopped once the page and the saved copy were full."`
	NextOffset *int `json:"next_offset,omitempty" jsonschema_description:"The offset of the next page, when there is one."`
	Saved
}
