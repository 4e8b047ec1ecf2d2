package search

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// What grep reports of each file with matches (GrepRequest.Mode): the
// values of the grep tool's output_mode.
const (
	// ModeContent: the matching lines and their context (FileMatch.Lines).
	ModeContent = "content"
	// ModeFiles: the file only; its search ends at its first match.
	ModeFiles = "files"
	// ModeCount: every matching line's number, no text.
	ModeCount = "count"
)

// MaxContext is the most context lines before and after a match.
const MaxContext = 20

// SniffLen is how much of a file decides whether it is binary: a NUL byte
// in its first SniffLen bytes.
const SniffLen = 8000

// GrepRequest is one grep search.
type GrepRequest struct {
	// Root is a file or a directory: a clean absolute virtual path.
	Root string `json:"root"`
	// Pattern is the RE2 expression with the tool's options already in it
	// (a literal quoted, "(?i)" for case-insensitive). A line matches when
	// it holds a match; ^ and $ are the line's start and end.
	Pattern string `json:"pattern"`
	// Glob, when set, is the file filter of the grep tool's glob: an
	// alternative with a slash matches the path relative to Root, one
	// without only the base name. A single file as Root is filtered by its
	// base name.
	Glob string `json:"glob,omitempty"`
	// Mode is ModeContent, ModeFiles or ModeCount.
	Mode string `json:"output_mode"`
	// Context is how many lines before and after each match FileMatch.Lines
	// holds (ModeContent only), 0 to MaxContext.
	Context int `json:"context,omitempty"`
	// MaxFileBytes skips files larger than this; 0: no limit.
	MaxFileBytes int64 `json:"max_file_bytes,omitempty"`
}

// FileMatch is what grep found in one file. It holds the lines a renderer
// needs, not the whole file: a remote search sends only these.
type FileMatch struct {
	Path string `json:"path"` // virtual: Root, or below it
	// Matches are the numbers (from 1) of the matching lines, increasing;
	// ModeFiles: the first one only.
	Matches []int `json:"matches"`
	// Lines (ModeContent only) are the matching lines and the Context lines
	// around each (those the file has), by increasing number, each once.
	Lines []Line `json:"lines,omitempty"`
}

// Line is one line of a file.
type Line struct {
	N int `json:"n"` // its number, from 1
	// Text is the line as the file has it, without its "\n" (a "\r" before
	// it is kept), so not necessarily UTF-8: bytes, not a string, so that
	// JSON carries it unchanged.
	Text []byte `json:"text"`
}

// Validate checks a request as Grep does before it searches, with the
// errors the grep tool reports.
func (r GrepRequest) Validate() error {
	_, err := r.compile(nil)
	return err
}

func (r GrepRequest) compile(fsys sandbox.FS) (*grepper, error) {
	m, err := newGrepMatcher(r.Pattern)
	if err != nil {
		return nil, fmt.Errorf("invalid regular expression: %s", strings.TrimPrefix(err.Error(), "error parsing regexp: "))
	}
	g := &grepper{fsys: fsys, m: m, mode: r.Mode, context: r.Context, maxBytes: r.MaxFileBytes}
	if r.Glob != "" {
		if g.filter, err = compileFilter("glob", r.Glob); err != nil {
			return nil, err
		}
	}
	switch {
	case r.Mode != ModeContent && r.Mode != ModeFiles && r.Mode != ModeCount:
		return nil, fmt.Errorf("output_mode %q: want content, files or count", r.Mode)
	case r.Context < 0 || r.Context > MaxContext:
		return nil, fmt.Errorf("context %d: want 0 to %d", r.Context, MaxContext)
	case r.MaxFileBytes < 0:
		return nil, fmt.Errorf("max_file_bytes %d: want 0 or more", r.MaxFileBytes)
	}
	if err := checkRoot(r.Root); err != nil {
		return nil, err
	}
	return g, nil
}

// Grep searches req.Root (a file, or every file under a directory) and
// calls found with each file that has matches, in walk order (depth first,
// entries in name order; .git directories skipped, symlinks not followed),
// one call at a time on the caller's goroutine. Files it cannot read,
// binary files (a NUL in the first SniffLen bytes) and files over
// MaxFileBytes are passed over. found returning ErrStop ends the search
// (Grep returns nil); another error ends it with that error. The files are
// read on GOMAXPROCS goroutines ahead of found, a bounded number at a time.
func Grep(ctx context.Context, fsys sandbox.FS, req GrepRequest, found func(FileMatch) error) error {
	g, err := req.compile(fsys)
	if err != nil {
		return err
	}
	fi, err := fsys.Stat(ctx, req.Root)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		if g.filter != nil {
			if ok, err := g.filter.match(ctx, path.Base(req.Root)); !ok {
				return err
			}
		}
		var buf []byte
		if fm, ok := g.file(ctx, req.Root, nil, "", &buf); ok {
			err = found(fm)
		}
		if errors.Is(err, ErrStop) {
			return nil
		}
		return err
	}
	files := newGrepPool(ctx, g, found)
	err = walk(ctx, fsys, req.Root, true, true, func(vp, rel string, d fs.DirEntry, in *heldDir) error {
		if d.IsDir() {
			return nil
		}
		if g.filter != nil {
			if ok, err := g.filter.match(ctx, rel); !ok {
				return err
			}
		}
		return files.add(vp, in, d.Name())
	})
	if err == nil {
		err = files.flush()
	}
	files.close()
	if err == nil {
		err = ctx.Err() // the workers skip what is left when cancelled
	}
	if errors.Is(err, ErrStop) {
		return nil
	}
	return err
}

// grepper searches one file at a time.
type grepper struct {
	fsys     sandbox.FS
	m        *grepMatcher
	filter   *globPattern // nil: every file
	mode     string
	context  int
	maxBytes int64
}

// file searches one file, vp, which is name in directory in when that is
// held open; false when it has no match. Files it cannot read, binary
// files and files over maxBytes have none. buf is a read buffer reused
// from file to file: the FileMatch does not point into it.
func (g *grepper) file(ctx context.Context, vp string, in *heldDir, name string, buf *[]byte) (FileMatch, bool) {
	var f fs.File
	var err error
	if in != nil {
		f, err = in.dir.Open(name)
	} else {
		f, err = g.fsys.Open(ctx, vp)
	}
	if err != nil {
		return FileMatch{}, false
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() || (g.maxBytes > 0 && fi.Size() > g.maxBytes) {
		return FileMatch{}, false
	}
	data, ok := readText(f, fi.Size(), g.maxBytes, buf)
	if !ok {
		return FileMatch{}, false
	}
	var starts *[]int
	if g.mode == ModeContent {
		starts = new([]int)
	}
	matches := g.m.lines(data, g.mode == ModeFiles, starts)
	if len(matches) == 0 {
		return FileMatch{}, false
	}
	fm := FileMatch{Path: vp, Matches: matches}
	if starts != nil {
		fm.Lines = contextLines(data, matches, *starts, g.context)
	}
	for i := range matches {
		matches[i]++ // numbers from 1
	}
	return fm, true
}

// contextLines returns the lines of data within n lines of a match, in
// order, each once, copied out of data. matches are 0-based line indexes,
// increasing, and starts the offsets where those lines start: the lines
// before a match are found backwards from its start, so only the lines
// shown are scanned, never the whole file.
func contextLines(data []byte, matches, starts []int, n int) []Line {
	type span struct{ n, from, to int }
	var spans []span
	size := 0
	next, nextPos := 0, 0 // the first line not yet taken, and its offset when known (next > 0)
	for k, m := range matches {
		from, pos := max(m-n, next), starts[k]
		if from == next && next > 0 {
			pos = nextPos
		} else {
			for i := m; i > from; i-- { // back to line from: pos-1 is the "\n" ending line i-1
				pos = bytes.LastIndexByte(data[:pos-1], '\n') + 1
			}
		}
		i := from
		for ; i <= m+n && pos < len(data); i++ {
			end := len(data)
			if j := bytes.IndexByte(data[pos:], '\n'); j >= 0 {
				end = pos + j
			}
			spans = append(spans, span{i + 1, pos, end})
			size += end - pos
			pos = end + 1
		}
		next, nextPos = i, pos
	}
	text := make([]byte, 0, size)
	lines := make([]Line, len(spans))
	for k, s := range spans {
		text = append(text, data[s.from:s.to]...)
		lines[k] = Line{N: s.n, Text: text[len(text)-(s.to-s.from) : len(text) : len(text)]}
	}
	return lines
}

// sniffFirst is the size from which a file is sniffed for binary content
// before the rest of it is read.
const sniffFirst = 64 << 10

// readText reads a file of the given size into *buf (grown when too small)
// and returns its content, or false for a binary file (a NUL in its first
// SniffLen bytes) or a read error. The size is the one Stat gave: a file
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
		if cap(*buf) < sniffFirst {
			*buf = make([]byte, 0, sniffFirst)
		}
		n := 0
		if size > sniffFirst {
			// Sniffed in the buffer as it is: a large binary file is
			// passed over without the buffer grown to its size.
			k, err := io.ReadFull(r, (*buf)[:SniffLen])
			n = k
			if bytes.IndexByte((*buf)[:n], 0) >= 0 {
				return nil, false
			}
			if err != nil { // the file shrank, or a read error
				if err != io.ErrUnexpectedEOF && err != io.EOF {
					return nil, false
				}
				size = int64(n)
			}
		}
		if int64(cap(*buf)) < size {
			// Grown at least twice over: a tree whose files grow one
			// after the other costs a few buffers, not one a file.
			nb := make([]byte, 0, max(size, 2*int64(cap(*buf))))
			*buf = append(nb, (*buf)[:n]...)
		}
		b := (*buf)[:size]
		if n < len(b) {
			k, err := io.ReadFull(r, b[n:])
			n += k
			if err != nil && err != io.ErrUnexpectedEOF && err != io.EOF {
				return nil, false
			}
		}
		data = b[:n]
	}
	if bytes.IndexByte(data[:min(len(data), SniffLen)], 0) >= 0 {
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
// to found in the order the files were added. At most grepWindow files per
// worker are in flight, so memory stays bounded; found's first error stops
// the rest.
type grepPool struct {
	ctx   context.Context
	g     *grepper
	found func(FileMatch) error
	jobs  chan *grepJob
	queue []*grepJob // added, not yet handed to found; oldest first
	free  []*grepJob // handed to found, to be used again
	err   error      // found's first error
	stop  atomic.Bool
	wg    sync.WaitGroup
}

type grepJob struct {
	vp   string
	in   *heldDir // the file's directory, held open; nil: open vp
	name string   // the file's name in in
	fm   FileMatch
	ok   bool          // fm holds matches
	done chan struct{} // one token when searched (or skipped)
}

// grepWindow is how many files per worker may be in flight.
const grepWindow = 16

func newGrepPool(ctx context.Context, g *grepper, found func(FileMatch) error) *grepPool {
	n := runtime.GOMAXPROCS(0)
	p := &grepPool{ctx: ctx, g: g, found: found, jobs: make(chan *grepJob, grepWindow*n)}
	for range n {
		p.wg.Go(p.worker)
	}
	return p
}

func (p *grepPool) worker() {
	buf := readBufs.Get().(*[]byte)
	defer func() {
		if cap(*buf) <= maxPooledBuf {
			readBufs.Put(buf)
		}
	}()
	for j := range p.jobs {
		if !p.stop.Load() && p.ctx.Err() == nil {
			j.fm, j.ok = p.g.file(p.ctx, j.vp, j.in, j.name, buf)
		}
		if j.in != nil {
			j.in.release()
			j.in = nil
		}
		j.done <- struct{}{}
	}
}

// readBufs are the workers' read buffers, kept from one search to the
// next up to maxPooledBuf each (a search of large files makes its own).
var readBufs = sync.Pool{New: func() any { return new([]byte) }}

const maxPooledBuf = 4 << 20

// add queues a file, vp, which is name in in when that is held open (not
// nil), first handing the oldest one's results to found when the window
// is full.
func (p *grepPool) add(vp string, in *heldDir, name string) error {
	if p.err == nil && len(p.queue) == cap(p.jobs) {
		p.next()
	}
	if p.err != nil {
		return p.err
	}
	var j *grepJob
	if n := len(p.free); n > 0 {
		j, p.free = p.free[n-1], p.free[:n-1]
		j.vp, j.name = vp, name
	} else {
		j = &grepJob{vp: vp, name: name, done: make(chan struct{}, 1)}
	}
	if in != nil {
		in.acquire()
		j.in = in
	}
	p.queue = append(p.queue, j)
	p.jobs <- j // never blocks: the channel holds at most len(p.queue) jobs
	return nil
}

func (p *grepPool) next() {
	j := p.queue[0]
	p.queue[0] = nil
	p.queue = p.queue[1:]
	<-j.done
	if j.ok {
		p.err = p.found(j.fm)
	}
	*j = grepJob{done: j.done} // found keeps no reference to it
	p.free = append(p.free, j)
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
