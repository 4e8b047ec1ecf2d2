package tools

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path"
	"strings"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/search"
)

// searcher runs a whole grep or glob search where the files are. A sandbox
// whose file system is a round trip away (a Pod) implements it on its FS or
// on itself, so that the walk and the reads happen inside and only results
// come back; any other sandbox is searched here, through its FS, by the
// same engine. The semantics are those of search.Grep and search.Glob.
type searcher interface {
	Grep(ctx context.Context, req search.GrepRequest, found func(search.FileMatch) error) error
	Glob(ctx context.Context, req search.GlobRequest, found func(search.Hit) error) (total int, err error)
}

// searcherOf returns the searcher of env's sandbox: its own, its results
// checked (they come from inside the sandbox), or the engine over its FS.
func searcherOf(env *Env) searcher {
	fsys := env.Sandbox.FS()
	if s, ok := fsys.(searcher); ok {
		return checkedSearcher{s}
	}
	if s, ok := env.Sandbox.(searcher); ok {
		return checkedSearcher{s}
	}
	return localSearcher{fsys}
}

// localSearcher runs the engine here over a sandbox FS.
type localSearcher struct{ fsys sandbox.FS }

func (l localSearcher) Grep(ctx context.Context, req search.GrepRequest, found func(search.FileMatch) error) error {
	return search.Grep(ctx, l.fsys, req, found)
}

func (l localSearcher) Glob(ctx context.Context, req search.GlobRequest, found func(search.Hit) error) (int, error) {
	return search.Glob(ctx, l.fsys, req, found)
}

// remoteMaxFileBytes bounds the lines of one file a remote grep may send
// when GrepMaxFileBytes sets no limit.
const remoteMaxFileBytes = 256 << 20

// errBadResult is what a tool says of a result that a search inside the
// sandbox should not have given: nothing of it is shown, not even its path.
func errBadResult(tool, why string) error {
	return fmt.Errorf("%s: the sandbox's search returned a malformed result (%s); nothing of it is shown", tool, why)
}

// checkedSearcher checks every result of a search that ran inside the
// sandbox, where anything may have answered: a path must be clean,
// absolute and within the searched root, in walk order (so each comes
// once); line numbers increase and lie within the file's possible size;
// the lines sent are those a renderer asks for and no more bytes than the
// file may have. The first bad result ends the search with an error, and
// once the tool has said stop (or failed) nothing more reaches it.
type checkedSearcher struct{ s searcher }

func (c checkedSearcher) Grep(ctx context.Context, req search.GrepRequest, found func(search.FileMatch) error) error {
	maxBytes := req.MaxFileBytes
	if maxBytes <= 0 {
		maxBytes = remoteMaxFileBytes
	}
	var prev string
	var done error // found's error, or the first bad result
	err := c.s.Grep(ctx, req, func(fm search.FileMatch) error {
		if done != nil {
			return done
		}
		if why := checkFileMatch(req, maxBytes, prev, fm); why != "" {
			done = errBadResult("grep", why)
			return done
		}
		prev = fm.Path
		done = found(fm)
		return done
	})
	if done != nil && !errors.Is(done, search.ErrStop) {
		return done
	}
	return err
}

func (c checkedSearcher) Glob(ctx context.Context, req search.GlobRequest, found func(search.Hit) error) (int, error) {
	var prev search.Hit
	hits := 0
	var done error
	seen := map[string]bool{} // by mtime: order does not rule out a path twice
	total, err := c.s.Glob(ctx, req, func(h search.Hit) error {
		if done != nil {
			return done
		}
		switch {
		case req.Limit > 0 && hits >= req.Limit:
			done = errBadResult("glob", "more paths than asked for")
		case !pathBelow(h.Path, req.Root):
			done = errBadResult("glob", "a path outside the searched directory")
		case hits > 0 && !hitBefore(req.Sort, prev, h):
			done = errBadResult("glob", "paths out of order")
		case req.Sort != search.SortMtime && h.Mtime != 0:
			done = errBadResult("glob", "a time that was not asked for")
		case req.Sort == search.SortMtime && seen[h.Path]:
			done = errBadResult("glob", "a path twice")
		}
		if done != nil {
			return done
		}
		prev = h
		hits++
		if req.Sort == search.SortMtime {
			seen[h.Path] = true
		}
		done = found(h)
		return done
	})
	if done != nil && !errors.Is(done, search.ErrStop) {
		return 0, done
	}
	if err != nil || done != nil {
		return total, err
	}
	// Every hit is counted; found got all of them up to the limit.
	want := total
	if req.Limit > 0 {
		want = min(total, req.Limit)
	}
	if hits != want {
		return 0, errBadResult("glob", "a count that does not add up")
	}
	return total, nil
}

// checkFileMatch returns why fm is not a result grep could give for req
// after prev (the previous file's path), or "".
func checkFileMatch(req search.GrepRequest, maxBytes int64, prev string, fm search.FileMatch) string {
	switch {
	case fm.Path != req.Root && !pathBelow(fm.Path, req.Root):
		return "a path outside the searched directory"
	case prev != "" && !walkBefore(prev, fm.Path):
		return "files out of order"
	case len(fm.Matches) == 0:
		return "a file without matches"
	case req.Mode == search.ModeFiles && len(fm.Matches) != 1:
		return "more than one match of a file listed by name"
	case req.Mode != search.ModeContent && len(fm.Lines) > 0:
		return "lines that were not asked for"
	}
	// A file of maxBytes bytes has at most maxBytes+1 lines.
	last := 0
	for _, m := range fm.Matches {
		if m <= last || int64(m) > maxBytes+1 {
			return "line numbers out of order or out of range"
		}
		last = m
	}
	if req.Mode != search.ModeContent {
		return ""
	}
	// Each line is one a match asks for, and they take no more bytes (each
	// with its "\n") than the file may hold; each match is among them.
	last, k, size := 0, 0, int64(0)
	for _, l := range fm.Lines {
		if l.N <= last {
			return "line numbers out of order or out of range"
		}
		last = l.N
		for k < len(fm.Matches) && fm.Matches[k]+req.Context < l.N {
			k++
		}
		if k == len(fm.Matches) || fm.Matches[k]-req.Context > l.N {
			return "a line that no match asks for"
		}
		if size += int64(len(l.Text)) + 1; size > maxBytes+1 {
			return "lines longer than the file may be"
		}
		if bytes.IndexByte(l.Text, '\n') >= 0 {
			return "a line holding a newline"
		}
	}
	k = 0
	for _, m := range fm.Matches {
		for k < len(fm.Lines) && fm.Lines[k].N < m {
			k++
		}
		if k == len(fm.Lines) || fm.Lines[k].N != m {
			return "a match without its line"
		}
	}
	return ""
}

// pathBelow reports whether p is a clean absolute path strictly below root
// (a clean absolute path). A newline in a name is allowed, as on the file
// systems searched here: grep shows such a name as it is either way.
func pathBelow(p, root string) bool {
	return p != root && path.IsAbs(p) && path.Clean(p) == p && sandbox.Within(p, root) && strings.IndexByte(p, 0) < 0 && fitsPathMax(p)
}

// fitsPathMax reports whether p could name a file on Linux: at most
// PATH_MAX bytes, no component over NAME_MAX. A path from a search inside
// the sandbox is kept and shown: its size must be a file's.
func fitsPathMax(p string) bool {
	if len(p) > 4096 {
		return false
	}
	for c := range strings.SplitSeq(p, "/") {
		if len(c) > 255 {
			return false
		}
	}
	return true
}

// maxPage bounds max_results and offset of grep and glob: what one call
// keeps of a search, whatever the searcher sends.
const maxPage = 100_000

// checkPage refuses a page beyond maxPage, naming the argument.
func checkPage(maxResults, offset int) error {
	switch {
	case maxResults > maxPage:
		return fmt.Errorf("max_results %d: at most %d", maxResults, maxPage)
	case offset > maxPage*100:
		return fmt.Errorf("offset %d: at most %d", offset, maxPage*100)
	}
	return nil
}

// hitBefore reports whether glob hit a comes before b in the order sort.
func hitBefore(sort string, a, b search.Hit) bool {
	if sort == search.SortMtime && a.Mtime != b.Mtime {
		return a.Mtime > b.Mtime
	}
	return walkBefore(a.Path, b.Path)
}

// walkBefore reports whether a walk visits path a before path b (both
// clean, below one root): depth first, names in byte order, so a
// directory's entries come right after it. That is byte order with "/"
// taken as the lowest byte, names holding neither "/" nor NUL.
func walkBefore(a, b string) bool {
	for i := 0; i < len(a) && i < len(b); i++ {
		ca, cb := a[i], b[i]
		if ca == cb {
			continue
		}
		if ca == '/' {
			return true
		}
		if cb == '/' {
			return false
		}
		return ca < cb
	}
	return len(a) < len(b)
}
