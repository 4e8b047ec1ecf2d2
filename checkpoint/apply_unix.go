//go:build linux || darwin || freebsd

package checkpoint

import (
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"os"
	"slices"

	"golang.org/x/sys/unix"
)

// applier makes a tree on disk what a checkpoint's tree says. Every
// operation is relative to a directory descriptor opened with O_NOFOLLOW
// from its parent's, starting at the root: no path is ever resolved
// through a symlink, so nothing outside the root can be written, chmod'ed
// or removed, whatever the tree holds or becomes meanwhile. Files and
// symlinks are made under a temporary name and renamed over their place.
type applier struct {
	s      *Store
	ctx    context.Context
	locker Locker
	blobs  map[hash][]byte // checked contents, by hash; others are read and checked as written
	racy   map[string]bool // paths whose content the live walk could not vouch for
	root   bool            // running as root: owners are restored
	// guard: a path that is no longer what the live walk found is left as
	// it is (kept), not overwritten or removed (Restore; see changedSince).
	guard bool
	kept  []string
	// linked: the hard-linked inodes whose ctime the restore itself moved
	// (it unlinked, or renamed over, one of their names): their other
	// names are compared without it.
	linked map[devIno]bool
}

type devIno struct{ dev, ino uint64 }

// unlinking notes, before the restore unlinks name of pfd or renames
// over it, the inode there when another name shares it.
func (a *applier) unlinking(pfd int, name string) {
	var st unix.Stat_t
	if !a.guard || fstatat(pfd, name, &st) != nil || uint32(st.Mode)&unix.S_IFMT != unix.S_IFREG || st.Nlink < 2 {
		return
	}
	if a.linked == nil {
		a.linked = map[devIno]bool{}
	}
	a.linked[devIno{uint64(st.Dev), uint64(st.Ino)}] = true
}

// errKept says that a path was left as it is: another process changed it
// after the live walk (see changedSince). It stops only that path.
var errKept = errors.New("changed during the restore")

// keep records rel as left as it is.
func (a *applier) keep(rel string) error {
	a.kept = append(a.kept, rel)
	return errKept
}

// changedSince reports, for a guarding applier, whether name in the
// directory pfd is no longer what the live walk found there (le; nil:
// nothing): a regular file written, made or replaced since, or anything
// made where the walk found nothing. The walk is what the undo checkpoint
// holds; the file tools of this process wait for the restore, but a
// writer the locks do not exclude (a write through another replica's
// channel, a command line restore beside a server) may have written since
// — overwriting or removing that would lose it with no checkpoint holding
// it. Called under the path's lock. Directories and symlinks hold no
// bytes of their own: only their kind is compared. What the walk skipped
// (too deep, unreadable, special) it could not vouch for, and no
// checkpoint holds: it is replaced or removed as ever.
func (a *applier) changedSince(pfd int, name string, le *entry) bool {
	if !a.guard {
		return false
	}
	var st unix.Stat_t
	if err := fstatat(pfd, name, &st); err != nil {
		return false // gone: nothing to lose (an unreadable one fails the write)
	}
	switch {
	case le == nil:
		return true
	case le.kind == kindSkipped:
		return false
	}
	now := statEntry(name, &st)
	if now.kind != le.kind {
		return true
	}
	if now.kind != kindFile {
		return false
	}
	if a.linked[devIno{uint64(st.Dev), uint64(st.Ino)}] {
		// Its ctime moved with the restore's own unlink of another name.
		return le.size != st.Size || le.mtime != st.Mtim.Nano() || le.ino != uint64(st.Ino)
	}
	return !sameStat(le, &st)
}

// racyChanged reports, for a guarding applier, whether the file rel (name
// of pfd), which the walk found racy (its stat cannot vouch for a write
// in the same clock tick as the walk's read), no longer holds what the
// walk read. Called under the path's lock, after changedSince.
func (a *applier) racyChanged(pfd int, name, rel string, le *entry) bool {
	if !a.guard || !a.racy[rel] || le == nil || le.kind != kindFile {
		return false
	}
	fd, err := openat(pfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY)
	if err != nil {
		return false // gone, or not a file: changedSince judged it
	}
	defer unix.Close(fd)
	return !hasContent(fd, le)
}

// sameStat reports whether the file's stat is still the walked entry's.
func sameStat(le *entry, st *unix.Stat_t) bool {
	return le.size == st.Size && le.mtime == st.Mtim.Nano() && le.ctime == st.Ctim.Nano() && le.ino == uint64(st.Ino)
}

// run applies target to the directory root; live is the tree that scan
// found there (nil: an empty directory), which saves reading and
// rewriting what is the same.
func (a *applier) run(root string, target, live *tree) error {
	a.root = os.Geteuid() == 0
	fd, err := openDir(unix.AT_FDCWD, root, false)
	if err != nil {
		return errorf("open the root: %v", bare(err))
	}
	f := os.NewFile(uintptr(fd), ".")
	defer f.Close()
	return a.dir(fd, ".", target, live)
}

func (a *applier) lock(rel string) (func(), error) {
	if a.locker == nil {
		return func() {}, nil
	}
	unlock, err := a.locker.Lock(a.ctx, rel)
	if err != nil {
		return nil, &pathError{"lock", rel, err}
	}
	return unlock, nil
}

// dir applies the tree t to the directory fd; lt is what scan found there.
func (a *applier) dir(fd int, rel string, t, lt *tree) error {
	if lt != nil && lt.hash == t.hash {
		return nil // the same entries, down to the inodes and times
	}
	if err := a.ctx.Err(); err != nil {
		return err
	}
	have, err := readNames(fd)
	if err != nil {
		return &pathError{"read", rel, err}
	}
	slices.Sort(have)
	exists := func(name string) bool { _, ok := slices.BinarySearch(have, name); return ok }
	for _, name := range have {
		crel := join(rel, name)
		if t.find(name) != nil || a.s.exclude[crel] || writerTempAt(fd, name) {
			continue
		}
		if err := a.remove(fd, name, crel, lt.find(name)); err != nil && !errors.Is(err, errKept) {
			return err
		}
	}
	for i := range t.entries {
		e := &t.entries[i]
		crel := join(rel, e.name)
		if a.s.exclude[crel] {
			continue
		}
		le := lt.find(e.name)
		// A name the listing did not show is made without a look first
		// (one that appears meanwhile is replaced all the same).
		there := exists(e.name)
		var err error
		switch e.kind {
		case kindDir:
			err = a.subdir(fd, crel, e, le, there)
		case kindFile:
			if !there {
				err = a.writeFile(fd, crel, e, le)
			} else {
				err = a.file(fd, crel, e, le)
			}
		case kindSymlink:
			err = a.symlink(fd, crel, e, le, there)
		}
		if err != nil && !errors.Is(err, errKept) {
			return err
		}
	}
	return nil
}

func (a *applier) subdir(pfd int, rel string, e, le *entry, there bool) error {
	if a.guard && le != nil && le.kind == kindSkipped {
		// The walk vouches for nothing below (it skipped the directory:
		// unreadable, or changed while saving), and no checkpoint holds
		// it: restored as ever.
		a.guard = false
		defer func() { a.guard = true }()
	}
	var st unix.Stat_t
	existed := false
	if there {
		err := fstatat(pfd, e.name, &st)
		existed = err == nil && uint32(st.Mode)&unix.S_IFMT == unix.S_IFDIR
		if err == nil && !existed {
			if err := a.remove(pfd, e.name, rel, le); err != nil {
				return err
			}
		}
	}
	if !existed {
		if err := unix.Mkdirat(pfd, e.name, 0o700); err != nil {
			if !there && errors.Is(err, unix.EEXIST) {
				return a.subdir(pfd, rel, e, le, true) // made meanwhile
			}
			return &pathError{"mkdir", rel, err}
		}
	}
	a.s.at("restore-open-dir", rel)
	fd, err := openDir(pfd, e.name, true)
	if err != nil {
		return &pathError{"open", rel, err} // replaced since the stat: changed during the restore
	}
	f := os.NewFile(uintptr(fd), rel)
	defer f.Close()
	if err := unix.Fstat(fd, &st); err != nil {
		return &pathError{"stat", rel, err}
	}
	if !a.root && uint32(st.Mode)&0o700 != 0o700 {
		// A directory the agent made read-only: writable while it is filled.
		if err := unix.Fchmod(fd, uint32(st.Mode)&0o3777|0o700); err != nil {
			return &pathError{"chmod", rel, err}
		}
		st.Mode |= 0o700
	}
	var lt *tree
	if existed && le != nil && le.kind == kindDir {
		lt = a.known(le.hash)
	}
	t := a.known(e.hash)
	if t == nil {
		return errorf("%w: tree of %s not loaded", ErrCorrupt, quote(rel))
	}
	if err := a.dir(fd, rel, t, lt); err != nil {
		return err
	}
	// Metadata last: filling the directory changed its mtime.
	if mode := e.mode & modeMask(kindDir); uint32(st.Mode)&0o7777 != mode {
		if err := unix.Fchmod(fd, mode); err != nil {
			return &pathError{"chmod", rel, err}
		}
	}
	if a.root && (st.Uid != e.uid || st.Gid != e.gid) {
		if err := unix.Fchown(fd, int(e.uid), int(e.gid)); err != nil {
			return &pathError{"chown", rel, err}
		}
	}
	if err := unix.Fstat(fd, &st); err != nil {
		return &pathError{"stat", rel, err}
	}
	if st.Mtim.Nano() != e.mtime {
		return a.setTimes(pfd, e.name, rel, e.mtime)
	}
	return nil
}

// known is a tree already loaded (Restore and Export load the whole target
// tree, and the scan's trees, before applying).
func (a *applier) known(h hash) *tree {
	a.s.treeMu.Lock()
	defer a.s.treeMu.Unlock()
	return a.s.trees[h]
}

func (a *applier) file(pfd int, rel string, e, le *entry) error {
	var st unix.Stat_t
	err := fstatat(pfd, e.name, &st)
	if err == nil && uint32(st.Mode)&unix.S_IFMT == unix.S_IFREG && le != nil && le.kind == kindFile &&
		le.hash == e.hash && le.size == st.Size && le.mtime == st.Mtim.Nano() &&
		le.ctime == st.Ctim.Nano() && le.ino == uint64(st.Ino) {
		// The same content as scanned: only metadata may differ. Fixed in
		// place unless another name shares the inode (a hard link, maybe
		// from outside the root): then rewritten like a changed file. A
		// racy file (its stat cannot vouch for a write in the same clock
		// tick as the scan's read) is read again and compared first:
		// cheaper than a rewrite, which a restore just after the agent's
		// writes (or another restore) would otherwise pay for each.
		if st.Nlink == 1 {
			return a.fixFile(pfd, rel, e, &st, a.racy[rel])
		}
	}
	return a.writeFile(pfd, rel, e, le)
}

// fixFile sets the metadata of a file whose content is e's; with verify,
// it reads the file first and rewrites it when the content differs.
func (a *applier) fixFile(pfd int, rel string, e *entry, st *unix.Stat_t, verify bool) error {
	chmod := uint32(st.Mode)&0o7777 != e.mode&modeMask(kindFile)
	chown := a.root && (st.Uid != e.uid || st.Gid != e.gid)
	touch := st.Mtim.Nano() != e.mtime
	if !chmod && !chown && !touch && !verify {
		return nil
	}
	unlock, err := a.lock(rel)
	if err != nil {
		return err
	}
	defer unlock()
	a.s.at("restore-fix-file", rel)
	fd, err := openat(pfd, e.name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY)
	if err != nil {
		if a.changedSince(pfd, e.name, nil) {
			return a.keep(rel) // something else stands there now
		}
		return a.writeFileLocked(pfd, rel, e, nil)
	}
	var now unix.Stat_t
	if unix.Fstat(fd, &now) != nil || now.Ino != st.Ino || uint32(now.Mode)&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		if a.changedSince(pfd, e.name, nil) {
			return a.keep(rel) // replaced since the walk
		}
		return a.writeFileLocked(pfd, rel, e, nil)
	}
	// st was the walk's stat (file checked it): a file whose stat moved
	// since, or whose bytes are no longer the walk's (a racy one), was
	// written after the walk.
	differs := verify && !hasContent(fd, e)
	if a.guard && (differs || !sameStat(&entry{size: st.Size, mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano(), ino: uint64(st.Ino)}, &now)) {
		unix.Close(fd)
		return a.keep(rel)
	}
	if now.Nlink != 1 || differs {
		unix.Close(fd)
		return a.writeFileLocked(pfd, rel, e, nil)
	}
	if chown {
		err = unix.Fchown(fd, int(e.uid), int(e.gid))
	}
	if chmod && err == nil {
		err = unix.Fchmod(fd, e.mode&modeMask(kindFile))
	}
	unix.Close(fd)
	if err != nil {
		return &pathError{"chmod", rel, err}
	}
	if touch {
		return a.setTimes(pfd, e.name, rel, e.mtime)
	}
	return nil
}

// hasContent reports whether the file fd holds e's content: its size, and
// bytes that hash to e's hash.
func hasContent(fd int, e *entry) bool {
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	h := sha256.New()
	var total int64
	for {
		n, err := readFull(fd, *bp)
		if err != nil {
			return false
		}
		h.Write((*bp)[:n])
		total += int64(n)
		if total > e.size {
			return false
		}
		if n < len(*bp) {
			break
		}
	}
	var sum hash
	return total == e.size && [sha256.Size]byte(h.Sum(sum[:0])) == e.hash
}

// writeFile writes e's content over rel, le being what the live walk
// found there.
func (a *applier) writeFile(pfd int, rel string, e, le *entry) error {
	unlock, err := a.lock(rel)
	if err != nil {
		return err
	}
	defer unlock()
	if a.changedSince(pfd, e.name, le) || a.racyChanged(pfd, e.name, rel, le) {
		return a.keep(rel)
	}
	return a.writeFileLocked(pfd, rel, e, le)
}

// writeFileLocked writes e's content to a temporary file in the directory
// pfd, sets its owner, mode and times, and renames it over e's name (after
// removing a directory that stands there).
func (a *applier) writeFileLocked(pfd int, rel string, e, le *entry) (err error) {
	tmp := writerTempName()
	var fd int
	for {
		fd, err = unix.Openat(pfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, tempMode)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return &pathError{"create", rel, err}
	}
	err = a.content(fd, e)
	if err == nil && a.root && (e.uid != 0 || e.gid != 0) {
		err = unix.Fchown(fd, int(e.uid), int(e.gid))
	}
	if err == nil {
		err = unix.Fchmod(fd, e.mode&modeMask(kindFile)) // always: a umask may have taken bits from tempMode
	}
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	if err == nil {
		err = a.setTimes(pfd, tmp, rel, e.mtime)
	}
	if err == nil {
		err = a.replace(pfd, tmp, e.name, rel, le)
	}
	if err != nil {
		unix.Unlinkat(pfd, tmp, 0)
		var pe *pathError
		if !errors.As(err, &pe) && !errors.Is(err, ErrCorrupt) && !errors.Is(err, errKept) {
			err = &pathError{"write", rel, bare(err)}
		}
		return err
	}
	return nil
}

// tempMode is the mode a temporary file is made with, until its own.
const tempMode = 0o600

// content writes e's checked content to fd.
func (a *applier) content(fd int, e *entry) error {
	if b, ok := a.blobs[e.hash]; ok {
		return writeAll(fd, b)
	}
	r, err := a.s.openObject(e.hash, e.size)
	if err != nil {
		return err
	}
	defer r.Close()
	buf := make([]byte, 256<<10)
	for {
		n, err := r.Read(buf)
		if werr := writeAll(fd, buf[:n]); werr != nil {
			return werr
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

func writeAll(fd int, b []byte) error {
	for len(b) > 0 {
		n, err := unix.Write(fd, b)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// replace renames tmp over name in the directory pfd, removing first a
// directory that stands there (a rename cannot replace one by a file); le
// is what the live walk found there.
func (a *applier) replace(pfd int, tmp, name, rel string, le *entry) error {
	a.unlinking(pfd, name)
	err := unix.Renameat(pfd, tmp, pfd, name)
	if errors.Is(err, unix.EISDIR) || errors.Is(err, unix.ENOTEMPTY) || errors.Is(err, unix.EEXIST) {
		if err = a.removeDir(pfd, name, rel, le); err == nil {
			err = unix.Renameat(pfd, tmp, pfd, name)
		}
	}
	if err != nil {
		var pe *pathError
		if errors.As(err, &pe) || errors.Is(err, errKept) {
			return err
		}
		return &pathError{"rename", rel, err}
	}
	return nil
}

func (a *applier) symlink(pfd int, rel string, e, le *entry, there bool) error {
	var st unix.Stat_t
	if there && fstatat(pfd, e.name, &st) == nil && uint32(st.Mode)&unix.S_IFMT == unix.S_IFLNK {
		if t, err := readlinkat(pfd, e.name); err == nil && t == e.target {
			if a.root && (st.Uid != e.uid || st.Gid != e.gid) {
				if err := unix.Fchownat(pfd, e.name, int(e.uid), int(e.gid), unix.AT_SYMLINK_NOFOLLOW); err != nil {
					return &pathError{"chown", rel, err}
				}
			}
			if st.Mtim.Nano() != e.mtime {
				return a.setTimes(pfd, e.name, rel, e.mtime)
			}
			return nil
		}
	}
	unlock, err := a.lock(rel)
	if err != nil {
		return err
	}
	defer unlock()
	if there && a.changedSince(pfd, e.name, le) {
		return a.keep(rel)
	}
	tmp := writerTempName()
	if err := unix.Symlinkat(e.target, pfd, tmp); err != nil {
		return &pathError{"symlink", rel, err}
	}
	if a.root {
		err = unix.Fchownat(pfd, tmp, int(e.uid), int(e.gid), unix.AT_SYMLINK_NOFOLLOW)
	}
	if err == nil {
		err = a.setTimes(pfd, tmp, rel, e.mtime)
	}
	if err == nil {
		err = a.replace(pfd, tmp, e.name, rel, le)
	}
	if err != nil {
		unix.Unlinkat(pfd, tmp, 0)
		return err
	}
	return nil
}

// setTimes sets the access and modification times of name in pfd (the
// link itself for a symlink) to mtime.
func (a *applier) setTimes(pfd int, name, rel string, mtime int64) error {
	ts := unix.NsecToTimespec(mtime)
	if err := unix.UtimesNanoAt(pfd, name, []unix.Timespec{ts, ts}, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return &pathError{"set times of", rel, err}
	}
	return nil
}

// writerTempAt reports whether name in the directory fd is a writer's
// temporary file: a regular file named by writerTempName, which Restore
// leaves alone (a write in flight). A directory, symlink or anything else
// of that name is user data, restored like any entry.
func writerTempAt(fd int, name string) bool {
	if !isWriterTemp(name) {
		return false
	}
	var st unix.Stat_t
	return fstatat(fd, name, &st) == nil && uint32(st.Mode)&unix.S_IFMT == unix.S_IFREG
}

// remove removes name from the directory pfd, with everything below it
// when it is a directory, except excluded paths (and the directories that
// hold them); le is what the live walk found there. A guarding applier
// keeps what changed since the walk (errKept), and the directories that
// hold it.
func (a *applier) remove(pfd int, name, rel string, le *entry) error {
	var st unix.Stat_t
	if err := fstatat(pfd, name, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return &pathError{"stat", rel, err}
	}
	if uint32(st.Mode)&unix.S_IFMT == unix.S_IFDIR {
		if a.guard && le == nil {
			return a.keep(rel) // made since the walk
		}
		return a.removeDir(pfd, name, rel, le)
	}
	unlock, err := a.lock(rel)
	if err != nil {
		return err
	}
	defer unlock()
	if a.changedSince(pfd, name, le) || a.racyChanged(pfd, name, rel, le) {
		return a.keep(rel)
	}
	a.unlinking(pfd, name)
	if err := unix.Unlinkat(pfd, name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		return &pathError{"remove", rel, err}
	}
	return nil
}

// liveTree is the walked tree of the directory entry le (nil: none).
func (a *applier) liveTree(le *entry) *tree {
	if le == nil || le.kind != kindDir {
		return nil
	}
	return a.known(le.hash)
}

// removeDir removes the directory name of pfd and what it holds; le is
// what the walk found there. What the walk skipped (a tree too deep) it
// could not vouch for, and no checkpoint holds: removed as ever, without
// the guard.
func (a *applier) removeDir(pfd int, name, rel string, le *entry) error {
	if a.guard && le != nil && le.kind == kindSkipped {
		a.guard = false
		defer func() { a.guard = true }()
	}
	lt := a.liveTree(le)
	fd, err := openDir(pfd, name, true)
	switch {
	case errors.Is(err, unix.ENOENT):
		return nil
	case errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR):
		return a.remove(pfd, name, rel, nil) // no longer a directory: made since the walk
	case err != nil:
		return &pathError{"open", rel, err}
	}
	f := os.NewFile(uintptr(fd), rel)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err == nil && !a.root && uint32(st.Mode)&0o700 != 0o700 {
		unix.Fchmod(fd, uint32(st.Mode)&0o3777|0o700)
	}
	list, err := readNames(fd)
	if err != nil {
		return &pathError{"read", rel, err}
	}
	excluded, kept := false, false
	for _, n := range list {
		crel := join(rel, n)
		if a.s.exclude[crel] {
			excluded = true
			continue
		}
		if err := a.remove(fd, n, crel, lt.find(n)); errors.Is(err, errKept) {
			kept = true
		} else if err != nil {
			return err
		}
	}
	switch {
	case kept:
		return errKept // what it holds was recorded
	case excluded:
		return nil
	}
	if err := unix.Unlinkat(pfd, name, unix.AT_REMOVEDIR); err != nil && !errors.Is(err, unix.ENOENT) {
		return &pathError{"remove", rel, err}
	}
	return nil
}
