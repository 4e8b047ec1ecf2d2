package search

import (
	"context"
	"errors"
	"io/fs"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// ErrStop, returned by a callback of Grep or Glob, ends the search early;
// the search then returns nil.
var ErrStop = errors.New("search: stop")

// walkAhead bounds how many directories the readers of a walk may have read
// before the walk visits them: the memory a walk holds stays bounded however
// large the tree, and a walk stopped early has not read much more than it
// used.
const walkAhead = 256

// heldAhead is walkAhead for a walk that holds its directories open: each
// read ahead is a descriptor, and the server's descriptors are shared by
// every tenant's calls (max_calls of them at once).
const heldAhead = 64

// walk visits the tree under root (a directory) depth first, entries in
// name order, calling fn with each entry's virtual path and its path
// relative to root. Symlinks are not followed into; .git directories are
// skipped when skipGit. fn returning fs.SkipDir skips a directory, ErrStop
// ends the walk. Unreadable directories are passed over.
//
// fn runs on the caller's goroutine, one entry at a time, in order; the
// directories themselves are read ahead of it on GOMAXPROCS goroutines,
// since reading them (one open and a few getdents per directory) is most of
// the cost of a walk.
//
// With hold, where fsys is a sandbox.DirOpener, each directory with files
// in it is held open from its read until the walk has visited it, and fn
// gets it (else nil) to take a reference for each file it opens later
// (heldDir). A walk then holds at most heldAhead directories open read
// ahead, the ancestors of the one it visits, and those of the files its
// caller has yet to open (grep: grepWindow a worker).
func walk(ctx context.Context, fsys sandbox.FS, root string, skipGit, hold bool, fn func(vpath, rel string, d fs.DirEntry, in *heldDir) error) error {
	w := &walker{ctx: ctx, fsys: fsys, skipGit: skipGit, maxAhead: walkAhead, held: map[*dirNode]bool{}}
	if hold {
		if w.dirs, _ = fsys.(sandbox.DirOpener); w.dirs != nil {
			w.maxAhead = heldAhead
		}
	}
	w.wake = sync.NewCond(&w.mu)
	var readers sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		readers.Go(w.reader)
	}
	defer func() {
		w.mu.Lock()
		w.stopped = true
		w.wake.Broadcast()
		w.mu.Unlock()
		readers.Wait()
		// Read ahead, never visited (the walk stopped early).
		for n := range w.held {
			n.dropHeld()
		}
	}()
	err := w.visit(newDirNode(root, ""), fn)
	if errors.Is(err, ErrStop) {
		return nil
	}
	return err
}

// dirNode is one directory of a walk.
type dirNode struct {
	vp, rel  string
	entries  []fs.DirEntry // sorted by name, without .git when skipped
	children []*dirNode    // by entry: the subdirectories, nil for the rest
	claimed  bool          // being read or read; guarded by walker.mu
	done     chan struct{} // closed when entries and children are set
	// held is the directory held open for its files, until visited.
	held *heldDir
}

// heldDir is a directory a walk holds open for the files in it: the walk
// holds one reference until it has visited the directory, and each file
// queued to be opened later one more; the last to let go closes it.
type heldDir struct {
	dir  sandbox.Dir
	refs atomic.Int32
}

func (h *heldDir) acquire() { h.refs.Add(1) }

func (h *heldDir) release() {
	if h.refs.Add(-1) == 0 {
		h.dir.Close()
	}
}

// dropHeld lets go of the walk's reference to n's directory.
func (n *dirNode) dropHeld() {
	if h := n.held; h != nil {
		n.held = nil
		h.release()
	}
}

func newDirNode(vp, rel string) *dirNode {
	return &dirNode{vp: vp, rel: rel, done: make(chan struct{})}
}

// walker reads the directories of one walk: readers take them from todo
// (a stack, so that they read in about the order the walk visits), and the
// walk reads a directory itself when no reader has taken it yet. Neither
// ever waits for the other except for a directory being read, so a walk
// cannot deadlock.
type walker struct {
	ctx     context.Context
	fsys    sandbox.FS
	skipGit bool
	dirs    sandbox.DirOpener // nil: directories are listed, not held
	// maxAhead is walkAhead, or heldAhead when directories are held.
	maxAhead int

	mu      sync.Mutex
	wake    *sync.Cond
	todo    []*dirNode // the next to read is the last
	ahead   int        // claimed, not yet visited or discarded
	stopped bool
	held    map[*dirNode]bool // read with a held directory, not yet visited
}

// claim marks n as read by the caller; false when someone else has it.
func (w *walker) claim(n *dirNode) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if n.claimed {
		return false
	}
	n.claimed = true
	w.ahead++
	return true
}

// release says a claimed directory has been visited or discarded.
func (w *walker) release() {
	w.mu.Lock()
	w.ahead--
	w.wake.Signal()
	w.mu.Unlock()
}

func (w *walker) reader() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for {
		for !w.stopped && (len(w.todo) == 0 || w.ahead >= w.maxAhead) {
			w.wake.Wait()
		}
		if w.stopped {
			return
		}
		n := w.todo[len(w.todo)-1]
		w.todo[len(w.todo)-1] = nil
		w.todo = w.todo[:len(w.todo)-1]
		if n.claimed {
			continue
		}
		n.claimed = true
		w.ahead++
		w.mu.Unlock()
		w.read(n)
		w.mu.Lock()
	}
}

// read lists n and queues its subdirectories for the readers.
func (w *walker) read(n *dirNode) {
	defer close(n.done)
	entries, dir, err := w.list(n.vp)
	if err != nil {
		return
	}
	if w.skipGit {
		entries = deleteGit(entries)
	}
	n.entries = entries
	n.children = make([]*dirNode, len(entries))
	subdirs := 0
	for i, e := range entries {
		if e.IsDir() {
			n.children[i] = newDirNode(childPath(n.vp, e.Name()), childPath(n.rel, e.Name()))
			subdirs++
		}
	}
	if dir != nil && subdirs == len(entries) { // no file to open in it
		dir.Close()
		dir = nil
	}
	if subdirs == 0 && dir == nil {
		return
	}
	w.mu.Lock()
	if dir != nil {
		n.held = &heldDir{dir: dir}
		n.held.refs.Store(1)
		w.held[n] = true
	}
	for i := len(n.children) - 1; i >= 0; i-- { // the first subdirectory on top
		if c := n.children[i]; c != nil {
			w.todo = append(w.todo, c)
		}
	}
	if subdirs > 0 {
		w.wake.Broadcast()
	}
	w.mu.Unlock()
}

// list reads directory vp: held open when the walk holds directories and
// the file system can (dir not nil), else listed by ReadDir.
func (w *walker) list(vp string) (entries []fs.DirEntry, dir sandbox.Dir, err error) {
	if w.dirs != nil {
		dir, err = w.dirs.OpenDir(w.ctx, vp)
		if err == nil {
			if entries, err = dir.ReadDir(); err != nil {
				dir.Close()
				return nil, nil, err
			}
			return entries, dir, nil
		}
		if !errors.Is(err, errors.ErrUnsupported) {
			return nil, nil, err
		}
	}
	entries, err = w.fsys.ReadDir(w.ctx, vp)
	return entries, nil, err
}

// visited lets go of the walk's hold on n's directory, once visited or
// discarded.
func (w *walker) visited(n *dirNode) {
	if n.held == nil {
		return
	}
	w.mu.Lock()
	delete(w.held, n)
	w.mu.Unlock()
	n.dropHeld()
}

func deleteGit(entries []fs.DirEntry) []fs.DirEntry {
	for i, e := range entries {
		if e.Name() == ".git" && e.IsDir() {
			return append(entries[:i:i], entries[i+1:]...)
		}
	}
	return entries
}

// childPath joins a clean path (virtual, or relative and "" for the root)
// and an entry name, which has no slash.
func childPath(dir, name string) string {
	switch dir {
	case "":
		return name
	case "/":
		return "/" + name
	}
	return dir + "/" + name
}

func (w *walker) visit(n *dirNode, fn func(vpath, rel string, d fs.DirEntry, in *heldDir) error) error {
	if err := w.ctx.Err(); err != nil {
		return err
	}
	if w.claim(n) {
		w.read(n)
	} else {
		<-n.done
	}
	w.release()
	defer w.visited(n)
	entries, children := n.entries, n.children
	n.entries, n.children = nil, nil // visited: let them go
	for i, e := range entries {
		if i%64 == 63 { // a large directory: fn may be slow for each entry
			if err := w.ctx.Err(); err != nil {
				return err
			}
		}
		err := fn(childPath(n.vp, e.Name()), childPath(n.rel, e.Name()), e, n.held)
		if errors.Is(err, fs.SkipDir) {
			if children[i] != nil {
				w.discard(children[i])
			}
			continue
		}
		if err != nil {
			return err
		}
		if children[i] != nil {
			if err := w.visit(children[i], fn); err != nil {
				return err
			}
		}
	}
	return nil
}

// discard gives up a subtree that will not be visited.
func (w *walker) discard(n *dirNode) {
	if w.claim(n) { // nobody read it: nothing below it is queued
		w.release()
		return
	}
	<-n.done
	w.release()
	w.visited(n)
	for _, c := range n.children {
		if c != nil {
			w.discard(c)
		}
	}
}
