package search

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"

	"github.com/bmatcuk/doublestar/v4"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// GlobRequest is one glob search: the paths under Root whose path relative
// to Root matches Pattern.
type GlobRequest struct {
	// Root is the directory searched: a clean absolute virtual path.
	Root string `json:"root"`
	// Pattern is matched against each path relative to Root (doublestar
	// syntax, "**" and {a,b}); the glob tool has already taken the fixed
	// prefix off an absolute pattern and a leading "./".
	Pattern string `json:"pattern"`
	// IncludeDirs lists directories too, not only files and symlinks.
	IncludeDirs bool `json:"include_dirs,omitempty"`
	// Sort is SortPath ("" too) or SortMtime.
	Sort string `json:"sort,omitempty"`
	// Limit, when above 0, is how many hits found gets: the first in the
	// order of Sort; the rest are only counted. The tool shows one page, so
	// a remote search need not send, nor the server keep, the others.
	Limit int `json:"limit,omitempty"`
}

// The orders of glob hits (GlobRequest.Sort): the values of the glob tool's
// sort.
const (
	// SortPath: walk order (depth first, entries in name order).
	SortPath = "path"
	// SortMtime: newest first (Hit.Mtime filled in), equal times in walk
	// order; the hits come once the walk is done.
	SortMtime = "mtime"
)

// Hit is one path a glob search found.
type Hit struct {
	Path string `json:"path"` // virtual, below the request's Root
	// Mtime is the modification time in Unix nanoseconds with SortMtime,
	// when known; 0 otherwise.
	Mtime int64 `json:"mtime,omitempty"`
}

// Validate checks a request as Glob does before it searches, with the
// errors the glob tool reports.
func (r GlobRequest) Validate() error {
	_, err := r.compile()
	return err
}

func (r GlobRequest) compile() (*globPattern, error) {
	g, err := compileGlob("pattern", r.Pattern)
	if err != nil {
		return nil, err
	}
	if r.Sort != "" && r.Sort != SortPath && r.Sort != SortMtime {
		return nil, fmt.Errorf("sort %q: want path or mtime", r.Sort)
	}
	if err := checkRoot(r.Root); err != nil {
		return nil, err
	}
	if r.Limit < 0 {
		return nil, fmt.Errorf("limit %d: want 0 or more", r.Limit)
	}
	return g, nil
}

// checkRoot refuses a root that is not a clean absolute virtual path: the
// paths found are built from it.
func checkRoot(root string) error {
	if !path.IsAbs(root) || path.Clean(root) != root || strings.IndexByte(root, 0) >= 0 {
		return fmt.Errorf("root %q: want a clean absolute virtual path", root)
	}
	return nil
}

// Glob calls found with each path under req.Root that matches, in the
// order of req.Sort, .git directories skipped and symlinks not followed, and
// returns how many matched in all. Hits past req.Limit are counted, not
// passed to found. found returning ErrStop ends the search (Glob returns
// nil and the count so far); another error ends it with that error. A root
// that is not a directory is a PathError with sandbox.ErrNotDir.
func Glob(ctx context.Context, fsys sandbox.FS, req GlobRequest, found func(Hit) error) (total int, err error) {
	match, err := req.compile()
	if err != nil {
		return 0, err
	}
	fi, err := fsys.Stat(ctx, req.Root)
	if err != nil {
		return 0, err
	}
	if !fi.IsDir() {
		return 0, &sandbox.PathError{Path: req.Root, Err: sandbox.ErrNotDir}
	}
	var newest *newestHits
	if req.Sort == SortMtime {
		newest = &newestHits{limit: req.Limit}
	}
	err = walk(ctx, fsys, req.Root, true, false, func(vp, rel string, d fs.DirEntry, _ *heldDir) error {
		if d.IsDir() && !req.IncludeDirs {
			return nil
		}
		if ok, err := match.match(ctx, rel); !ok {
			return err
		}
		total++
		if newest != nil {
			h := Hit{Path: vp}
			if fi, err := d.Info(); err == nil {
				h.Mtime = fi.ModTime().UnixNano()
			}
			newest.add(h, total)
			return nil
		}
		if req.Limit > 0 && total > req.Limit {
			return nil
		}
		return found(Hit{Path: vp})
	})
	if err != nil || newest == nil {
		return total, err
	}
	for _, h := range newest.sorted() {
		if err := found(h.Hit); err != nil {
			if errors.Is(err, ErrStop) {
				err = nil
			}
			return total, err
		}
	}
	return total, nil
}

// newestHits keeps the limit newest hits of a walk (all when limit is 0):
// a heap whose top is the one to drop first, the oldest, of equal times
// the last walked.
type newestHits struct {
	limit int
	hits  []walkedHit
}

type walkedHit struct {
	Hit
	seq int // its place in the walk
}

// before reports whether a comes before b in a listing by mtime.
func (a walkedHit) before(b walkedHit) bool {
	return a.Mtime > b.Mtime || a.Mtime == b.Mtime && a.seq < b.seq
}

func (n *newestHits) Len() int           { return len(n.hits) }
func (n *newestHits) Less(i, j int) bool { return n.hits[j].before(n.hits[i]) }
func (n *newestHits) Swap(i, j int)      { n.hits[i], n.hits[j] = n.hits[j], n.hits[i] }
func (n *newestHits) Push(x any)         { n.hits = append(n.hits, x.(walkedHit)) }
func (n *newestHits) Pop() any {
	h := n.hits[len(n.hits)-1]
	n.hits = n.hits[:len(n.hits)-1]
	return h
}

func (n *newestHits) add(h Hit, seq int) {
	w := walkedHit{h, seq}
	switch {
	case n.limit <= 0: // all of them: sorted once at the end
		n.hits = append(n.hits, w)
	case len(n.hits) < n.limit:
		heap.Push(n, w)
	case w.before(n.hits[0]):
		n.hits[0] = w
		heap.Fix(n, 0)
	}
}

// sorted returns the hits kept, newest first.
func (n *newestHits) sorted() []walkedHit {
	slices.SortFunc(n.hits, func(a, b walkedHit) int {
		if a.before(b) {
			return -1
		}
		return 1
	})
	return n.hits
}

// Bounds of a glob pattern (glob's pattern, grep's glob). Braces multiply:
// "{a,b}{c,d}" stands for four patterns, and doublestar tries them by
// backtracking, so a few dozen "{,}" groups would take hours for every
// entry of the tree. A pattern is expanded here, up to globMaxAlternatives
// brace-free patterns, each matched in linear time, with the call's context
// checked between them.
const (
	globMaxPatternBytes = 4096
	globMaxAlternatives = 256
)

// globPattern is a compiled glob pattern: the brace-free patterns it stands
// for, each with its matcher.
type globPattern struct {
	alts []func(rel string) bool
}

// compileGlob validates and bounds a glob pattern given as argument arg.
func compileGlob(arg, pattern string) (*globPattern, error) {
	return compile(arg, pattern, false)
}

// compileFilter compiles a file filter (grep's glob): an alternative with a
// slash matches the relative path, one without only the base name — each
// alternative of "{*.txt,docs/*.md}" by its own form.
func compileFilter(arg, pattern string) (*globPattern, error) {
	return compile(arg, pattern, true)
}

func compile(arg, pattern string, filter bool) (*globPattern, error) {
	if len(pattern) > globMaxPatternBytes {
		return nil, fmt.Errorf("%s: the glob pattern is %d bytes long, over the limit of %d", arg, len(pattern), globMaxPatternBytes)
	}
	if pattern == "" || !doublestar.ValidatePattern(pattern) {
		return nil, fmt.Errorf("%s: invalid glob pattern: %q", arg, pattern)
	}
	alts, ok := expandBraces(pattern, globMaxAlternatives)
	if !ok {
		return nil, fmt.Errorf("%s: the glob pattern's {...} groups expand to more than %d patterns (the limit); use fewer alternatives or split the search", arg, globMaxAlternatives)
	}
	g := &globPattern{}
	for _, a := range alts {
		m := globMatcher(a)
		if filter && !strings.Contains(a, "/") {
			full := m
			m = func(rel string) bool { return full(path.Base(rel)) }
		}
		g.alts = append(g.alts, m)
	}
	return g, nil
}

// match reports whether rel matches; it stops with ctx's error when the
// call is cancelled.
func (g *globPattern) match(ctx context.Context, rel string) (bool, error) {
	for _, m := range g.alts {
		if err := ctx.Err(); err != nil {
			return false, err
		}
		if m(rel) {
			return true, nil
		}
	}
	return false, nil
}

// expandBraces returns the brace-free patterns a valid pattern stands for,
// reading braces as doublestar does ("\\" escapes the next byte, a class
// [...] is taken whole, alternatives nest), or false when there are more
// than limit. No intermediate list grows past limit either.
func expandBraces(pattern string, limit int) ([]string, bool) {
	alts, _, ok := expandSeq(pattern, 0, false, limit)
	return alts, ok
}

// expandSeq expands pattern from i up to the end, or, when nested, up to
// the "," or "}" ending an alternative (returned as the new i).
func expandSeq(pattern string, i int, nested bool, limit int) ([]string, int, bool) {
	out := []string{""}
	lit := i // start of the literal run not yet appended
	flush := func(end int) {
		if end > lit {
			for k := range out {
				out[k] += pattern[lit:end]
			}
		}
	}
	for i < len(pattern) {
		switch c := pattern[i]; {
		case c == '\\':
			i += 2
		case c == '[':
			i++
			for i < len(pattern) && pattern[i] != ']' {
				if pattern[i] == '\\' {
					i++
				}
				i++
			}
			i++
		case nested && (c == ',' || c == '}'):
			flush(i)
			return out, i, true
		case c == '{':
			flush(i)
			var group []string
			for i < len(pattern) && pattern[i] != '}' {
				alt, next, ok := expandSeq(pattern, i+1, true, limit)
				if !ok || len(group)+len(alt) > limit {
					return nil, 0, false
				}
				group = append(group, alt...)
				i = next
			}
			i++ // the "}"
			lit = i
			if len(out)*len(group) > limit {
				return nil, 0, false
			}
			next := make([]string, 0, len(out)*len(group))
			for _, o := range out {
				for _, a := range group {
					next = append(next, o+a)
				}
			}
			out = next
		default:
			i++
		}
	}
	flush(min(i, len(pattern)))
	return out, i, true
}

// globMatcher returns a function reporting whether a relative path matches
// a valid brace-free pattern, as doublestar.Match does. It runs for every
// entry of the tree, so the commonest patterns take a short cut: "**/NAME"
// with no other slash only looks at the base name (a leading "**/" matches
// any run of directories, none included), and "**/*SUFFIX" is a suffix test.
func globMatcher(pattern string) func(rel string) bool {
	if name, ok := strings.CutPrefix(pattern, "**/"); ok && name != "" && !strings.Contains(name, "/") && !strings.Contains(name, "**") {
		if suffix, ok := strings.CutPrefix(name, "*"); ok && !strings.ContainsAny(suffix, `*?[]{}\`) {
			return func(rel string) bool { return strings.HasSuffix(path.Base(rel), suffix) }
		}
		return func(rel string) bool {
			ok, _ := doublestar.Match(name, path.Base(rel))
			return ok
		}
	}
	return func(rel string) bool {
		ok, _ := doublestar.Match(pattern, rel)
		return ok
	}
}
