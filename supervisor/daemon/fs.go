//go:build unix

package daemon

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"sync"
	"syscall"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor/wire"
)

// The supervisor's side of the file operations (wire/kinds.go). They run as
// the supervisor's own user, with plain system calls on the sandbox's own
// paths: the sandbox is the confinement. Each runs in a goroutine of its
// own, so that a slow file system never holds up the channel's other
// streams.

// fsStream is one file operation of a channel.
type fsStream struct {
	op     string
	killed sync.Once
	done   chan struct{} // closed when the operation has ended

	mu     sync.Mutex
	cond   *sync.Cond
	closed bool // killed, or the channel ended
	credit int  // read: bytes it may still send
	// write: bytes received and not yet written (at most Window), and the
	// Commit once it came.
	queue  [][]byte
	queued int
	commit *wire.FSCommit
}

func (st *fsStream) stop() {
	st.killed.Do(func() {
		st.mu.Lock()
		st.closed = true
		st.cond.Broadcast()
		st.mu.Unlock()
	})
}

// startFS starts a file operation as the frame's stream.
func (c *channel) startFS(f wire.Frame) error {
	var req wire.FSRequest
	if err := json.Unmarshal(f.Payload, &req); err != nil {
		return wire.Errorf("fs: %v", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.open(f.Stream); err != nil {
		return err
	}
	st := &fsStream{op: req.Op, done: make(chan struct{}), credit: wire.Window}
	st.cond = sync.NewCond(&st.mu)
	c.fs[f.Stream] = st
	go func() {
		defer close(st.done)
		c.serveFS(f.Stream, st, req)
		c.mu.Lock()
		delete(c.fs, f.Stream)
		c.mu.Unlock()
	}()
	return nil
}

// writeFS takes a write's (or a checkpoint import's) bytes, or its commit.
func (c *channel) writeFS(f wire.Frame) error {
	st := c.fsStream(f.Stream)
	if st == nil {
		return nil // a write that already ended (failed, or killed)
	}
	if st.op != wire.OpWrite && st.op != ckptOp(wire.CkptImport) {
		return wire.Errorf("write data on a %s stream", st.op)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.commit != nil {
		return wire.Errorf("stream %d: data after its commit", f.Stream)
	}
	if f.Kind == wire.KindFSCommit {
		var m wire.FSCommit
		if err := json.Unmarshal(f.Payload, &m); err != nil {
			return wire.Errorf("commit: %v", err)
		}
		st.commit = &m
	} else {
		if st.queued+len(f.Payload) > wire.Window {
			return wire.Errorf("stream %d sent more data than its credit", f.Stream)
		}
		st.queue = append(st.queue, append([]byte(nil), f.Payload...))
		st.queued += len(f.Payload)
	}
	st.cond.Broadcast()
	return nil
}

func (c *channel) fsStream(id uint32) *fsStream {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fs[id]
}

// stopFS ends every file operation of a channel that ended, and waits a
// little for them: a supervisor that exits next (its only channel ended)
// first removes the temporary files of the writes it abandons.
func (c *channel) stopFS() {
	c.mu.Lock()
	var sts []*fsStream
	for _, st := range c.fs {
		sts = append(sts, st)
	}
	c.mu.Unlock()
	deadline := time.After(wire.DrainGrace)
	for _, st := range sts {
		st.stop()
	}
	for _, st := range sts {
		select {
		case <-st.done:
		case <-deadline:
			return // a file system that hangs
		}
	}
}

func (c *channel) serveFS(id uint32, st *fsStream, req wire.FSRequest) {
	end := func(e wire.FSEnd) {
		b, _ := json.Marshal(e)
		c.send(wire.KindFSEnd, id, b)
	}
	if !wire.ValidPath(req.Path) {
		end(wire.FSEnd{Err: "EINVAL", Msg: "not a clean absolute path"})
		return
	}
	switch req.Op {
	case wire.OpStat:
		fi, err := os.Stat(req.Path)
		if err != nil {
			end(fsError(err))
			return
		}
		info := infoOf(fi)
		end(wire.FSEnd{Info: &info})
	case wire.OpReadDir:
		end(c.readDir(id, st, req.Path))
	case wire.OpRead:
		end(c.read(id, st, req.Path))
	case wire.OpWrite:
		end(c.s.write(st, req, func(n int) {
			c.send(wire.KindCredit, id, wire.Credit(n))
		}))
	case wire.OpRemove:
		end(fsError(os.Remove(req.Path)))
	case wire.OpDigest:
		end(digest(st, req))
	case wire.OpGrep, wire.OpGlob:
		end(c.search(id, st, req))
	default:
		end(wire.FSEnd{Err: "EINVAL", Msg: "unknown operation"})
	}
}

// readDir sends a directory's entries in frames of about 64 KiB. The
// open neither blocks (a FIFO) nor takes anything but a directory.
func (c *channel) readDir(id uint32, st *fsStream, name string) wire.FSEnd {
	f, err := os.OpenFile(name, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return fsError(err)
	}
	defer f.Close()
	var buf []byte
	n := 0
	for {
		ents, err := f.ReadDir(1024)
		for _, e := range ents {
			fi, err := e.Info() // lstat: not followed
			if errors.Is(err, fs.ErrNotExist) {
				continue // removed since it was listed
			}
			if err != nil {
				return fsError(err)
			}
			if n++; n > wire.MaxDirEntries {
				return wire.FSEnd{Err: wire.CodeTooMany}
			}
			buf = wire.AppendEntry(buf, wire.Entry{Name: e.Name(), Info: infoOf(fi)})
			if len(buf) >= 64<<10 {
				if c.send(wire.KindFSEntries, id, buf) != nil {
					return wire.FSEnd{Err: wire.CodeCancelled}
				}
				buf = buf[:0]
			}
		}
		if err == io.EOF || (err == nil && len(ents) == 0) {
			break
		}
		if err != nil {
			return fsError(err)
		}
		st.mu.Lock()
		closed := st.closed
		st.mu.Unlock()
		if closed {
			return wire.FSEnd{Err: wire.CodeCancelled}
		}
	}
	if len(buf) > 0 {
		c.send(wire.KindFSEntries, id, buf)
	}
	return wire.FSEnd{}
}

// read sends a file's stat and then its bytes, exactly as many as the
// stat says, within the stream's credit. The open does not block: a FIFO
// cannot hang it.
func (c *channel) read(id uint32, st *fsStream, name string) wire.FSEnd {
	f, err := os.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if errors.Is(err, fs.ErrPermission) {
		// A directory that may not be listed still opens for its stat.
		if fi, serr := os.Stat(name); serr == nil && fi.IsDir() {
			b, _ := json.Marshal(infoOf(fi))
			c.send(wire.KindFSInfo, id, b)
			return wire.FSEnd{}
		}
	}
	if err != nil {
		return fsError(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fsError(err)
	}
	if !fi.IsDir() && !fi.Mode().IsRegular() {
		return wire.FSEnd{Err: wire.CodeNotReg}
	}
	info := infoOf(fi)
	b, _ := json.Marshal(info)
	if c.send(wire.KindFSInfo, id, b) != nil || fi.IsDir() {
		return wire.FSEnd{}
	}
	buf := make([]byte, wire.ChunkSize)
	for left := info.Size; left > 0; {
		n, err := io.ReadFull(f, buf[:min(int64(len(buf)), left)])
		if n > 0 {
			if !c.sendData(id, st, buf[:n]) {
				return wire.FSEnd{Err: wire.CodeCancelled}
			}
			left -= int64(n)
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return wire.FSEnd{Err: wire.CodeChanged}
		}
		if err != nil {
			return fsError(err)
		}
	}
	return wire.FSEnd{}
}

// sendData sends b as KindFSData frames within the stream's credit; false
// when the stream was stopped first.
func (c *channel) sendData(id uint32, st *fsStream, b []byte) bool {
	for len(b) > 0 {
		n := min(len(b), wire.ChunkSize)
		st.mu.Lock()
		for st.credit < n && !st.closed {
			st.cond.Wait()
		}
		closed := st.closed
		st.credit -= n
		st.mu.Unlock()
		if closed || c.send(wire.KindFSData, id, b[:n]) != nil {
			return false
		}
		b = b[n:]
	}
	return true
}

// write writes a file atomically: the bytes go to a new temporary file
// beside the target, created with O_EXCL under a random name; once the
// Commit came and they match it, the temporary file is synced and, under
// the target's mutex, renamed over the target if the precondition holds.
// Whatever fails, the temporary file is removed. grant gives the server
// credit for more bytes; the first grant says the write is ready.
func (s *supervisor) write(st *fsStream, req wire.FSRequest, grant func(int)) wire.FSEnd {
	target, err := writeTarget(req.Path)
	if err != nil {
		return fsError(err)
	}
	dir := path.Dir(target)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fsError(err)
	}
	var rnd [8]byte
	rand.Read(rnd[:])
	tmp := path.Join(dir, ".sandbox-mcp-"+hex.EncodeToString(rnd[:])+".tmp")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return fsError(err)
	}
	done := false
	defer func() {
		if !done {
			f.Close()
			os.Remove(tmp)
		}
	}()
	grant(wire.Window)

	sum := sha256.New()
	var size int64
	var werr error
	var commit *wire.FSCommit
	for commit == nil {
		st.mu.Lock()
		for len(st.queue) == 0 && st.commit == nil && !st.closed {
			st.cond.Wait()
		}
		switch {
		case len(st.queue) > 0:
			chunk := st.queue[0]
			st.queue = st.queue[1:]
			st.queued -= len(chunk)
			st.mu.Unlock()
			if werr == nil {
				_, werr = f.Write(chunk)
				sum.Write(chunk)
				size += int64(len(chunk))
			}
			grant(len(chunk))
			continue
		case st.commit != nil:
			commit = st.commit
		}
		st.mu.Unlock()
		if commit == nil {
			return wire.FSEnd{Err: wire.CodeCancelled} // the stream ended short: nothing replaced
		}
	}
	if werr != nil {
		return fsError(werr)
	}
	if size != commit.Size || hex.EncodeToString(sum.Sum(nil)) != commit.SHA256 {
		return wire.FSEnd{Err: wire.CodeShort}
	}

	unlock, _ := s.paths.Lock(context.Background(), target)
	defer unlock()
	if end, ok := precondition(target, req); !ok {
		return end
	}
	// An existing file keeps its mode (never setuid or setgid) and, where
	// the supervisor may, its owner; a new one is 0644.
	mode := fs.FileMode(0o644)
	if fi, err := os.Stat(target); err == nil && fi.Mode().IsRegular() {
		mode = fi.Mode().Perm() | fi.Mode()&fs.ModeSticky
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && os.Geteuid() == 0 {
			f.Chown(int(st.Uid), int(st.Gid))
		}
	}
	err = f.Chmod(mode)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	done = true
	if err == nil {
		err = os.Rename(tmp, target)
	}
	if err != nil {
		os.Remove(tmp)
		return fsError(err)
	}
	return wire.FSEnd{}
}

// writeTarget is the file a write to name replaces: name, or, when name is
// a symlink, what it points to (followed to its end; it may not exist
// yet). A directory is refused.
func writeTarget(name string) (string, error) {
	for range 40 {
		fi, err := os.Lstat(name)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return name, nil
		case err != nil:
			return "", err
		case fi.IsDir():
			return "", syscall.EISDIR
		case fi.Mode()&fs.ModeSymlink == 0:
			return name, nil
		}
		link, err := os.Readlink(name)
		if err != nil {
			return "", err
		}
		if !path.IsAbs(link) {
			link = path.Join(path.Dir(name), link)
		}
		name = path.Clean(link)
	}
	return "", syscall.ELOOP
}

// precondition checks a write's precondition on target (its mutex held).
func precondition(target string, req wire.FSRequest) (wire.FSEnd, bool) {
	switch {
	case req.IfAbsent:
		_, err := os.Lstat(target)
		if errors.Is(err, fs.ErrNotExist) {
			return wire.FSEnd{}, true
		}
		if err != nil {
			return fsError(err), false
		}
		return wire.FSEnd{Err: wire.CodeConflict}, false
	case req.IfSHA256 != "":
		f, err := os.OpenFile(target, os.O_RDONLY|syscall.O_NONBLOCK, 0)
		if errors.Is(err, fs.ErrNotExist) {
			return wire.FSEnd{Err: wire.CodeConflict}, false
		}
		if err != nil {
			return fsError(err), false
		}
		defer f.Close()
		if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
			return wire.FSEnd{Err: wire.CodeConflict}, false
		}
		h := sha256.New()
		if _, err := io.Copy(h, io.LimitReader(f, sandbox.EditMaxBytes+1)); err != nil {
			return fsError(err), false
		}
		if hex.EncodeToString(h.Sum(nil)) != req.IfSHA256 {
			return wire.FSEnd{Err: wire.CodeConflict}, false
		}
	}
	return wire.FSEnd{}, true
}

func infoOf(fi fs.FileInfo) wire.FSInfo {
	info := wire.FSInfo{Size: fi.Size(), MtimeNS: fi.ModTime().UnixNano()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		info.Mode = uint32(st.Mode)
	}
	return info
}

// errnoCodes are the errors the client knows by name.
var errnoCodes = map[syscall.Errno]string{
	syscall.ENOENT: "ENOENT", syscall.EACCES: "EACCES", syscall.EPERM: "EACCES",
	syscall.ENOTDIR: "ENOTDIR", syscall.EISDIR: "EISDIR", syscall.EROFS: "EROFS",
	syscall.EEXIST: "EEXIST", syscall.ENOTEMPTY: "ENOTEMPTY", syscall.ELOOP: "ELOOP",
	syscall.ENOSPC: "ENOSPC", syscall.EDQUOT: "EDQUOT", syscall.EINVAL: "EINVAL",
	syscall.ENAMETOOLONG: "ENAMETOOLONG", syscall.EFBIG: "EFBIG", syscall.EBUSY: "EBUSY",
}

// fsError is the FSEnd of a failed system call: its errno's name, or its
// text.
func fsError(err error) wire.FSEnd {
	if err == nil {
		return wire.FSEnd{}
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		if code, ok := errnoCodes[errno]; ok {
			return wire.FSEnd{Err: code}
		}
		return wire.FSEnd{Err: "EIO", Msg: errno.Error()}
	}
	return wire.FSEnd{Err: "EIO", Msg: err.Error()}
}
