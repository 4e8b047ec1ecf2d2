package hostfs

import (
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"

	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// beneathDir opens a mount's directory for openBeneath, through its root
// (the same directory whatever happened to the host path since), or
// returns nil where openat2 does not work (a kernel before 5.6, a seccomp
// filter that refuses it): then every operation goes through os.Root.
func beneathDir(r *os.Root) *os.File {
	d, err := r.Open(".")
	if err != nil {
		return nil
	}
	fd, err := unix.Openat2(int(d.Fd()), ".", &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_BENEATH})
	if err != nil {
		d.Close()
		return nil
	}
	unix.Close(fd)
	return d
}

// openBeneath opens rel (clean, relative) below dir for reading in one
// system call: openat2 with RESOLVE_BENEATH refuses, in the kernel, every
// path that would leave dir (".." above it, absolute symlinks, symlinks
// leading out), as os.Root does with one openat per path component. A
// regular file comes back as a hostFile, a directory as an *os.File;
// anything else is refused (the open is non-blocking: a FIFO cannot hang).
func openBeneath(dir *os.File, rel string, flags int) (fs.File, error) {
	how := &unix.OpenHow{Flags: uint64(flags | unix.O_RDONLY | unix.O_NONBLOCK | unix.O_CLOEXEC),
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS}
	var fd int
	for {
		var err error
		fd, err = unix.Openat2(int(dir.Fd()), rel, how)
		if err == nil {
			break
		}
		if errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN) {
			continue
		}
		if errors.Is(err, unix.EXDEV) {
			return nil, sandbox.ErrOutsideRoot
		}
		return nil, &os.PathError{Op: "openat2", Path: rel, Err: err}
	}
	hf := &hostFile{fd: fd, fi: statInfo{name: path.Base(rel)}} // one allocation
	si := &hf.fi
	if err := unix.Fstat(fd, &si.st); err != nil {
		unix.Close(fd)
		return nil, err
	}
	switch {
	case si.Mode().IsRegular():
		return hf, nil
	case si.IsDir():
		// Named by its descriptor: where the file system gives no entry
		// types, os.File.ReadDir lstats <name>/<entry>, which must reach
		// this directory, not a path relative to the working directory.
		return os.NewFile(uintptr(fd), "/proc/self/fd/"+strconv.Itoa(fd)), nil
	}
	unix.Close(fd)
	return nil, sandbox.ErrNotRegular
}

// hostFile is a regular file opened by openBeneath: reads go straight to
// read(2) and Stat answers from the fstat made at open. os.NewFile would
// cost two more system calls per file (fcntl to learn that the descriptor
// is non-blocking, epoll_ctl to learn that a regular file cannot be polled).
type hostFile struct {
	fd int
	fi statInfo
}

func (f *hostFile) Stat() (fs.FileInfo, error) { return &f.fi, nil }

func (f *hostFile) Read(p []byte) (int, error) {
	if f.fd < 0 {
		return 0, os.ErrClosed
	}
	if len(p) == 0 {
		return 0, nil
	}
	for {
		n, err := unix.Read(f.fd, p)
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return 0, &os.PathError{Op: "read", Path: f.fi.name, Err: err}
		case n == 0:
			return 0, io.EOF
		}
		return n, nil
	}
}

func (f *hostFile) Close() error {
	if f.fd < 0 {
		return os.ErrClosed
	}
	err := unix.Close(f.fd)
	f.fd = -1
	return err
}

// statInfo is the FileInfo of an fstat.
type statInfo struct {
	name string
	st   unix.Stat_t
}

func (s *statInfo) Name() string       { return s.name }
func (s *statInfo) Size() int64        { return s.st.Size }
func (s *statInfo) ModTime() time.Time { return time.Unix(s.st.Mtim.Unix()) }
func (s *statInfo) IsDir() bool        { return s.Mode().IsDir() }
func (s *statInfo) Sys() any           { return &s.st }

func (s *statInfo) Mode() fs.FileMode { return sandbox.UnixMode(s.st.Mode) }

// readDirBeneath is ReadDir through openBeneath. A directory opened in an
// os.Root lstats every entry as it lists them (os.File.ReadDir cannot stat
// lazily by path there); this one lists with getdents only, and an entry's
// Info, when asked for, lstats it through the root.
func readDirBeneath(m *hostMount, name, rel string) ([]fs.DirEntry, error) {
	d, err := openDirBeneath(m, name, rel)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return d.ReadDir()
}

// openDirBeneath opens directory rel of m (virtual path name) through
// openBeneath.
func openDirBeneath(m *hostMount, name, rel string) (*dirHandle, error) {
	f, err := openBeneath(m.beneath, rel, unix.O_DIRECTORY)
	if err != nil {
		return nil, sandbox.HostError(name, err)
	}
	return &dirHandle{m: m, name: name, rel: rel, f: f.(*os.File)}, nil
}

// dirHandle is a directory held open (sandbox.Dir): its files are opened
// by name, relative to it.
type dirHandle struct {
	m         *hostMount
	name, rel string // virtual, and relative to the mount
	f         *os.File
}

func (d *dirHandle) Close() error { return d.f.Close() }

// Open opens entry name as FS.Open opens the directory's path joined with
// it: beneath the directory (one component to resolve); a symlink that
// leads out of the directory is resolved again beneath the mount's root,
// where FS.Open resolves it.
func (d *dirHandle) Open(name string) (fs.File, error) {
	if name == "" || name == "." || name == ".." || strings.Contains(name, "/") {
		return nil, &sandbox.PathError{Path: path.Join(d.name, name), Err: sandbox.ErrNotFound}
	}
	f, err := openBeneath(d.f, name, 0)
	if errors.Is(err, sandbox.ErrOutsideRoot) {
		f, err = openBeneath(d.m.beneath, path.Join(d.rel, name), 0)
	}
	if err != nil {
		return nil, sandbox.HostError(path.Join(d.name, name), err)
	}
	return f, nil
}

func (d *dirHandle) ReadDir() ([]fs.DirEntry, error) {
	entries, err := d.f.ReadDir(-1)
	if err != nil {
		return nil, sandbox.HostError(d.name, err)
	}
	m, rel := d.m, d.rel
	re := make([]rootEntry, len(entries)) // one allocation for all
	for i, e := range entries {
		re[i] = rootEntry{DirEntry: e, root: m.root, dir: rel}
		entries[i] = &re[i]
	}
	slices.SortFunc(entries, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return entries, nil
}

// rootEntry is a directory entry whose Info lstats through the mount's root.
type rootEntry struct {
	fs.DirEntry
	root *os.Root
	dir  string // its directory, relative to root
}

func (e *rootEntry) Info() (fs.FileInfo, error) { return e.root.Lstat(path.Join(e.dir, e.Name())) }
