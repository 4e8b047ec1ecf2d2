//go:build unix

package supervisor

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
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
)

// The supervisor's side of the file operations (fsproto.go). They run as
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
	// write: bytes received and not yet written (at most window), and the
	// Commit once it came.
	queue  [][]byte
	queued int
	commit *FSCommit
}

func (st *fsStream) stop() {
	st.killed.Do(func() {
		st.mu.Lock()
		st.closed = true
		st.cond.Broadcast()
		st.mu.Unlock()
	})
}

// handleFS acts on a file operation's frame from the server.
func (c *channel) handleFS(f frame) error {
	switch f.kind {
	case msgFS:
		var req FSRequest
		if err := json.Unmarshal(f.payload, &req); err != nil {
			return protocolError("fs: %v", err)
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if f.stream == 0 || c.streams[f.stream] != nil || c.fs[f.stream] != nil || c.jobs[f.stream] != nil {
			return protocolError("stream %d started twice", f.stream)
		}
		st := &fsStream{op: req.Op, done: make(chan struct{}), credit: window}
		st.cond = sync.NewCond(&st.mu)
		c.fs[f.stream] = st
		go func() {
			defer close(st.done)
			c.serveFS(f.stream, st, req)
			c.mu.Lock()
			delete(c.fs, f.stream)
			c.mu.Unlock()
		}()
	case msgFSData, msgFSCommit:
		st := c.fsStream(f.stream)
		if st == nil {
			return nil // a write that already ended (failed, or killed)
		}
		if st.op != opWrite {
			return protocolError("write data on a %s stream", st.op)
		}
		st.mu.Lock()
		defer st.mu.Unlock()
		if st.commit != nil {
			return protocolError("stream %d: data after its commit", f.stream)
		}
		if f.kind == msgFSCommit {
			var m FSCommit
			if err := json.Unmarshal(f.payload, &m); err != nil {
				return protocolError("commit: %v", err)
			}
			st.commit = &m
		} else {
			if st.queued+len(f.payload) > window {
				return protocolError("stream %d sent more data than its credit", f.stream)
			}
			st.queue = append(st.queue, append([]byte(nil), f.payload...))
			st.queued += len(f.payload)
		}
		st.cond.Broadcast()
	}
	return nil
}

func (c *channel) fsStream(id uint32) *fsStream {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fs[id]
}

// fsCredit and fsKill are msgCredit and msgKill for a file operation.
func (c *channel) fsCredit(id uint32, n uint32) {
	if st := c.fsStream(id); st != nil {
		st.mu.Lock()
		st.credit += int(n)
		st.cond.Broadcast()
		st.mu.Unlock()
	}
}

func (c *channel) fsKill(id uint32) {
	if st := c.fsStream(id); st != nil {
		st.stop()
	}
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
	deadline := time.After(drainGrace)
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

func (c *channel) serveFS(id uint32, st *fsStream, req FSRequest) {
	end := func(e FSEnd) {
		b, _ := json.Marshal(e)
		c.send(msgFSEnd, id, b)
	}
	if !validPath(req.Path) {
		end(FSEnd{Err: "EINVAL", Msg: "not a clean absolute path"})
		return
	}
	switch req.Op {
	case opStat:
		fi, err := os.Stat(req.Path)
		if err != nil {
			end(fsError(err))
			return
		}
		info := infoOf(fi)
		end(FSEnd{Info: &info})
	case opReadDir:
		end(c.readDir(id, st, req.Path))
	case opRead:
		end(c.read(id, st, req.Path))
	case opWrite:
		end(c.s.write(st, req, func(n int) {
			var b [4]byte
			binary.BigEndian.PutUint32(b[:], uint32(n))
			c.send(msgCredit, id, b[:])
		}))
	case opRemove:
		end(fsError(os.Remove(req.Path)))
	case opGrep, opGlob:
		end(c.search(id, st, req))
	default:
		end(FSEnd{Err: "EINVAL", Msg: "unknown operation"})
	}
}

// readDir sends a directory's entries in frames of about 64 KiB. The
// open neither blocks (a FIFO) nor takes anything but a directory.
func (c *channel) readDir(id uint32, st *fsStream, name string) FSEnd {
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
			if n++; n > maxDirEntries {
				return FSEnd{Err: codeTooMany}
			}
			buf = appendEntry(buf, dirEnt{name: e.Name(), info: infoOf(fi)})
			if len(buf) >= 64<<10 {
				if c.send(msgFSEntries, id, buf) != nil {
					return FSEnd{Err: codeCancelled}
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
			return FSEnd{Err: codeCancelled}
		}
	}
	if len(buf) > 0 {
		c.send(msgFSEntries, id, buf)
	}
	return FSEnd{}
}

// read sends a file's stat and then its bytes, exactly as many as the
// stat says, within the stream's credit. The open does not block: a FIFO
// cannot hang it.
func (c *channel) read(id uint32, st *fsStream, name string) FSEnd {
	f, err := os.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if errors.Is(err, fs.ErrPermission) {
		// A directory that may not be listed still opens for its stat.
		if fi, serr := os.Stat(name); serr == nil && fi.IsDir() {
			b, _ := json.Marshal(infoOf(fi))
			c.send(msgFSInfo, id, b)
			return FSEnd{}
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
		return FSEnd{Err: codeNotReg}
	}
	info := infoOf(fi)
	b, _ := json.Marshal(info)
	if c.send(msgFSInfo, id, b) != nil || fi.IsDir() {
		return FSEnd{}
	}
	buf := make([]byte, chunkSize)
	for left := info.Size; left > 0; {
		n, err := io.ReadFull(f, buf[:min(int64(len(buf)), left)])
		if n > 0 {
			if !c.sendData(id, st, buf[:n]) {
				return FSEnd{Err: codeCancelled}
			}
			left -= int64(n)
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return FSEnd{Err: codeChanged}
		}
		if err != nil {
			return fsError(err)
		}
	}
	return FSEnd{}
}

// sendData sends b as msgFSData frames within the stream's credit; false
// when the stream was stopped first.
func (c *channel) sendData(id uint32, st *fsStream, b []byte) bool {
	for len(b) > 0 {
		n := min(len(b), chunkSize)
		st.mu.Lock()
		for st.credit < n && !st.closed {
			st.cond.Wait()
		}
		closed := st.closed
		st.credit -= n
		st.mu.Unlock()
		if closed || c.send(msgFSData, id, b[:n]) != nil {
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
func (s *supervisor) write(st *fsStream, req FSRequest, grant func(int)) FSEnd {
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
	grant(window)

	sum := sha256.New()
	var size int64
	var werr error
	var commit *FSCommit
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
			return FSEnd{Err: codeCancelled} // the stream ended short: nothing replaced
		}
	}
	if werr != nil {
		return fsError(werr)
	}
	if size != commit.Size || hex.EncodeToString(sum.Sum(nil)) != commit.SHA256 {
		return FSEnd{Err: codeShort}
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
	return FSEnd{}
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
func precondition(target string, req FSRequest) (FSEnd, bool) {
	switch {
	case req.IfAbsent:
		_, err := os.Lstat(target)
		if errors.Is(err, fs.ErrNotExist) {
			return FSEnd{}, true
		}
		if err != nil {
			return fsError(err), false
		}
		return FSEnd{Err: codeConflict}, false
	case req.IfSHA256 != "":
		f, err := os.OpenFile(target, os.O_RDONLY|syscall.O_NONBLOCK, 0)
		if errors.Is(err, fs.ErrNotExist) {
			return FSEnd{Err: codeConflict}, false
		}
		if err != nil {
			return fsError(err), false
		}
		defer f.Close()
		if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
			return FSEnd{Err: codeConflict}, false
		}
		h := sha256.New()
		if _, err := io.Copy(h, io.LimitReader(f, sandbox.EditMaxBytes+1)); err != nil {
			return fsError(err), false
		}
		if hex.EncodeToString(h.Sum(nil)) != req.IfSHA256 {
			return FSEnd{Err: codeConflict}, false
		}
	}
	return FSEnd{}, true
}

func infoOf(fi fs.FileInfo) FSInfo {
	info := FSInfo{Size: fi.Size(), MtimeNS: fi.ModTime().UnixNano()}
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
func fsError(err error) FSEnd {
	if err == nil {
		return FSEnd{}
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		if code, ok := errnoCodes[errno]; ok {
			return FSEnd{Err: code}
		}
		return FSEnd{Err: "EIO", Msg: errno.Error()}
	}
	return FSEnd{Err: "EIO", Msg: err.Error()}
}
