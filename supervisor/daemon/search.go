//go:build unix

package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/search"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor/wire"
)

// search runs a grep or glob inside the sandbox, with the very engine the
// server runs elsewhere (package search) over the sandbox's own files, and
// streams the results: the walk and the reads cost system calls here, not
// round trips. A kill (the server's searcher stopped, or gave up) ends it.
func (c *channel) search(id uint32, st *fsStream, req wire.FSRequest) wire.FSEnd {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		st.mu.Lock()
		for !st.closed {
			st.cond.Wait()
		}
		st.mu.Unlock()
		cancel()
	}()
	defer st.stop() // ends the goroutine above once the search is over

	send := func(v any) error {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		if len(b) >= wire.MaxResultBytes {
			return errors.New("a result too large to send")
		}
		if !c.sendData(id, st, append(b, '\n')) {
			return search.ErrStop
		}
		return nil
	}
	var total int
	var err error
	switch {
	case req.Op == wire.OpGrep && req.Grep != nil && req.Grep.Root == req.Path:
		err = search.Grep(ctx, localFS{}, *req.Grep, func(m search.FileMatch) error { return send(m) })
	case req.Op == wire.OpGlob && req.Glob != nil && req.Glob.Root == req.Path:
		total, err = search.Glob(ctx, localFS{}, *req.Glob, func(h search.Hit) error { return send(h) })
	default:
		return wire.FSEnd{Err: "EINVAL", Msg: "a search without its request"}
	}
	st.mu.Lock()
	closed := st.closed
	st.mu.Unlock()
	switch {
	case closed:
		return wire.FSEnd{Err: wire.CodeCancelled}
	case err != nil:
		return searchError(err)
	}
	return wire.FSEnd{Total: total}
}

// searchError is the FSEnd of a search that failed: the root's errno, a
// sandbox sentinel, or the engine's own message (a bad pattern).
func searchError(err error) wire.FSEnd {
	for _, c := range []struct {
		err  error
		code string
	}{{sandbox.ErrNotDir, "ENOTDIR"}, {sandbox.ErrNotFound, "ENOENT"}, {sandbox.ErrPermission, "EACCES"}, {sandbox.ErrNotRegular, wire.CodeNotReg}} {
		if errors.Is(err, c.err) {
			return wire.FSEnd{Err: c.code}
		}
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return fsError(err)
	}
	return wire.FSEnd{Err: "EINVAL", Msg: err.Error()}
}

// localFS is the sandbox's own file system, read-only, as the engine
// reads it: the supervisor's side of a search.
type localFS struct{}

var errReadOnlyFS = errors.New("a search does not write")

func (localFS) Stat(_ context.Context, name string) (fs.FileInfo, error) { return os.Stat(name) }

func (localFS) ReadDir(_ context.Context, name string) ([]fs.DirEntry, error) {
	return os.ReadDir(name) // sorted by name
}

// Open opens a regular file or a directory; the open does not block, so
// a FIFO cannot hang a search. A search opens every file of a tree, so the
// file is a bare descriptor: open, one fstat (kept for Stat), reads,
// close, and no more system calls than that (an *os.File would also try
// the poller on each).
func (localFS) Open(_ context.Context, name string) (fs.File, error) {
	return openAt(unix.AT_FDCWD, name, name)
}

// OpenDir holds a directory open (sandbox.DirOpener): its files are then
// opened by name, relative to it.
func (localFS) OpenDir(_ context.Context, name string) (sandbox.Dir, error) {
	var fd int
	var err error
	for {
		// O_DIRECTORY: anything else is refused, and a FIFO put there
		// since the walk listed a directory cannot block the open.
		fd, err = unix.Open(name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	return localDir{os.NewFile(uintptr(fd), name)}, nil
}

// localDir is a directory a search holds open.
type localDir struct{ f *os.File }

func (d localDir) ReadDir() ([]fs.DirEntry, error) {
	entries, err := d.f.ReadDir(-1)
	slices.SortFunc(entries, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return entries, err
}

func (d localDir) Open(name string) (fs.File, error) {
	vp := path.Join(d.f.Name(), name)
	if name == "" || name == "." || name == ".." || strings.Contains(name, "/") {
		return nil, &fs.PathError{Op: "open", Path: vp, Err: syscall.ENOENT}
	}
	return openAt(int(d.f.Fd()), name, vp)
}

func (d localDir) Close() error { return d.f.Close() }

// openAt is Open of rel relative to directory dirfd; name is the path
// errors give.
func openAt(dirfd int, rel, name string) (fs.File, error) {
	var fd int
	var err error
	for {
		fd, err = unix.Openat(dirfd, rel, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "stat", Path: name, Err: err}
	}
	fi := wire.FSInfo{Mode: uint32(st.Mode), Size: st.Size, MtimeNS: st.Mtim.Nano()}.FileInfo(path.Base(name))
	if !fi.IsDir() && !fi.Mode().IsRegular() {
		unix.Close(fd)
		return nil, &sandbox.PathError{Path: name, Err: sandbox.ErrNotRegular}
	}
	return &rawFile{fd: fd, fi: fi}, nil
}

// rawFile is an open file of a search.
type rawFile struct {
	fd int
	fi fs.FileInfo
}

func (f *rawFile) Stat() (fs.FileInfo, error) { return f.fi, nil }

func (f *rawFile) Read(b []byte) (int, error) {
	for {
		n, err := unix.Read(f.fd, b)
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return 0, err
		case n == 0 && len(b) > 0:
			return 0, io.EOF
		}
		return n, nil
	}
}

func (f *rawFile) Close() error { return unix.Close(f.fd) }

func (localFS) Edit(context.Context, string, sandbox.EditFunc) error { return errReadOnlyFS }
func (localFS) Create(context.Context, string) (io.WriteCloser, error) {
	return nil, errReadOnlyFS
}
func (localFS) Remove(context.Context, string) error { return errReadOnlyFS }

var (
	_ sandbox.FS        = localFS{}
	_ sandbox.DirOpener = localFS{}
)
