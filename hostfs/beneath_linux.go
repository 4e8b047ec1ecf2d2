package hostfs

import (
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"

	"encoding/binary"
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
	fd, err := openat2Beneath(dir, rel, flags)
	if err != nil {
		return nil, err
	}
	return fdFile(fd, path.Base(rel))
}

// openat2Beneath is openBeneath's open: the descriptor.
func openat2Beneath(dir *os.File, rel string, flags int) (int, error) {
	how := &unix.OpenHow{Flags: uint64(flags | unix.O_RDONLY | unix.O_NONBLOCK | unix.O_CLOEXEC),
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS}
	for {
		fd, err := unix.Openat2(int(dir.Fd()), rel, how)
		switch {
		case err == nil:
			return fd, nil
		case errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN):
			continue
		case errors.Is(err, unix.EXDEV):
			return -1, sandbox.ErrOutsideRoot
		}
		return -1, &os.PathError{Op: "openat2", Path: rel, Err: err}
	}
}

// fdFile is openBeneath's file of descriptor fd, named name: a regular
// file or a directory, else refused (fd closed).
func fdFile(fd int, name string) (fs.File, error) {
	hf := &hostFile{fd: fd, fi: statInfo{name: name}} // one allocation
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
	fd, err := openat2Beneath(m.beneath, rel, unix.O_DIRECTORY)
	if err != nil {
		return nil, sandbox.HostError(name, err)
	}
	return &dirHandle{m: m, name: name, rel: rel, fd: fd}, nil
}

// dirHandle is a directory held open (sandbox.Dir): its files are opened
// by name, relative to it.
type dirHandle struct {
	m         *hostMount
	name, rel string // virtual, and relative to the mount
	fd        int
}

func (d *dirHandle) Close() error {
	if d.fd < 0 {
		return os.ErrClosed
	}
	err := unix.Close(d.fd)
	d.fd = -1
	return err
}

// Open opens entry name as FS.Open opens the directory's path joined with
// it. The entry itself is opened relative to the directory, not followed
// (one component for the kernel to resolve, and no symlink: nothing to
// lead out); a symlink is opened again from the mount's root, beneath it,
// where FS.Open follows it.
func (d *dirHandle) Open(name string) (fs.File, error) {
	if name == "" || name == "." || name == ".." || strings.Contains(name, "/") {
		return nil, &sandbox.PathError{Path: path.Join(d.name, name), Err: sandbox.ErrNotFound}
	}
	var fd int
	var err error
	for {
		fd, err = unix.Openat(d.fd, name, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
		if err != unix.EINTR && err != unix.EAGAIN {
			break
		}
	}
	if err == unix.ELOOP {
		fd, err = openat2Beneath(d.m.beneath, path.Join(d.rel, name), 0)
	}
	var f fs.File
	if err == nil {
		f, err = fdFile(fd, name)
	}
	if err != nil {
		return nil, sandbox.HostError(path.Join(d.name, name), err)
	}
	return f, nil
}

// ReadDir lists the directory, once, with getdents, its names cut from
// one string a batch and the entries in one slice: no allocation an entry.
// Where the file system gives no entry types, an entry is lstat'ed
// relative to the directory.
func (d *dirHandle) ReadDir() ([]fs.DirEntry, error) {
	buf := make([]byte, 8<<10)
	var ents []beneathEntry
	for {
		n, err := unix.Getdents(d.fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, sandbox.HostError(d.name, err)
		}
		if n <= 0 {
			break
		}
		names := string(buf[:n])
		for off := 0; off+19 <= n; {
			reclen := int(binary.NativeEndian.Uint16(buf[off+16:]))
			if reclen < 19 || off+reclen > n {
				return nil, sandbox.HostError(d.name, unix.EIO)
			}
			name := names[off+19 : off+reclen]
			if i := strings.IndexByte(name, 0); i >= 0 {
				name = name[:i]
			}
			typ := buf[off+18]
			off += reclen
			if name == "." || name == ".." || name == "" {
				continue
			}
			if t, ok := entryType(d.fd, name, typ); ok {
				ents = append(ents, beneathEntry{name: name, typ: t, root: d.m.root, dir: d.rel})
			}
		}
	}
	slices.SortFunc(ents, func(a, b beneathEntry) int { return strings.Compare(a.name, b.name) })
	out := make([]fs.DirEntry, len(ents))
	for i := range ents {
		out[i] = &ents[i]
	}
	return out, nil
}

// entryType is the type of entry name of directory dirfd, from getdents'
// d_type; where that is unknown, from an lstat (false: the entry is gone).
func entryType(dirfd int, name string, typ byte) (fs.FileMode, bool) {
	switch typ {
	case unix.DT_REG:
		return 0, true
	case unix.DT_DIR:
		return fs.ModeDir, true
	case unix.DT_LNK:
		return fs.ModeSymlink, true
	case unix.DT_FIFO:
		return fs.ModeNamedPipe, true
	case unix.DT_SOCK:
		return fs.ModeSocket, true
	case unix.DT_CHR:
		return fs.ModeDevice | fs.ModeCharDevice, true
	case unix.DT_BLK:
		return fs.ModeDevice, true
	}
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return 0, false
	}
	return sandbox.UnixMode(st.Mode).Type(), true
}

// beneathEntry is a directory entry of a dirHandle; its Info lstats it
// through the mount's root.
type beneathEntry struct {
	name string
	typ  fs.FileMode
	root *os.Root
	dir  string // its directory, relative to root
}

func (e *beneathEntry) Name() string               { return e.name }
func (e *beneathEntry) IsDir() bool                { return e.typ.IsDir() }
func (e *beneathEntry) Type() fs.FileMode          { return e.typ }
func (e *beneathEntry) Info() (fs.FileInfo, error) { return e.root.Lstat(path.Join(e.dir, e.name)) }
func (e *beneathEntry) String() string             { return fs.FormatDirEntry(e) }
