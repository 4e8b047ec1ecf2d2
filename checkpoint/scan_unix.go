//go:build linux || darwin || freebsd

package checkpoint

import (
	"context"
	"crypto/sha256"
	"errors"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

const supported = true

const (
	// maxDepth bounds how deep a save descends (each level holds a
	// directory open): deeper directories are skipped ("too deep").
	maxDepth = 512
	// smallFile: files up to this size are read into memory, hashed, and
	// written to the store only when their content is new; larger ones
	// are copied to a temporary object file while being hashed.
	smallFile = 256 << 10
)

// scanResult is one walk of a tree.
type scanResult struct {
	root    *tree
	trees   map[hash]*tree // every directory's tree
	skipped []Skip
	files   int
	size    int64
	reads   int64           // files read (the stat cache did not vouch for them)
	racy    map[string]bool // paths the next walk reads (or lists) again
	start   int64
}

// scanner walks a tree without following any symlink: every directory
// is opened with openat(O_NOFOLLOW|O_DIRECTORY) relative to its parent,
// every entry lstat'd with fstatat relative to its directory. With a
// writer it stores what it reads (Save), without one it only hashes
// (Changes against the live tree, Restore's plan).
//
// A few workers (one per processor) take directories from a stack: a
// directory's job opens it (its parent stays open until all its
// subdirectories are), lists it (unless the cache vouches for its names),
// stats its entries, reads what changed and pushes its subdirectories; the
// last of those to finish makes the directory's tree, and so on up to the
// root. Long-lived workers that never wait for each other keep both
// processors busy, and the stack keeps few directories open at a time.
type scanner struct {
	s     *Store
	ctx   context.Context
	w     *objWriter // nil: hash only
	start int64
	cache *statCache

	mu          sync.Mutex
	cond        sync.Cond
	stack       []*dirJob
	outstanding int // jobs pushed and not finished
	trees       map[hash]*tree
	skipped     []Skip
	err         error
	reads       atomic.Int64
	racy        map[string]bool
	root        *dirNode
	rootTree    *tree
}

// dirFD is a directory descriptor shared by the jobs of its
// subdirectories, which open them relative to it.
type dirFD struct {
	fd   int
	refs atomic.Int32
}

func (d *dirFD) release() {
	if d.refs.Add(-1) == 0 {
		unix.Close(d.fd)
	}
}

// dirJob is a directory to walk: entry idx of parent, named name in the
// directory pfd.
type dirJob struct {
	parent *dirNode
	idx    int
	pfd    *dirFD
	name   string
	rel    string
	depth  int
	cached *entry // its entry in the stat cache, or nil
	listed bool   // the cache vouches for its names
}

// dirNode is a directory being walked: its entries, waiting for the
// hashes of its subdirectories' trees.
type dirNode struct {
	parent  *dirNode
	idx     int
	cached  *tree
	entries []entry // a subdirectory gone before it was opened has kind 0
	absent  bool    // hashing only: a file content not known to be in the store
	pending atomic.Int32
	files   atomic.Int64
	size    atomic.Int64
}

// scan walks root. cache is the stat cache: the tree of an earlier walk,
// whose entries are trusted (not read again) where the stat is the same.
func (s *Store) scan(ctx context.Context, root string, cache *statCache, w *objWriter) (*scanResult, error) {
	fd, err := openDir(unix.AT_FDCWD, root, false)
	if err != nil {
		return nil, errorf("open the root: %v", bare(err))
	}
	if cache == nil {
		cache = &statCache{racy: map[string]bool{}}
	}
	sc := &scanner{s: s, ctx: ctx, w: w, start: time.Now().UnixNano(), cache: cache,
		trees: map[hash]*tree{}, racy: map[string]bool{}}
	sc.cond.L = &sc.mu
	sc.root = sc.walk(fd, ".", 0, nil, 0, cache.root, false)
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) - 1 {
		wg.Go(sc.work)
	}
	sc.work()
	wg.Wait()
	if sc.err != nil {
		return nil, sc.err
	}
	slices.SortFunc(sc.skipped, func(a, b Skip) int { return strings.Compare(a.Path, b.Path) })
	return &scanResult{root: sc.rootTree, trees: sc.trees, skipped: sc.skipped, racy: sc.racy, start: sc.start,
		files: int(sc.root.files.Load()), size: sc.root.size.Load(), reads: sc.reads.Load()}, nil
}

// work takes jobs until every one is done.
func (sc *scanner) work() {
	sc.mu.Lock()
	for {
		for len(sc.stack) == 0 && sc.outstanding > 0 {
			sc.cond.Wait()
		}
		if sc.outstanding == 0 {
			sc.mu.Unlock()
			return
		}
		j := sc.stack[len(sc.stack)-1]
		sc.stack = sc.stack[:len(sc.stack)-1]
		failed := sc.err != nil
		sc.mu.Unlock()
		if failed || sc.ctx.Err() != nil {
			sc.fail(sc.ctx.Err())
			j.pfd.release()
		} else {
			sc.run(j)
		}
		sc.mu.Lock()
		sc.outstanding--
		if sc.outstanding == 0 {
			sc.cond.Broadcast()
		}
	}
}

// run opens job j's directory and walks it.
func (sc *scanner) run(j *dirJob) {
	sc.s.at("save-open-dir", j.rel)
	fd, err := openDir(j.pfd.fd, j.name, true)
	j.pfd.release()
	p := j.parent
	if err != nil {
		e := &p.entries[j.idx]
		switch {
		case errors.Is(err, unix.ENOENT):
			e.kind = 0 // gone
		case errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM):
			sc.skip(e, j.rel, "unreadable")
		case errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR):
			sc.skip(e, j.rel, "changed while saving")
		default:
			sc.fail(&pathError{"open", j.rel, err})
			return
		}
		sc.done(p)
		return
	}
	var ct *tree
	if j.cached != nil && j.cached.kind == kindDir {
		ct, _ = sc.s.loadTree(j.cached.hash) // no cache when unreadable
	}
	sc.walk(fd, j.rel, j.depth, p, j.idx, ct, j.listed && ct != nil)
}

func (sc *scanner) fail(err error) {
	if err == nil {
		return
	}
	sc.mu.Lock()
	if sc.err == nil {
		sc.err = err
	}
	sc.mu.Unlock()
}

func (sc *scanner) failed() bool {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return sc.err != nil
}

func (sc *scanner) markRacy(rel string) {
	sc.mu.Lock()
	sc.racy[rel] = true
	sc.mu.Unlock()
}

func (sc *scanner) skip(e *entry, rel, reason string) {
	*e = entry{name: e.name, kind: kindSkipped, mode: e.mode, mtime: e.mtime, target: reason}
	sc.mu.Lock()
	sc.skipped = append(sc.skipped, Skip{Path: rel, Reason: reason})
	sc.mu.Unlock()
}

// walk walks the directory fd, entry idx of parent (nil: the root): it
// lists it — or, when listed, takes the names of cached, its tree in the
// stat cache (the directory is unchanged since: same ctime, mtime and
// inode, and any entry made, removed or renamed in it moves its ctime) —
// stats every entry, reads the files the cache does not vouch for, and
// pushes its subdirectories. fd is closed once they are all open.
func (sc *scanner) walk(fd int, rel string, depth int, parent *dirNode, idx int, cached *tree, listed bool) *dirNode {
	n := &dirNode{parent: parent, idx: idx, cached: cached}
	var names []string
	if listed {
		names = make([]string, len(cached.entries))
		for i := range cached.entries {
			names[i] = cached.entries[i].name
		}
	} else {
		var err error
		if names, err = readNames(fd); err != nil {
			unix.Close(fd)
			sc.fail(&pathError{"read", rel, err})
			return n
		}
		slices.Sort(names)
	}
	trusted := false
	if cached != nil {
		sc.s.treeMu.Lock()
		trusted = cached.present
		sc.s.treeMu.Unlock()
	}
	n.entries = make([]entry, 0, len(names))
	var jobs []*dirJob
	var files, size int64
	for _, name := range names {
		crel := join(rel, name)
		if sc.s.exclude[crel] {
			continue
		}
		var st unix.Stat_t
		if err := fstatat(fd, name, &st); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue // gone since the listing
			}
			unix.Close(fd)
			sc.fail(&pathError{"stat", crel, err})
			return n
		}
		if isWriterTemp(name) && uint32(st.Mode)&unix.S_IFMT == unix.S_IFREG {
			continue // a write in flight; anything else of that name is user data
		}
		e := statEntry(name, &st)
		ce := cached.find(name)
		switch uint32(st.Mode) & unix.S_IFMT {
		case unix.S_IFREG:
			if !sc.file(fd, crel, &e, ce, trusted) {
				if sc.failed() {
					unix.Close(fd)
					return n
				}
				continue
			}
			if e.kind == kindFile {
				files++
				size += e.size
				// Hashing only, the walk learns whether each content is
				// stored, so that its trees can serve the next save as
				// stat cache (Store.scanLive).
				if sc.w == nil && !n.absent && !(trusted && ce != nil && ce.kind == kindFile && ce.hash == e.hash) && !sc.s.hasObject(e.hash) {
					n.absent = true
				}
			}
		case unix.S_IFDIR:
			if depth+1 > maxDepth {
				sc.skip(&e, crel, "too deep")
				break
			}
			if e.ctime >= sc.start-sc.s.racy {
				sc.markRacy(crel)
			}
			same := ce != nil && ce.kind == kindDir && ce.ctime == e.ctime && ce.mtime == e.mtime && ce.ino == e.ino &&
				!sc.cache.isRacy(crel, ce, sc.s.racy)
			jobs = append(jobs, &dirJob{parent: n, idx: len(n.entries), name: name, rel: crel, depth: depth + 1, cached: ce, listed: same})
		case unix.S_IFLNK:
			target, err := readlinkat(fd, name)
			switch {
			case err == nil && target != "":
				e.target = target
				e.size = int64(len(target))
			case errors.Is(err, unix.ENOENT):
				continue
			default:
				sc.skip(&e, crel, "changed while saving")
			}
		default:
			sc.skip(&e, crel, specialKind(uint32(st.Mode)))
		}
		n.entries = append(n.entries, e)
	}
	n.files.Store(files)
	n.size.Store(size)
	n.pending.Store(int32(len(jobs)) + 1) // + this walk
	if len(jobs) == 0 {
		unix.Close(fd)
	} else {
		d := &dirFD{fd: fd}
		d.refs.Store(int32(len(jobs)))
		sc.mu.Lock()
		for i := len(jobs) - 1; i >= 0; i-- { // the first on top
			jobs[i].pfd = d
			sc.stack = append(sc.stack, jobs[i])
		}
		sc.outstanding += len(jobs)
		sc.cond.Broadcast()
		sc.mu.Unlock()
	}
	sc.done(n)
	return n
}

// done records that one of n's subdirectories (or n's own walk) is done;
// the last makes n's tree, gives its hash to n's entry in its parent, and
// so on up.
func (sc *scanner) done(n *dirNode) {
	for n != nil && n.pending.Add(-1) == 0 {
		t := sc.finish(n)
		p := n.parent
		if p == nil {
			sc.mu.Lock()
			sc.rootTree = t
			sc.mu.Unlock()
			return
		}
		p.entries[n.idx].hash = t.hash
		p.files.Add(n.files.Load())
		p.size.Add(n.size.Load())
		n = p
	}
}

// finish makes n's tree: the cached one when nothing differs, else a new
// encoding; saving, a new tree is written at once (its fsync overlaps the
// rest of the walk; if the save makes no checkpoint, Prune removes it).
func (sc *scanner) finish(n *dirNode) *tree {
	entries := n.entries
	if slices.ContainsFunc(entries, func(e entry) bool { return e.kind == 0 }) {
		entries = slices.DeleteFunc(entries, func(e entry) bool { return e.kind == 0 })
	}
	var t *tree
	if n.cached != nil && sameEntries(entries, n.cached.entries) {
		t = n.cached
	} else {
		t = encodeTree(entries)
		sc.s.treeMu.Lock()
		if known := sc.s.trees[t.hash]; known != nil {
			t = known
		}
		sc.s.treeMu.Unlock()
	}
	if sc.w == nil && !n.absent {
		sc.s.treeMu.Lock()
		t.present = true
		sc.s.treeMu.Unlock()
	}
	if sc.w != nil {
		// Saving, every file's content was trusted, found or written.
		sc.s.treeMu.Lock()
		t.present = true
		stored := t.stored
		sc.s.treeMu.Unlock()
		if !stored && sc.w.claim(t.hash) {
			if err := sc.w.putBytes(t.hash, t.encoded()); err != nil {
				sc.fail(err)
			}
		}
	}
	sc.mu.Lock()
	sc.trees[t.hash] = t
	sc.mu.Unlock()
	return t
}

var direntPool = sync.Pool{New: func() any { b := make([]byte, 16<<10); return &b }}

// readNames lists the directory fd (read from its start, once) with
// getdents, without the stat or allocations of os.File.ReadDir.
func readNames(fd int) ([]string, error) {
	bp := direntPool.Get().(*[]byte)
	defer direntPool.Put(bp)
	var names []string
	for {
		n, err := unix.ReadDirent(fd, *bp)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n <= 0 {
			return names, nil
		}
		_, _, names = unix.ParseDirent((*bp)[:n], -1, names)
	}
}

// file fills e's hash: from the stat cache when its entry ce has the same
// stat (and, storing, its object is known to be there or is found there),
// else by reading the file. It
// returns false when the file is gone (or on failure, sc.err).
func (sc *scanner) file(dfd int, rel string, e, ce *entry, trusted bool) bool {
	if ce != nil && ce.kind == kindFile && ce.size == e.size && ce.mtime == e.mtime &&
		ce.ctime == e.ctime && ce.ino == e.ino && ce.mode == e.mode && ce.uid == e.uid && ce.gid == e.gid &&
		!sc.cache.isRacy(rel, ce, sc.s.racy) {
		if sc.w == nil || trusted || sc.w.present(ce.hash) {
			e.hash = ce.hash
			return true
		}
	}
	return sc.read(dfd, rel, e)
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, smallFile); return &b }}

// read reads a regular file once: into memory when small, else copied to
// a temporary object file while hashed, so that what is stored is what
// was hashed even when the file changes meanwhile. The entry takes the
// stat of the open file; it is marked racy when that stat changed during
// the read or lies within racyWindow of the save's start.
func (sc *scanner) read(dfd int, rel string, e *entry) bool {
	name := e.name
	sc.s.at("save-open-file", rel)
	fd, err := openat(dfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY)
	switch {
	case err == nil:
	case errors.Is(err, unix.ENOENT):
		return false
	case errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM):
		sc.skip(e, rel, "unreadable")
		return true
	case errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENXIO) || errors.Is(err, unix.EISDIR):
		sc.skip(e, rel, "changed while saving")
		return true
	default:
		sc.fail(&pathError{"open", rel, err})
		return false
	}
	defer unix.Close(fd)
	sc.reads.Add(1)
	var st0 unix.Stat_t
	if err := unix.Fstat(fd, &st0); err != nil {
		sc.fail(&pathError{"stat", rel, err})
		return false
	}
	if uint32(st0.Mode)&unix.S_IFMT != unix.S_IFREG {
		sc.skip(e, rel, "changed while saving")
		return true
	}
	*e = statEntry(name, &st0)

	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	buf := *bp
	h := sha256.New()
	n, err := readFull(fd, buf)
	var total int64
	var tmp *os.File
	if err == nil && n == len(buf) {
		// Large: stream. The buffer is the first chunk; n == 0 at the end.
		if sc.w != nil {
			if tmp, err = sc.w.temp(); err != nil {
				sc.fail(err)
				return false
			}
		}
		for err == nil && n > 0 {
			h.Write(buf[:n])
			total += int64(n)
			if tmp != nil {
				if _, err = tmp.Write(buf[:n]); err != nil {
					break
				}
			}
			n, err = readFull(fd, buf)
		}
	} else if err == nil {
		h.Write(buf[:n])
		total = int64(n)
	}
	if err != nil {
		if tmp != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
		sc.fail(&pathError{"read", rel, bare(err)})
		return false
	}
	var sum hash
	h.Sum(sum[:0])
	e.hash = sum
	e.size = total
	var st1 unix.Stat_t
	if unix.Fstat(fd, &st1) != nil || st1.Ctim != st0.Ctim || st1.Mtim != st0.Mtim || st1.Size != st0.Size ||
		e.ctime >= sc.start-sc.s.racy {
		sc.markRacy(rel)
	}
	if sc.w == nil {
		return true
	}
	if tmp != nil {
		if sc.w.claim(sum) {
			sc.w.finish(tmp, sum, total)
		} else {
			tmp.Close()
			os.Remove(tmp.Name())
		}
		return true
	}
	if sc.w.claim(sum) {
		if err := sc.w.putBytes(sum, buf[:n]); err != nil {
			sc.fail(err)
			return false
		}
	}
	return true
}

// readFull reads until buf is full or the file ends; n < len(buf) means
// the end was reached.
func readFull(fd int, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := unix.Read(fd, buf[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return n, err
		}
		if m == 0 {
			break
		}
		n += m
	}
	return n, nil
}

// statEntry is the entry of a stat, without kind-specific content. Only
// regular files and directories keep the fields of the stat cache (ctime,
// inode); a directory's size is meaningless and left out.
func statEntry(name string, st *unix.Stat_t) entry {
	e := entry{name: name, uid: st.Uid, gid: st.Gid, mtime: st.Mtim.Nano()}
	perm := uint32(st.Mode) & 0o777
	switch uint32(st.Mode) & unix.S_IFMT {
	case unix.S_IFREG:
		e.kind = kindFile
		e.mode = perm
		e.size, e.ctime, e.ino = st.Size, st.Ctim.Nano(), uint64(st.Ino)
	case unix.S_IFDIR:
		e.kind = kindDir
		e.mode = perm | uint32(st.Mode)&(unix.S_ISVTX|unix.S_ISGID)
		e.ctime, e.ino = st.Ctim.Nano(), uint64(st.Ino)
	case unix.S_IFLNK:
		e.kind = kindSymlink
		e.mode = perm
	default:
		e.kind = kindSkipped
		e.mode = perm
	}
	return e
}

func specialKind(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFIFO:
		return "fifo"
	case unix.S_IFSOCK:
		return "socket"
	case unix.S_IFCHR, unix.S_IFBLK:
		return "device"
	}
	return "special file"
}

// The system calls, retried on EINTR, never following a final symlink.

func openDir(dfd int, name string, noFollow bool) (int, error) {
	flags := unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC
	if noFollow {
		flags |= unix.O_NOFOLLOW
	}
	for {
		fd, err := unix.Openat(dfd, name, flags, 0)
		if err != unix.EINTR {
			return fd, err
		}
	}
}

func openat(dfd int, name string, flags int) (int, error) {
	for {
		fd, err := unix.Openat(dfd, name, flags|unix.O_CLOEXEC, 0)
		if err != unix.EINTR {
			return fd, err
		}
	}
}

func fstatat(dfd int, name string, st *unix.Stat_t) error {
	for {
		err := unix.Fstatat(dfd, name, st, unix.AT_SYMLINK_NOFOLLOW)
		if err != unix.EINTR {
			return err
		}
	}
}

func readlinkat(dfd int, name string) (string, error) {
	for size := 256; ; size *= 2 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(dfd, name, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return "", err
		}
		if n < size || size >= maxTargetLen {
			return string(buf[:n]), nil
		}
	}
}
