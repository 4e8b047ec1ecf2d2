package hostfs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/filelock"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// FS is the one place where a virtual path becomes a host file
// operation. Every mapping is opened once as an os.Root and every operation
// goes through it, so ".." and symlinks cannot leave a mapping, whatever the
// path says and whatever changes on disk between two calls (no
// check-then-open). Ancestors of mount points ("/", "/mnt", "/mnt/user-data")
// are read-only directories made up of the mount points below them; every
// other path is outside the sandbox.
type FS struct {
	mounts []*hostMount // longest virtual path first
	locks  *filelock.Locks
	temps  tempSweeper
}

type hostMount struct {
	sandbox.Mount
	root *os.Root
	// beneath is the same directory, for openBeneath (Linux: one openat2 a
	// path instead of one openat a component); nil where that cannot work.
	beneath *os.File
	// lockRoot is the host directory with every symlink resolved: the
	// prefix of the mount's lock keys, so that processes that reach one
	// directory by different paths (a state dir given as D and as a
	// symlink to D, two mounts of one directory or of a directory and its
	// subdirectory) take the same lock for the same file. Keys are names,
	// not inodes: an edit replaces the name by rename, so the file's inode
	// changes with every edit, and two hard links of one file are two files
	// after the first edit of either — each name has its own lock. One
	// directory bind-mounted at two host paths is the case this misses.
	lockRoot string
}

var (
	_ sandbox.FS        = (*FS)(nil)
	_ sandbox.DirOpener = (*FS)(nil)
)

// Open opens every mount's host directory as an os.Root. Mounts may
// not nest. Edits lock their files in locks, keyed by the file's host path
// with every symlink resolved (the host root's as well as those inside the
// mount), so two mounts, two threads or two processes reaching one host
// directory by any path still never lose an update.
func Open(mounts []sandbox.Mount, locks *filelock.Locks) (*FS, error) {
	h := &FS{locks: locks}
	for _, m := range mounts {
		r, err := os.OpenRoot(m.Host)
		if err != nil {
			h.Close()
			return nil, sandbox.HostError(m.Virtual, err)
		}
		h.mounts = append(h.mounts, &hostMount{Mount: m, root: r, beneath: beneathDir(r), lockRoot: canonicalDir(m.Host)})
	}
	sort.Slice(h.mounts, func(i, j int) bool { return len(h.mounts[i].Virtual) > len(h.mounts[j].Virtual) })
	return h, nil
}

// Close closes every root.
func (h *FS) Close() error {
	for _, m := range h.mounts {
		m.root.Close()
		if m.beneath != nil {
			m.beneath.Close()
		}
	}
	return nil
}

// lookup finds the mount holding virtual path name and the path relative to
// its root. synthetic reports an ancestor of mount points.
func (h *FS) lookup(name string) (m *hostMount, rel string, synthetic bool) {
	for _, m := range h.mounts {
		if name == m.Virtual {
			return m, ".", false
		}
		if strings.HasPrefix(name, m.Virtual+"/") {
			return m, name[len(m.Virtual)+1:], false
		}
	}
	for _, m := range h.mounts {
		if sandbox.Within(m.Virtual, name) {
			return nil, "", true
		}
	}
	return nil, "", false
}

// Serves reports whether name lies in one of the mounts (not in a made-up
// ancestor of them): a provider with a file system of its own (a
// container's) sends every other path there.
func (h *FS) Serves(name string) bool {
	m, _, _ := h.lookup(name)
	return m != nil
}

func outside(name string) error { return &sandbox.PathError{Path: name, Err: sandbox.ErrOutsideRoot} }

// Stat follows symlinks that stay inside the mapping.
func (h *FS) Stat(_ context.Context, name string) (fs.FileInfo, error) {
	m, rel, synth := h.lookup(name)
	switch {
	case synth:
		return synthDir(path.Base(name)), nil
	case m == nil:
		return nil, outside(name)
	}
	fi, err := m.root.Stat(rel)
	if err != nil {
		return nil, sandbox.HostError(name, err)
	}
	return fi, nil
}

// ReadDir lists a directory, sorted by name. Entries are not followed.
func (h *FS) ReadDir(_ context.Context, name string) ([]fs.DirEntry, error) {
	m, rel, synth := h.lookup(name)
	switch {
	case synth:
		return h.synthEntries(name), nil
	case m == nil:
		return nil, outside(name)
	}
	if m.beneath != nil {
		return readDirBeneath(m, name, rel)
	}
	f, err := m.root.Open(rel)
	if err != nil {
		return nil, sandbox.HostError(name, err)
	}
	defer f.Close()
	entries, err := f.ReadDir(-1)
	if err != nil {
		return nil, sandbox.HostError(name, err)
	}
	slices.SortFunc(entries, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return entries, nil
}

func (h *FS) synthEntries(name string) []fs.DirEntry {
	seen := map[string]bool{}
	var out []fs.DirEntry
	prefix := strings.TrimSuffix(name, "/") + "/"
	for _, m := range h.mounts {
		if !strings.HasPrefix(m.Virtual, prefix) {
			continue
		}
		child, _, _ := strings.Cut(m.Virtual[len(prefix):], "/")
		if !seen[child] {
			seen[child] = true
			out = append(out, fs.FileInfoToDirEntry(synthDir(child)))
		}
	}
	slices.SortFunc(out, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return out
}

// OpenDir holds a directory open (sandbox.DirOpener), where its mount is
// read through openat2 (Linux); elsewhere, and for the directories made
// up above the mounts, it answers errors.ErrUnsupported.
func (h *FS) OpenDir(_ context.Context, name string) (sandbox.Dir, error) {
	m, rel, synth := h.lookup(name)
	switch {
	case synth || m != nil && m.beneath == nil:
		return nil, errors.ErrUnsupported
	case m == nil:
		return nil, outside(name)
	}
	d, err := openDirBeneath(m, name, rel)
	if err != nil {
		return nil, err
	}
	return d, nil
}

// Open opens a file or directory for reading. Anything else (a FIFO, a
// socket, a device) is refused without blocking: the open is non-blocking,
// so a FIFO with no writer cannot hang the call.
func (h *FS) Open(_ context.Context, name string) (fs.File, error) {
	m, rel, synth := h.lookup(name)
	switch {
	case synth:
		return nil, &sandbox.PathError{Path: name, Err: sandbox.ErrIsDir}
	case m == nil:
		return nil, outside(name)
	}
	if m.beneath != nil {
		f, err := openBeneath(m.beneath, rel, 0)
		return f, sandbox.HostError(name, err)
	}
	f, err := m.root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, sandbox.HostError(name, err)
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() && !fi.IsDir() {
		err = sandbox.ErrNotRegular
	}
	if err != nil {
		f.Close()
		return nil, sandbox.HostError(name, err)
	}
	return f, nil
}

// Edit implements FS.Edit: under the file's lock, read, compute, write a
// temporary file beside it and rename it over the file. A path whose last
// component is a symlink edits the symlink's target (inside the mapping).
func (h *FS) Edit(ctx context.Context, name string, fn sandbox.EditFunc) error {
	m, rel, synth := h.lookup(name)
	switch {
	case synth:
		return &sandbox.PathError{Path: name, Err: sandbox.ErrIsDir}
	case m == nil:
		return outside(name)
	case m.ReadOnly:
		return &sandbox.PathError{Path: name, Err: sandbox.ErrReadOnly}
	}
	real, err := resolveInRoot(m.root, rel)
	if err != nil {
		return sandbox.HostError(name, err)
	}
	if real == "." {
		return &sandbox.PathError{Path: name, Err: sandbox.ErrIsDir}
	}
	unlock, err := h.locks.Lock(ctx, path.Join(m.lockRoot, real))
	if err != nil {
		return err
	}
	defer unlock()

	old, own, exists, err := readForEdit(m.root, real)
	if err != nil {
		return sandbox.HostError(name, err)
	}
	data, err := fn(old, exists)
	if err != nil {
		return err
	}
	if !exists {
		dir := path.Dir(real)
		if err := mkdirInherit(m.root, dir); err != nil {
			return sandbox.HostError(name, err)
		}
		if own, err = ownerOf(m.root, dir, 0o644); err != nil {
			return sandbox.HostError(name, err)
		}
	}
	return sandbox.HostError(name, h.writeAtomic(m.root, real, data, own))
}

// readForEdit opens the file once, without blocking (a FIFO swapped in
// cannot hang the edit), checks on that descriptor that it is a regular
// file of at most EditMaxBytes, and reads it.
func readForEdit(root *os.Root, name string) (data []byte, own owner, exists bool, err error) {
	f, err := root.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, owner{}, false, nil
	}
	if err != nil {
		return nil, owner{}, false, err
	}
	defer f.Close()
	fi, err := f.Stat()
	switch {
	case err != nil:
		return nil, owner{}, false, err
	case fi.IsDir():
		return nil, owner{}, false, sandbox.ErrIsDir
	case !fi.Mode().IsRegular():
		return nil, owner{}, false, sandbox.ErrNotRegular
	case fi.Size() > sandbox.EditMaxBytes:
		return nil, owner{}, false, sandbox.ErrTooLarge
	}
	own = ownerFromInfo(fi, fi.Mode().Perm()|fi.Mode()&fs.ModeSticky) // never setuid/setgid
	data, err = io.ReadAll(io.LimitReader(f, sandbox.EditMaxBytes+1))
	if err == nil && len(data) > sandbox.EditMaxBytes {
		err = sandbox.ErrTooLarge
	}
	return data, own, true, err
}

// owner is who a written file belongs to and its mode. Files keep their
// owner; new files and directories take their parent directory's, so that
// when the server runs as root, files it writes stay writable by the
// unprivileged user that runs the sandbox's commands.
type owner struct {
	uid, gid int
	mode     fs.FileMode
	known    bool
}

func ownerFromInfo(fi fs.FileInfo, mode fs.FileMode) owner {
	uid, gid, ok := fileOwner(fi)
	if !ok {
		return owner{mode: mode}
	}
	return owner{uid: uid, gid: gid, mode: mode, known: true}
}

// ownerOf is the owner of dir, with the given mode.
func ownerOf(root *os.Root, dir string, mode fs.FileMode) (owner, error) {
	fi, err := root.Stat(dir)
	if err != nil {
		return owner{}, err
	}
	return ownerFromInfo(fi, mode), nil
}

// chown gives f its owner when the server may (it runs as root) and needs to.
func (o owner) chown(f *os.File) error {
	if !o.known || os.Geteuid() != 0 || (o.uid == 0 && o.gid == 0) {
		return nil
	}
	return f.Chown(o.uid, o.gid)
}

// mkdirInherit creates dir and its missing parents inside root, each owned
// like its parent.
func mkdirInherit(root *os.Root, dir string) error {
	if dir == "." || dir == "" {
		return nil
	}
	fi, err := root.Stat(dir)
	if err == nil {
		if !fi.IsDir() {
			return sandbox.ErrNotDir
		}
		return nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	parent := path.Dir(dir)
	if err := mkdirInherit(root, parent); err != nil {
		return err
	}
	if err := root.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	own, err := ownerOf(root, parent, 0o755)
	if err != nil || !own.known || os.Geteuid() != 0 || (own.uid == 0 && own.gid == 0) {
		return err
	}
	return root.Lchown(dir, own.uid, own.gid)
}

// writeAtomic writes data to a new file beside name and renames it over
// name: readers see the old content or the new, never a half-written file.
func (h *FS) writeAtomic(root *os.Root, name string, data []byte, own owner) error {
	w, err := h.newAtomicWriter(root, name, own)
	if err != nil {
		return err
	}
	if _, err := w.Write(data); err != nil {
		w.abort()
		return err
	}
	return w.Close()
}

// atomicWriter writes a temporary file and renames it over its target on
// Close. It works in the target's directory opened once, not by path: when
// the directory is moved or replaced by a symlink meanwhile (bash runs
// beside the file tools), the rename — or, when that fails, the removal of
// the temporary file — still happens in the directory the file was
// created in, so a temporary file is never left behind by a write that
// ended. While it is written, the temporary file holds an flock, which
// tells sweepTemps it is alive.
type atomicWriter struct {
	dir       *os.Root
	f         *os.File
	tmp, name string // names in dir
	own       owner
}

// Temporary files are named tempPrefix + 16 hex digits + tempSuffix.
const (
	tempPrefix = ".sandbox-mcp-"
	tempSuffix = ".tmp"
)

func (h *FS) newAtomicWriter(root *os.Root, name string, own owner) (*atomicWriter, error) {
	dir, err := root.OpenRoot(path.Dir(name))
	if err != nil {
		return nil, err
	}
	h.temps.sweep(dir)
	var rnd [8]byte
	rand.Read(rnd[:])
	tmp := tempPrefix + hex.EncodeToString(rnd[:]) + tempSuffix
	f, err := dir.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		dir.Close()
		return nil, err
	}
	filelock.TryLock(f) // where locks work; the age check covers the rest
	return &atomicWriter{dir: dir, f: f, tmp: tmp, name: path.Base(name), own: own}, nil
}

func (w *atomicWriter) Write(p []byte) (int, error) { return w.f.Write(p) }

func (w *atomicWriter) abort() {
	w.f.Close()
	w.dir.Remove(w.tmp)
	w.dir.Close()
}

// Close sets the owner and the mode (the umask does not apply to chmod)
// and renames the file into place.
func (w *atomicWriter) Close() error {
	defer w.dir.Close()
	err := w.own.chown(w.f)
	if err == nil {
		err = w.f.Chmod(w.own.mode)
	}
	if cerr := w.f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = w.dir.Rename(w.tmp, w.name)
	}
	if err != nil {
		w.dir.Remove(w.tmp)
	}
	return err
}

// staleTempAge is how old a temporary file must be before a sweep may
// remove it: far longer than a write takes (a saved bash output is written
// for at most the bash timeout, 600 s), so that where flock tells nothing
// a live one is still safe.
const staleTempAge = 15 * time.Minute

// tempSweeper removes the temporary files that writes which never ended
// (a server killed mid-write) left in a directory, when that directory is
// next written — at most once a minute per directory, and only files old
// enough that nobody holds locked.
type tempSweeper struct {
	mu   sync.Mutex
	last map[[2]uint64]time.Time // directory (dirKey) -> last sweep
}

func (s *tempSweeper) sweep(dir *os.Root) {
	fi, err := dir.Stat(".")
	if err != nil {
		return
	}
	key, ok := dirKey(dir, fi)
	if !ok {
		return
	}
	now := time.Now()
	s.mu.Lock()
	if s.last == nil || len(s.last) > 4096 {
		s.last = map[[2]uint64]time.Time{} // a bound, not a history
	}
	if t, ok := s.last[key]; ok && now.Sub(t) < time.Minute {
		s.mu.Unlock()
		return
	}
	s.last[key] = now
	s.mu.Unlock()
	sweepTemps(dir, now)
}

// sweepTemps removes dir's temporary files older than staleTempAge that no
// writer holds.
func sweepTemps(dir *os.Root, now time.Time) {
	d, err := dir.Open(".")
	if err != nil {
		return
	}
	names, _ := d.Readdirnames(-1)
	d.Close()
	for _, n := range names {
		if !isTempName(n) {
			continue
		}
		fi, err := dir.Lstat(n)
		if err != nil || !fi.Mode().IsRegular() || now.Sub(fi.ModTime()) < staleTempAge {
			continue
		}
		f, err := dir.OpenFile(n, os.O_RDONLY|syscall.O_NONBLOCK|oNoFollow, 0)
		if err != nil {
			continue
		}
		if filelock.TryLock(f) == nil {
			dir.Remove(n)
		}
		f.Close()
	}
}

// isTempName reports whether n is a name newAtomicWriter makes.
func isTempName(n string) bool {
	hexPart, ok := strings.CutPrefix(n, tempPrefix)
	if !ok {
		return false
	}
	if hexPart, ok = strings.CutSuffix(hexPart, tempSuffix); !ok || len(hexPart) != 16 {
		return false
	}
	_, err := hex.DecodeString(hexPart)
	return err == nil && strings.ToLower(hexPart) == hexPart
}

// Create implements FS.Create.
func (h *FS) Create(_ context.Context, name string) (io.WriteCloser, error) {
	m, rel, synth := h.lookup(name)
	switch {
	case synth || rel == ".":
		return nil, &sandbox.PathError{Path: name, Err: sandbox.ErrIsDir}
	case m == nil:
		return nil, outside(name)
	case m.ReadOnly:
		return nil, &sandbox.PathError{Path: name, Err: sandbox.ErrReadOnly}
	}
	dir := path.Dir(rel)
	if err := mkdirInherit(m.root, dir); err != nil {
		return nil, sandbox.HostError(name, err)
	}
	own, err := ownerOf(m.root, dir, 0o644)
	if err != nil {
		return nil, sandbox.HostError(name, err)
	}
	w, err := h.newAtomicWriter(m.root, rel, own)
	if err != nil {
		return nil, sandbox.HostError(name, err)
	}
	return &pathWriter{w: w, name: name}, nil
}

// pathWriter reports errors with the virtual path.
type pathWriter struct {
	w    *atomicWriter
	name string
}

func (p *pathWriter) Write(b []byte) (int, error) {
	n, err := p.w.Write(b)
	return n, sandbox.HostError(p.name, err)
}

func (p *pathWriter) Close() error { return sandbox.HostError(p.name, p.w.Close()) }

// Remove implements FS.Remove.
func (h *FS) Remove(_ context.Context, name string) error {
	m, rel, synth := h.lookup(name)
	switch {
	case synth || rel == ".":
		return &sandbox.PathError{Path: name, Err: sandbox.ErrIsDir}
	case m == nil:
		return outside(name)
	case m.ReadOnly:
		return &sandbox.PathError{Path: name, Err: sandbox.ErrReadOnly}
	}
	return sandbox.HostError(name, m.root.Remove(rel))
}

// canonicalDir is dir absolute with every symlink resolved, or dir as it
// is when that fails (OpenRoot has just opened it, so it rarely does).
func canonicalDir(dir string) string {
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		return real
	}
	return filepath.Clean(dir)
}

// resolveInRoot resolves the symlinks of rel (a clean relative path) inside
// root, the way the kernel would, and returns the path it names. Components
// that do not exist yet are kept as they are. The result is a lock key and
// the path edits write to; os.Root still confines every operation on it.
func resolveInRoot(root *os.Root, rel string) (string, error) {
	var out []string
	todo := strings.Split(rel, "/")
	links, missing := 0, false
	for len(todo) > 0 {
		p := todo[0]
		todo = todo[1:]
		switch p {
		case "", ".":
			continue
		case "..":
			if len(out) == 0 {
				return "", sandbox.ErrOutsideRoot
			}
			out = out[:len(out)-1]
			continue
		}
		cur := path.Join(append(out, p)...)
		if missing {
			out = append(out, p)
			continue
		}
		fi, err := root.Lstat(cur)
		if errors.Is(err, fs.ErrNotExist) {
			missing = true
			out = append(out, p)
			continue
		}
		if err != nil {
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			out = append(out, p)
			continue
		}
		if links++; links > 40 {
			return "", syscall.ELOOP
		}
		target, err := root.Readlink(cur)
		if err != nil {
			return "", err
		}
		if path.IsAbs(target) {
			return "", sandbox.ErrOutsideRoot
		}
		todo = append(strings.Split(target, "/"), todo...)
	}
	if len(out) == 0 {
		return ".", nil
	}
	return path.Join(out...), nil
}

// synthDir is the FileInfo of a made-up directory.
type synthDir string

func (d synthDir) Name() string       { return string(d) }
func (d synthDir) Size() int64        { return 0 }
func (d synthDir) Mode() fs.FileMode  { return fs.ModeDir | 0o555 }
func (d synthDir) ModTime() time.Time { return time.Time{} }
func (d synthDir) IsDir() bool        { return true }
func (d synthDir) Sys() any           { return nil }
