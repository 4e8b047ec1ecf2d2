package tools

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"path"
	"regexp"
	"regexp/syntax"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unicode"
	"unicode/utf8"

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
				"separated by --). Binary files, large files and .git are skipped; lines that are not UTF-8 show invalid bytes as \uFFFD, with a note. A cut result is saved whole "+
				"under /mnt/user-data/outputs/.tool-results/ and the note names the file."),
			mcp.WithString("pattern", mcp.Required(), mcp.Description("RE2 regular expression, or a plain string with literal.")),
			mcp.WithString("path", mcp.Description("File or directory to search (default /mnt/user-data/workspace).")),
			mcp.WithString("glob", mcp.Description(`Only search files matching this glob, e.g. "*.go" (base name) or "src/**/*.ts" (relative path).`)),
			mcp.WithBoolean("literal", mcp.Description("Treat pattern as a plain string (default false).")),
			mcp.WithBoolean("case_sensitive", mcp.Description("Match case (default false).")),
			mcp.WithInteger("max_results", mcp.Min(1), mcp.Description("Most results to list: matches, or files with output_mode files/count (default 100).")),
			mcp.WithInteger("context", mcp.Min(0), mcp.Description("Lines of context before and after each match (default 0, max 20: more is taken as 20).")),
			mcp.WithString("output_mode", mcp.Enum("content", "files", "count"), mcp.Description("content: matching lines (default); files: paths of matching files; count: path:matches per file.")),
			mcp.WithInteger("offset", mcp.Min(0), mcp.Description("Skip this many results first, to page through a long result (default 0).")),
			readOnly("Search file contents"),
		),
		Args:   grepArgs{},
		Handle: grep,
	}
}

type grepArgs struct {
	Pattern       string `json:"pattern" arg:"required"`
	Path          string `json:"path"`
	Glob          string `json:"glob"`
	Literal       bool   `json:"literal"`
	CaseSensitive bool   `json:"case_sensitive"`
	MaxResults    int    `json:"max_results" arg:"min=1"`
	Context       int    `json:"context" arg:"min=0"`
	OutputMode    string `json:"output_mode"`
	Offset        int    `json:"offset" arg:"min=0"`
}

func grep(ctx context.Context, env *Env, req mcp.CallToolRequest) *Result {
	a := grepArgs{MaxResults: grepDefaultMax, OutputMode: "content"}
	if err := bindArgs("grep", req, &a); err != nil {
		return fail(err)
	}
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
	if !a.CaseSensitive {
		expr = "(?i)" + expr
	}
	m, err := newGrepMatcher(expr)
	if err != nil {
		return failf("invalid regular expression: %s", strings.TrimPrefix(err.Error(), "error parsing regexp: "))
	}
	var filter *globPattern
	if f := a.Glob; f != "" {
		if filter, err = compileFilter("glob", f); err != nil {
			return fail(err)
		}
	}
	maxResults, offset, mode := a.MaxResults, a.Offset, a.OutputMode
	contextLines := min(a.Context, grepMaxContext)
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
	var notUTF8 []string   // files shown with lines that are not UTF-8
	// found takes the results of one file, in walk order.
	found := func(vp string, lines [][]byte, matches []int) error {
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
			s, valid := renderGrep(mode, vp, lines, matches, contextLines, first, last, shown > 0, env.Mask)
			out.WriteString(s)
			shown += last - first
			if !valid {
				notUTF8 = append(notUTF8, vp)
			}
		}
		s, _ := renderGrep(mode, vp, lines, matches, contextLines, 0, n, results > n, env.Mask)
		io.WriteString(saved, s)
		if results > offset+maxResults && saved.Full() {
			return errStop // more than we show, and the saved copy is full: stop
		}
		return nil
	}
	g := grepper{fsys: fsys, m: m, mode: mode, maxBytes: env.Limits.GrepMaxFileBytes}
	if fi.IsDir() {
		files := newGrepPool(ctx, g, found)
		err = walk(ctx, fsys, base, true, func(vp, rel string, d fs.DirEntry) error {
			if d.IsDir() {
				return nil
			}
			if filter != nil {
				if ok, err := filter.match(ctx, rel); !ok {
					return err
				}
			}
			return files.add(vp)
		})
		if err == nil {
			err = files.flush()
		}
		files.close()
		if err == nil {
			err = ctx.Err() // the workers skip what is left when cancelled
		}
	} else if ok, ferr := filterBase(ctx, filter, base); !ok {
		err = ferr
	} else {
		var buf []byte
		lines, matches := g.file(ctx, base, &buf)
		err = found(base, lines, matches)
	}
	if err != nil && err != errStop {
		saved.Finish(false)
		if ctx.Err() != nil {
			return failf("cancelled: grep stopped")
		}
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
	if len(notUTF8) > 0 {
		s += fmt.Sprintf("\n[not UTF-8 text: the lines shown of %d file(s) (%s", len(notUTF8), notUTF8[0])
		if len(notUTF8) > 1 {
			s += ", ..."
		}
		s += ") have bytes that are not UTF-8, shown as \uFFFD; the files hold them as they are (convert with bash iconv to read them)]"
	}
	r := text(s)
	r.Truncated = truncated
	return r
}

// filterBase reports whether a single file given as grep's path passes the
// filter, matched against its base name.
func filterBase(ctx context.Context, filter *globPattern, name string) (bool, error) {
	if filter == nil {
		return true, nil
	}
	return filter.match(ctx, path.Base(name))
}

// renderGrep writes the records [first, last) of one file. content: the
// matching lines ("path:n: text") with their context ("path-n- text"),
// groups apart separated by "--"; files: the path; count: "path:matches".
// A line is masked whole before a long one is cut: a host path cut in half
// would not be masked. valid is false when a line shown is not UTF-8 (its
// invalid bytes are shown as U+FFFD).
func renderGrep(mode, vp string, lines [][]byte, matches []int, ctxLines, first, last int, after bool, mask func(string) string) (_ string, valid bool) {
	var b strings.Builder
	switch mode {
	case "files":
		return vp + "\n", true
	case "count":
		return fmt.Sprintf("%s:%d\n", vp, len(matches)), true
	}
	valid = true
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
			line := bytes.TrimSuffix(lines[i], []byte("\r"))
			valid = valid && utf8.Valid(line)
			s := validText(line)
			if mask != nil {
				s = mask(s)
			}
			if cut, ok := cutHead(s, grepLineMax); ok {
				s = cut + " [...]"
			}
			fmt.Fprintf(&b, "%s%s%d%s %s\n", vp, sep, i+1, sep, s)
		}
		prevEnd = max(prevEnd, to)
	}
	return b.String(), valid
}

// grepper searches one file at a time.
type grepper struct {
	fsys     sandbox.FS
	m        *grepMatcher
	mode     string // content, files or count
	maxBytes int64
}

// file returns the lines of one file (content mode only) and the 0-based
// indexes of the matching ones (files mode: the first only). Files it cannot
// read, binary files and files over maxBytes give nothing. buf is a read
// buffer reused from file to file; file takes it (sets it to nil) when the
// lines it returns point into it.
func (g grepper) file(ctx context.Context, vp string, buf *[]byte) ([][]byte, []int) {
	f, err := g.fsys.Open(ctx, vp)
	if err != nil {
		return nil, nil
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() || (g.maxBytes > 0 && fi.Size() > g.maxBytes) {
		return nil, nil
	}
	data, ok := readText(f, fi.Size(), g.maxBytes, buf)
	if !ok {
		return nil, nil
	}
	matches := g.m.lines(data, g.mode == "files")
	if len(matches) == 0 || g.mode != "content" {
		return nil, matches
	}
	*buf = nil // the lines point into data
	return grepLines(data), matches
}

// sniffFirst is the size from which a file is sniffed for binary content
// before the rest of it is read.
const sniffFirst = 64 << 10

// readText reads a file of the given size into *buf (grown when too small)
// and returns its content, or false for a binary file (a NUL in its first
// sniffLen bytes) or a read error. The size is the one Stat gave: a file
// that grows meanwhile is read as it was (one read less per file); a file
// that says 0 (procfs) is read to its end, up to maxBytes (0: no limit).
func readText(r io.Reader, size, maxBytes int64, buf *[]byte) ([]byte, bool) {
	var data []byte
	if size <= 0 {
		if maxBytes > 0 {
			r = io.LimitReader(r, maxBytes+1)
		}
		d, err := io.ReadAll(r)
		if err != nil || (maxBytes > 0 && int64(len(d)) > maxBytes) {
			return nil, false
		}
		data = d
	} else {
		if int64(cap(*buf)) < size {
			*buf = make([]byte, 0, max(size, 64<<10))
		}
		b := (*buf)[:size]
		n := 0
		if size > sniffFirst {
			k, err := io.ReadFull(r, b[:sniffLen])
			n = k
			if err != nil { // the file shrank, or a read error
				if err != io.ErrUnexpectedEOF && err != io.EOF {
					return nil, false
				}
				b = b[:n]
			}
			if bytes.IndexByte(b[:n], 0) >= 0 {
				return nil, false
			}
		}
		if n < len(b) {
			k, err := io.ReadFull(r, b[n:])
			n += k
			if err != nil && err != io.ErrUnexpectedEOF && err != io.EOF {
				return nil, false
			}
		}
		data = b[:n]
	}
	if bytes.IndexByte(data[:min(len(data), sniffLen)], 0) >= 0 {
		return nil, false
	}
	return data, true
}

// grepLines splits a file into its lines, without their "\n".
func grepLines(data []byte) [][]byte {
	lines := bytes.SplitAfter(data, []byte("\n"))
	if len(lines[len(lines)-1]) == 0 {
		lines = lines[:len(lines)-1]
	}
	for i, l := range lines {
		lines[i] = bytes.TrimSuffix(l, []byte("\n"))
	}
	return lines
}

// grepPool searches files on GOMAXPROCS goroutines and hands their results
// to found in the order the files were added. At most grepWindow files are
// in flight, so memory stays bounded; found's first error stops the rest.
type grepPool struct {
	ctx   context.Context
	g     grepper
	found func(vp string, lines [][]byte, matches []int) error
	jobs  chan *grepJob
	queue []*grepJob // added, not yet handed to found; oldest first
	err   error      // found's first error
	stop  atomic.Bool
	wg    sync.WaitGroup
}

type grepJob struct {
	vp      string
	lines   [][]byte
	matches []int
	done    chan struct{}
}

// grepWindow is how many files per worker may be in flight.
const grepWindow = 16

func newGrepPool(ctx context.Context, g grepper, found func(vp string, lines [][]byte, matches []int) error) *grepPool {
	n := runtime.GOMAXPROCS(0)
	p := &grepPool{ctx: ctx, g: g, found: found, jobs: make(chan *grepJob, grepWindow*n)}
	for range n {
		p.wg.Go(p.worker)
	}
	return p
}

func (p *grepPool) worker() {
	var buf []byte
	for j := range p.jobs {
		if !p.stop.Load() && p.ctx.Err() == nil {
			j.lines, j.matches = p.g.file(p.ctx, j.vp, &buf)
		}
		close(j.done)
	}
}

// add queues a file, first handing the oldest one's results to found when
// the window is full.
func (p *grepPool) add(vp string) error {
	if p.err == nil && len(p.queue) == cap(p.jobs) {
		p.next()
	}
	if p.err != nil {
		return p.err
	}
	j := &grepJob{vp: vp, done: make(chan struct{})}
	p.queue = append(p.queue, j)
	p.jobs <- j // never blocks: the channel holds at most len(p.queue) jobs
	return nil
}

func (p *grepPool) next() {
	j := p.queue[0]
	p.queue[0] = nil
	p.queue = p.queue[1:]
	<-j.done
	p.err = p.found(j.vp, j.lines, j.matches)
}

// flush hands every queued file's results to found.
func (p *grepPool) flush() error {
	for p.err == nil && len(p.queue) > 0 {
		p.next()
	}
	return p.err
}

// close stops the workers; files still queued are dropped.
func (p *grepPool) close() {
	p.stop.Store(true)
	close(p.jobs)
	p.wg.Wait()
}

// grepMatcher finds the matching lines of a file. A line matches when line
// matches it; the line without its "\n" is the whole text, so ^, $, \A and
// \z are the line's start and end. Rather than run line on every line of a
// file, it looks for candidates in the whole file: occurrences of a literal
// every match contains (with bytes.Index, or a scan for a rare byte of the
// literal in both cases), or else matches of the multi-line form of the
// pattern. Only the lines holding a candidate are run, and not even those
// when the pattern is the literal itself.
type grepMatcher struct {
	line *regexp.Regexp
	// file is line in multi-line mode. A line's match is also a match of
	// file in the rest of the file from the line's start, and the leftmost
	// one; but for \A and \z, which file only matches at the start and the
	// end of the text (everyLine).
	file      *regexp.Regexp
	lit       []byte // every match contains lit; nil when no literal is known
	fold      bool   // lit is ASCII in lower case, matched case-insensitively
	exact     bool   // an occurrence of lit is a match: line need not run
	rare      int    // lit[rare] is what a scan looks for first
	index     bool   // look for lit with bytes.Index instead
	everyLine bool   // no literal, and \A or \z: run line on every line
}

func newGrepMatcher(expr string) (*grepMatcher, error) {
	line, err := regexp.Compile(expr)
	if err != nil {
		return nil, err
	}
	m := &grepMatcher{line: line, file: regexp.MustCompile("(?m)" + expr)}
	syn, err := syntax.Parse("(?m)"+expr, syntax.Perl) // as regexp.Compile parses it
	if err != nil {
		return nil, err
	}
	m.lit, m.fold, m.exact = requiredLiteral(syn)
	if len(m.lit) == 0 {
		m.lit = nil
		m.everyLine = hasTextAnchor(syn)
		return m, nil
	}
	best := -1
	for i, c := range m.lit {
		w := byteWeight(c)
		if m.fold && c >= 'a' && c <= 'z' {
			w += byteWeight(c - 'a' + 'A')
		}
		if best < 0 || w < best {
			best, m.rare = w, i
		}
	}
	// bytes.Index scans for the first byte, and when that finds too many
	// false candidates it switches to comparing the whole literal at every
	// position with SIMD: better than a scan for a rare byte that is not
	// much rarer (measured with BenchmarkFinder).
	m.index = !m.fold && byteWeight(m.lit[0]) <= best+5
	return m, nil
}

// requiredLiteral returns a literal that every match of re contains (lower
// case when fold), and whether an occurrence of it is a match of re. A
// literal under case folding is only used where its letters have ASCII
// case variants only (not k and s: they fold to the Kelvin sign and the
// long s).
func requiredLiteral(re *syntax.Regexp) (lit []byte, fold, exact bool) {
	switch re.Op {
	case syntax.OpLiteral:
		fold = re.Flags&syntax.FoldCase != 0
		lit, whole := literalBytes(re.Rune, fold)
		return lit, fold, whole
	case syntax.OpCapture:
		return requiredLiteral(re.Sub[0])
	case syntax.OpPlus:
		lit, fold, _ = requiredLiteral(re.Sub[0])
		return lit, fold, false
	case syntax.OpRepeat:
		if re.Min >= 1 {
			lit, fold, _ = requiredLiteral(re.Sub[0])
			return lit, fold, false
		}
	case syntax.OpConcat:
		for _, sub := range re.Sub {
			if l, f, _ := requiredLiteral(sub); len(l) > len(lit) {
				lit, fold = l, f
			}
		}
		return lit, fold, false
	}
	return nil, false, false
}

// literalBytes returns the longest run of runes of a literal that a byte
// search finds exactly, and whether that is the whole literal. Left out:
// U+FFFD (it also matches invalid UTF-8), "\n" (no line holds one) and,
// under case folding, whatever is not ASCII or folds to something that is
// not.
func literalBytes(runes []rune, fold bool) ([]byte, bool) {
	var best, cur []byte
	whole := true
	for _, r := range runes {
		ok := r != utf8.RuneError && r != '\n'
		if fold {
			for f := unicode.SimpleFold(r); ok && f != r; f = unicode.SimpleFold(f) {
				ok = f < utf8.RuneSelf
			}
			ok = ok && r < utf8.RuneSelf
		}
		if !ok {
			whole = false
			cur = nil
			continue
		}
		if fold && r >= 'A' && r <= 'Z' {
			r += 'a' - 'A'
		}
		cur = utf8.AppendRune(cur, r)
		if len(cur) > len(best) {
			best = cur
		}
	}
	return best, whole && len(best) > 0
}

// hasTextAnchor reports whether re holds \A or \z.
func hasTextAnchor(re *syntax.Regexp) bool {
	if re.Op == syntax.OpBeginText || re.Op == syntax.OpEndText {
		return true
	}
	return slices.ContainsFunc(re.Sub, hasTextAnchor)
}

// byteFreq lists bytes from the most to the least common in source code
// (counted over the text files of the Go tree); bytes not listed are rarer
// still. A literal is looked for by its rarest byte.
const byteFreq = " et\t0rn\naiso,xclfdu1.p/()A2mg:h\"=b43S6_TEyR8v{}ICO5\\DP97MkLwXVBFN[]-UG*HW;+Y|Q!z&<K'>q%jZ$J`#^?@~"

func byteWeight(c byte) int {
	if i := strings.IndexByte(byteFreq, c); i >= 0 {
		return len(byteFreq) - i
	}
	return 0
}

// lines returns the 0-based indexes of the matching lines of data; with
// firstOnly, the first one only.
func (m *grepMatcher) lines(data []byte, firstOnly bool) []int {
	var matches []int
	if m.everyLine {
		for i, l := range grepLines(data) {
			if m.line.Match(l) {
				matches = append(matches, i)
				if firstOnly {
					break
				}
			}
		}
		return matches
	}
	find := m.finder(data)
	line, counted := 0, 0 // line is the number of "\n" in data[:counted]
	for pos := 0; pos <= len(data); {
		c := find(pos)
		if c < 0 {
			break
		}
		start := pos + bytes.LastIndexByte(data[pos:c], '\n') + 1
		if start == len(data) {
			break // after the last line
		}
		end := len(data)
		if i := bytes.IndexByte(data[c:], '\n'); i >= 0 {
			end = c + i
		}
		if m.exact || m.line.Match(data[start:end]) {
			line += bytes.Count(data[counted:start], []byte{'\n'})
			counted = start
			matches = append(matches, line)
			if firstOnly {
				break
			}
		}
		pos = end + 1
	}
	return matches
}

// finder returns a function giving the first candidate at or after pos in
// data, or -1.
func (m *grepMatcher) finder(data []byte) func(pos int) int {
	if m.lit == nil {
		return func(pos int) int {
			loc := m.file.FindIndex(data[pos:])
			if loc == nil {
				return -1
			}
			return pos + loc[0]
		}
	}
	if m.index {
		return func(pos int) int {
			i := bytes.Index(data[pos:], m.lit)
			if i < 0 {
				return -1
			}
			return pos + i
		}
	}
	f := &litFinder{s: data, lit: m.lit, fold: m.fold, k: m.rare, lo: m.lit[m.rare], next: [2]int{-1, -1}}
	f.up = f.lo
	if f.fold && f.lo >= 'a' && f.lo <= 'z' {
		f.up = f.lo - 'a' + 'A'
	}
	return f.index
}

// litFinder finds a literal by its rare byte: it scans for the byte (under
// case folding, for both its cases) with bytes.IndexByte and compares the
// literal around each. bytes.Index looks for the first byte instead, which
// in text is often a common one ("e" of "errors.New"). It remembers where
// it found each case next, so no byte is scanned twice for the same case.
type litFinder struct {
	s      []byte
	lit    []byte // in lower case when fold
	fold   bool   // lit is ASCII, matched ignoring case
	k      int    // lit[k] is the rare byte
	lo, up byte   // its cases (the same byte when it has none)
	next   [2]int
}

func (f *litFinder) index(from int) int {
	s, k := f.s, f.k
	last := len(s) - len(f.lit) + k // where the rare byte of the last possible occurrence is
	lo, up := f.next[0], f.next[1]
	defer func() { f.next[0], f.next[1] = lo, up }()
	for i := from + k; i <= last; {
		// lo (up) is the first f.lo (f.up) at or after some earlier i: when
		// it is not behind this i, it is still the first from here.
		if lo < i {
			lo = nextByte(s, i, f.lo)
		}
		c := lo
		if f.up != f.lo {
			if up < i {
				up = nextByte(s, i, f.up)
			}
			c = min(c, up)
		}
		if c > last {
			return -1
		}
		start := c - k
		if w := s[start : start+len(f.lit)]; f.fold && equalFoldASCII(w, f.lit) || !f.fold && bytes.Equal(w, f.lit) {
			return start
		}
		i = c + 1
	}
	return -1
}

// nextByte returns the index of the first b in s at or after i, or len(s).
func nextByte(s []byte, i int, b byte) int {
	if p := bytes.IndexByte(s[i:], b); p >= 0 {
		return i + p
	}
	return len(s)
}

// equalFoldASCII compares s with lit (lower case) ignoring ASCII case.
func equalFoldASCII(s, lit []byte) bool {
	for i, c := range s {
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lit[i] {
			return false
		}
	}
	return true
}
