package supervisor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"path"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/filelock"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor/wire"
)

// fsCall is one file operation in flight on a Conn. Everything in it came
// from the supervisor and was checked by onFS (dispatch.go) against what was
// asked.
type fsCall struct {
	op     string
	notify chan struct{} // one token: something changed

	mu      sync.Mutex
	replied bool         // a frame came: the supervisor has the request
	failed  bool         // the channel ended
	info    *wire.FSInfo // read: the file's stat
	chunks  [][]byte     // read: bytes not yet consumed
	pending int          // read: bytes in chunks
	got     int64        // read: bytes received
	entries []wire.Entry // readdir
	credit  int          // write: bytes the supervisor will still take
	end     *wire.FSEnd
}

func (fc *fsCall) signal() {
	select {
	case fc.notify <- struct{}{}:
	default:
	}
}

func (fc *fsCall) fail() {
	fc.mu.Lock()
	fc.failed = true
	fc.mu.Unlock()
	fc.signal()
}

// onInfo takes a read's stat.
func (fc *fsCall) onInfo(f wire.Frame) error {
	var m wire.FSInfo
	open := fc.op == ckptOpen
	if fc.op != wire.OpRead && !open || fc.info != nil {
		return wire.Errorf("stream %d: unexpected stat", f.Stream)
	}
	if err := json.Unmarshal(f.Payload, &m); err != nil || m.Size < 0 {
		return wire.Errorf("stream %d: bad stat", f.Stream)
	}
	// A checkpoint open's entry: a regular file, of the size the stat says.
	if open != (m.Entry != nil) || open && (m.Entry.Mode.Type() != 0 || m.Entry.Size != m.Size || !validEntry(m.Entry, m.Entry.Path)) {
		return wire.Errorf("stream %d: bad stat", f.Stream)
	}
	fc.info = &m
	return nil
}

// onData takes a read's bytes (within the stat's size) or a search's,
// within the credit.
func (fc *fsCall) onData(f wire.Frame) error {
	switch {
	case fc.op == wire.OpGrep || fc.op == wire.OpGlob || ckptData[fc.op]:
		if fc.pending+len(f.Payload) > wire.Window {
			return wire.Errorf("stream %d sent more data than its credit", f.Stream)
		}
	case fc.op != wire.OpRead && fc.op != ckptOpen || fc.info == nil:
		return wire.Errorf("stream %d: unexpected data", f.Stream)
	case fc.got+int64(len(f.Payload)) > fc.info.Size:
		return wire.Errorf("stream %d: more bytes than the file's size", f.Stream)
	case fc.pending+len(f.Payload) > wire.Window:
		return wire.Errorf("stream %d sent more data than its credit", f.Stream)
	}
	if n := len(fc.chunks); n > 0 && len(fc.chunks[n-1])+len(f.Payload) <= wire.ChunkSize {
		fc.chunks[n-1] = append(fc.chunks[n-1], f.Payload...) // small frames share a buffer
	} else {
		fc.chunks = append(fc.chunks, append(make([]byte, 0, max(wire.ChunkSize, len(f.Payload))), f.Payload...))
	}
	fc.pending += len(f.Payload)
	fc.got += int64(len(f.Payload))
	return nil
}

// onEntries takes a listing's entries, each name checked.
func (fc *fsCall) onEntries(f wire.Frame) error {
	if fc.op != wire.OpReadDir {
		return wire.Errorf("stream %d: unexpected entries", f.Stream)
	}
	ents, err := wire.ParseEntries(f.Payload, nil)
	if err != nil {
		return err
	}
	if len(fc.entries)+len(ents) > wire.MaxDirEntries {
		return wire.Errorf("stream %d: a listing of over %d entries", f.Stream, wire.MaxDirEntries)
	}
	fc.entries = append(fc.entries, ents...)
	return nil
}

// onCredit takes a write's credit: room for more bytes.
func (fc *fsCall) onCredit(f wire.Frame) error {
	n, err := wire.ParseCredit(f.Payload)
	if fc.op != wire.OpWrite && fc.op != ckptImport || err != nil {
		return wire.Errorf("stream %d: unexpected credit", f.Stream)
	}
	credit := fc.credit + int(n)
	if n == 0 || credit > wire.Window || credit < 0 {
		return wire.Errorf("stream %d: credit over the window", f.Stream)
	}
	fc.credit = credit
	return nil
}

// onEnd takes an operation's end.
func (fc *fsCall) onEnd(f wire.Frame) error {
	var m wire.FSEnd
	if err := json.Unmarshal(f.Payload, &m); err != nil {
		return wire.Errorf("stream %d: bad end", f.Stream)
	}
	if m.Info != nil && (fc.op != wire.OpStat || m.Info.Size < 0) {
		return wire.Errorf("stream %d: unexpected stat", f.Stream)
	}
	if m.Total != 0 && (fc.op != wire.OpGlob || m.Total < 0) {
		return wire.Errorf("stream %d: unexpected count", f.Stream)
	}
	if m.Digest != nil && (fc.op != wire.OpDigest || !validDigest(m.Digest)) {
		return wire.Errorf("stream %d: unexpected digest", f.Stream)
	}
	if m.Ckpt != nil && !strings.HasPrefix(fc.op, "ckpt-") {
		return wire.Errorf("stream %d: unexpected checkpoint answer", f.Stream)
	}
	m.Err, m.Msg = wire.CapText(m.Err, 32), wire.CapText(m.Msg, 200)
	fc.end = &m
	return nil
}

// fsStall is how long an operation waits for the supervisor to say
// anything before it gives up (a hung file system in the sandbox): the
// call fails, the channel stays.
var fsStall = 2 * time.Minute

// errStalled: the supervisor stopped answering an operation.
var errStalled = errors.New("the sandbox's supervisor did not answer")

// errConflict: a conditional write found the file changed.
var errConflict = errors.New("file changed by someone else")

// errChanged: a file shrank while it was read.
var errChanged = errors.New("file changed while it was read")

// startFS opens a file operation's stream. An error is a ChannelError
// with NotStarted: the request never reached the supervisor.
func (c *Conn) startFS(req wire.FSRequest) (uint32, *fsCall, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return 0, nil, err
	}
	return c.startStream(wire.KindFS, req.Op, body)
}

// startStream opens a stream of kind (a file operation's, a checkpoint
// request's) answered with the file operations' frames; op is what onFS
// checks them against.
func (c *Conn) startStream(kind wire.Kind, op string, body []byte) (uint32, *fsCall, error) {
	fc := &fsCall{op: op, notify: make(chan struct{}, 1)}
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return 0, nil, &ChannelError{Err: err, NotStarted: true}
	}
	c.next++
	id := c.next
	c.fs[id] = fc
	c.mu.Unlock()
	if err := c.send(kind, id, body); err != nil {
		c.endFS(id, fc)
		return 0, nil, &ChannelError{Err: c.Err(), NotStarted: true}
	}
	return id, fc, nil
}

// endFS forgets an operation; one the supervisor has not ended is told
// to stop.
func (c *Conn) endFS(id uint32, fc *fsCall) {
	c.mu.Lock()
	_, live := c.fs[id]
	delete(c.fs, id)
	c.mu.Unlock()
	fc.mu.Lock()
	ended := fc.end != nil || fc.failed
	fc.mu.Unlock()
	if live && !ended {
		c.send(wire.KindKill, id, nil)
	}
}

// waitFS waits until ready (called with fc.mu held) holds, the channel
// fails, ctx ends or the supervisor stalls.
func (c *Conn) waitFS(ctx context.Context, fc *fsCall, ready func() bool) error {
	t := time.NewTimer(fsStall)
	defer t.Stop()
	for {
		fc.mu.Lock()
		ok, failed, replied := ready(), fc.failed, fc.replied
		fc.mu.Unlock()
		switch {
		case ok:
			return nil
		case failed:
			err := c.Err()
			if err == nil {
				err = errors.New("ended")
			}
			return &ChannelError{Err: err, NotStarted: !replied}
		}
		select {
		case <-fc.notify:
			t.Reset(fsStall)
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			return errStalled
		}
	}
}

// do runs an operation that answers with its end only (stat, readdir,
// remove).
func (c *Conn) do(ctx context.Context, req wire.FSRequest) (*wire.FSEnd, []wire.Entry, error) {
	id, fc, err := c.startFS(req)
	if err != nil {
		return nil, nil, err
	}
	defer c.endFS(id, fc)
	if err := c.waitFS(ctx, fc, func() bool { return fc.end != nil }); err != nil {
		return nil, nil, err
	}
	return fc.end, fc.entries, endError(fc.end)
}

// endError is the error an operation's end reports: a sandbox sentinel
// where there is one.
func endError(e *wire.FSEnd) error {
	if err := ckptEndError(e); err != nil {
		return err
	}
	switch e.Err {
	case "":
		return nil
	case "ENOENT":
		return sandbox.ErrNotFound
	case "EACCES":
		return sandbox.ErrPermission
	case "ENOTDIR":
		return sandbox.ErrNotDir
	case "EISDIR":
		return sandbox.ErrIsDir
	case "EROFS":
		return sandbox.ErrReadOnly
	case "EEXIST":
		return sandbox.ErrExists
	case wire.CodeNotReg:
		return sandbox.ErrNotRegular
	case "ENOTEMPTY":
		return syscall.ENOTEMPTY
	case "ELOOP":
		return syscall.ELOOP
	case "ENOSPC":
		return syscall.ENOSPC
	case "EDQUOT":
		return syscall.EDQUOT
	case "ENAMETOOLONG":
		return syscall.ENAMETOOLONG
	case "EINVAL":
		return syscall.EINVAL
	case wire.CodeConflict:
		return errConflict
	case wire.CodeTooMany:
		return fmt.Errorf("directory too large to list (over %d entries)", wire.MaxDirEntries)
	case wire.CodeChanged:
		return errChanged
	case wire.CodeShort:
		return errors.New("transfer to the sandbox incomplete")
	case wire.CodeCancelled:
		return errors.New("operation cancelled")
	}
	if e.Msg != "" {
		return fmt.Errorf("failed in the sandbox: %s: %s", e.Err, e.Msg)
	}
	return fmt.Errorf("failed in the sandbox: %s", e.Err)
}

// FS is a sandbox.FS served by the sandbox's supervisor: for a provider
// whose files live inside the sandbox (a Pod's, a container's), the
// virtual paths are the sandbox's own. Each operation is a stream on the
// Link's channel; a write is atomic and checked (size and sha256) inside
// the sandbox, and an Edit is a compare-and-swap there, so that several
// server replicas editing one file through one supervisor never lose an
// update. Keep one FS per Link: it also holds in-process edit locks, which
// spare this process's own edits the retries.
type FS struct {
	link     *Link
	readOnly func(vpath string) bool
	locks    *filelock.Locks
}

var _ sandbox.FS = (*FS)(nil)

// NewFS returns the file system of l's sandbox. readOnly reports whether
// a path lies in a read-only mount: writes there fail with
// sandbox.ErrReadOnly before any I/O. It may be nil (nothing read-only).
func NewFS(l *Link, readOnly func(vpath string) bool) *FS {
	if readOnly == nil {
		readOnly = func(string) bool { return false }
	}
	return &FS{link: l, readOnly: readOnly, locks: filelock.NewLocks()}
}

// editAttempts bounds an Edit's compare-and-swap rounds. An edit loses a
// round only to another that committed: with a few replicas editing one
// file at once, losing 32 in a row does not happen.
const editAttempts = 32

// check refuses a path that is not clean and absolute, and a write to a
// read-only mount.
func (f *FS) check(name string, write bool) error {
	if !wire.ValidPath(name) {
		return &sandbox.PathError{Path: strings.ReplaceAll(name, "\x00", `\0`), Err: sandbox.ErrOutsideRoot}
	}
	if write && f.readOnly(name) {
		return &sandbox.PathError{Path: name, Err: sandbox.ErrReadOnly}
	}
	return nil
}

// try runs op on the channel, on a new one once when the first was gone
// before the supervisor had the request — or, for an operation that
// changes nothing, failed at any point.
func (f *FS) try(ctx context.Context, idempotent bool, op func(c *Conn) error) error {
	for attempt := 0; ; attempt++ {
		c, err := f.link.Conn(ctx)
		if err != nil {
			return err
		}
		err = op(c)
		var ce *ChannelError
		if errors.As(err, &ce) && attempt == 0 && (ce.NotStarted || idempotent) {
			f.link.Drop(c)
			continue
		}
		return err
	}
}

// pathError names the virtual path in every error but the caller's own.
func pathError(name string, err error) error {
	var pe *sandbox.PathError
	if err == nil || errors.As(err, &pe) {
		return err
	}
	return &sandbox.PathError{Path: name, Err: err}
}

func (f *FS) Stat(ctx context.Context, name string) (fs.FileInfo, error) {
	if err := f.check(name, false); err != nil {
		return nil, err
	}
	var end *wire.FSEnd
	err := f.try(ctx, true, func(c *Conn) (err error) {
		end, _, err = c.do(ctx, wire.FSRequest{Op: wire.OpStat, Path: name})
		return err
	})
	if err == nil && end.Info == nil {
		err = errors.New("no stat from the sandbox")
	}
	if err != nil {
		return nil, pathError(name, err)
	}
	return end.Info.FileInfo(path.Base(name)), nil
}

func (f *FS) ReadDir(ctx context.Context, name string) ([]fs.DirEntry, error) {
	if err := f.check(name, false); err != nil {
		return nil, err
	}
	var ents []wire.Entry
	err := f.try(ctx, true, func(c *Conn) (err error) {
		_, ents, err = c.do(ctx, wire.FSRequest{Op: wire.OpReadDir, Path: name})
		return err
	})
	if err != nil {
		return nil, pathError(name, err)
	}
	out := make([]fs.DirEntry, len(ents))
	for i, e := range ents {
		out[i] = fs.FileInfoToDirEntry(e.Info.FileInfo(e.Name))
	}
	slices.SortFunc(out, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return out, nil
}

// Open streams a file out of the sandbox; its bytes are counted against
// the size its stat declared. A directory opens for Stat only.
func (f *FS) Open(ctx context.Context, name string) (fs.File, error) {
	if err := f.check(name, false); err != nil {
		return nil, err
	}
	var file fs.File
	err := f.try(ctx, true, func(c *Conn) (err error) {
		file, err = c.open(ctx, name)
		return err
	})
	return file, pathError(name, err)
}

func (c *Conn) open(ctx context.Context, name string) (fs.File, error) {
	id, fc, err := c.startFS(wire.FSRequest{Op: wire.OpRead, Path: name})
	if err != nil {
		return nil, err
	}
	if err := c.waitFS(ctx, fc, func() bool { return fc.info != nil || fc.end != nil }); err != nil {
		c.endFS(id, fc)
		return nil, err
	}
	fc.mu.Lock()
	info, end := fc.info, fc.end
	fc.mu.Unlock()
	if info == nil {
		c.endFS(id, fc)
		if err := endError(end); err != nil {
			return nil, err
		}
		return nil, errors.New("no stat from the sandbox")
	}
	fi := info.FileInfo(path.Base(name))
	if fi.IsDir() {
		c.endFS(id, fc)
		return dirFile{fi}, nil
	}
	return &file{c: c, id: id, fc: fc, ctx: ctx, name: name, fi: fi}, nil
}

// file is a file streamed out of the sandbox.
type file struct {
	c    *Conn
	id   uint32
	fc   *fsCall
	ctx  context.Context
	name string
	fi   fs.FileInfo
	cur  []byte // a chunk being consumed
	err  error  // once the stream ended: io.EOF or why not
	once sync.Once
}

func (r *file) Stat() (fs.FileInfo, error) { return r.fi, nil }

// Read returns the file's bytes; at their end, an error instead of io.EOF
// when they were not all of them.
func (r *file) Read(b []byte) (int, error) {
	if len(r.cur) == 0 && r.err == nil {
		r.next()
	}
	if len(r.cur) > 0 {
		n := copy(b, r.cur)
		r.cur = r.cur[n:]
		return n, nil
	}
	return 0, r.err
}

// next takes the next chunk, and gives its credit back; or sets r.err.
func (r *file) next() {
	fc := r.fc
	err := r.c.waitFS(r.ctx, fc, func() bool { return len(fc.chunks) > 0 || fc.end != nil })
	if err != nil {
		r.err = pathError(r.name, err)
		return
	}
	fc.mu.Lock()
	if len(fc.chunks) > 0 {
		r.cur = fc.chunks[0]
		fc.chunks = fc.chunks[1:]
		fc.pending -= len(r.cur)
		fc.mu.Unlock()
		r.c.send(wire.KindCredit, r.id, wire.Credit(len(r.cur)))
		return
	}
	end, got := fc.end, fc.got
	fc.mu.Unlock()
	switch err := endError(end); {
	case err != nil:
		r.err = &sandbox.PathError{Path: r.name, Err: err}
	case got != r.fi.Size():
		r.err = &sandbox.PathError{Path: r.name, Err: fmt.Errorf("transfer from the sandbox incomplete (%d of %d bytes)", got, r.fi.Size())}
	default:
		r.err = io.EOF
	}
	r.c.endFS(r.id, fc)
}

func (r *file) Close() error {
	r.once.Do(func() {
		r.c.endFS(r.id, r.fc)
		r.cur, r.err = nil, &sandbox.PathError{Path: r.name, Err: fs.ErrClosed}
	})
	return nil
}

// dirFile is an opened directory (for Stat).
type dirFile struct{ fi fs.FileInfo }

func (d dirFile) Read([]byte) (int, error) {
	return 0, &sandbox.PathError{Path: d.fi.Name(), Err: sandbox.ErrIsDir}
}
func (d dirFile) Stat() (fs.FileInfo, error) { return d.fi, nil }
func (d dirFile) Close() error               { return nil }

// Create streams a new file into the sandbox; Close renames it into place
// once the supervisor checked it was all there.
func (f *FS) Create(ctx context.Context, name string) (io.WriteCloser, error) {
	if err := f.check(name, true); err != nil {
		return nil, err
	}
	w, err := f.create(ctx, wire.FSRequest{Op: wire.OpWrite, Path: name})
	return w, pathError(name, err)
}

func (f *FS) create(ctx context.Context, req wire.FSRequest) (*writer, error) {
	var w *writer
	err := f.try(ctx, false, func(c *Conn) (err error) {
		w, err = c.create(ctx, req)
		return err
	})
	return w, err
}

func (c *Conn) create(ctx context.Context, req wire.FSRequest) (*writer, error) {
	id, fc, err := c.startFS(req)
	if err != nil {
		return nil, err
	}
	// The first credit says the temporary file is there.
	if err := c.waitFS(ctx, fc, func() bool { return fc.credit > 0 || fc.end != nil }); err != nil {
		c.endFS(id, fc)
		return nil, err
	}
	fc.mu.Lock()
	end := fc.end
	fc.mu.Unlock()
	if end != nil {
		c.endFS(id, fc)
		if err := endError(end); err != nil {
			return nil, err
		}
		return nil, errors.New("the sandbox ended the write before it began")
	}
	return &writer{c: c, id: id, fc: fc, ctx: ctx, name: req.Path, sum: sha256.New()}, nil
}

// writer streams a file into the sandbox within the credit the
// supervisor grants.
type writer struct {
	c    *Conn
	id   uint32
	fc   *fsCall
	ctx  context.Context
	name string
	sum  hash.Hash
	size int64
	err  error // the first failure; every later call returns it
	done bool
}

func (w *writer) Write(p []byte) (int, error) {
	if w.done {
		return 0, &sandbox.PathError{Path: w.name, Err: fs.ErrClosed}
	}
	fc := w.fc
	written := 0
	for w.err == nil && len(p) > 0 {
		if err := w.c.waitFS(w.ctx, fc, func() bool { return fc.credit > 0 || fc.end != nil }); err != nil {
			w.err = pathError(w.name, err)
			break
		}
		fc.mu.Lock()
		end, n := fc.end, min(fc.credit, wire.ChunkSize, len(p))
		if end == nil {
			fc.credit -= n
		}
		fc.mu.Unlock()
		if end != nil {
			// Only a failure ends a write before its commit.
			err := endError(end)
			if err == nil {
				err = errors.New("the sandbox ended the write early")
			}
			w.err = &sandbox.PathError{Path: w.name, Err: err}
			break
		}
		if err := w.c.send(wire.KindFSData, w.id, p[:n]); err != nil {
			w.err = pathError(w.name, &ChannelError{Err: w.c.Err()})
			break
		}
		w.sum.Write(p[:n])
		w.size += int64(n)
		written += n
		p = p[n:]
	}
	return written, w.err
}

// Close commits the write and waits for the file to be in place. After a
// failed Write it only abandons it: nothing is replaced.
func (w *writer) Close() error {
	if w.done {
		return w.err
	}
	w.done = true
	defer w.c.endFS(w.id, w.fc)
	if w.err != nil {
		return w.err
	}
	body, _ := json.Marshal(wire.FSCommit{Size: w.size, SHA256: hex.EncodeToString(w.sum.Sum(nil))})
	if err := w.c.send(wire.KindFSCommit, w.id, body); err != nil {
		w.err = pathError(w.name, &ChannelError{Err: w.c.Err()})
		return w.err
	}
	fc := w.fc
	if err := w.c.waitFS(w.ctx, fc, func() bool { return fc.end != nil }); err != nil {
		w.err = pathError(w.name, err)
		return w.err
	}
	if err := endError(fc.end); err != nil {
		w.err = &sandbox.PathError{Path: w.name, Err: err}
	}
	return w.err
}

// Edit reads the file, computes its new content and writes it back on the
// condition that the file is still what was read (compare-and-swap in the
// supervisor): when another replica wrote it meanwhile, it starts over,
// at most editAttempts times. fn may so run more than once.
func (f *FS) Edit(ctx context.Context, name string, fn sandbox.EditFunc) error {
	if err := f.check(name, true); err != nil {
		return err
	}
	unlock, err := f.locks.Lock(ctx, name)
	if err != nil {
		return err
	}
	defer unlock()
	for range editAttempts {
		old, exists, sum, err := f.readForEdit(ctx, name)
		if errors.Is(err, errChanged) {
			continue // written while it was read: read it again
		}
		if err != nil {
			return pathError(name, err)
		}
		data, err := fn(old, exists)
		if err != nil {
			return err
		}
		req := wire.FSRequest{Op: wire.OpWrite, Path: name, IfAbsent: !exists, IfSHA256: sum}
		err = f.write(ctx, req, data)
		if !errors.Is(err, errConflict) {
			return pathError(name, err)
		}
	}
	return &sandbox.PathError{Path: name, Err: errors.New("the file kept changing during the edit; try again")}
}

// readForEdit reads a whole file of at most EditMaxBytes, with the sha256
// of what it read.
func (f *FS) readForEdit(ctx context.Context, name string) (data []byte, exists bool, sum string, err error) {
	file, err := f.Open(ctx, name)
	if errors.Is(err, sandbox.ErrNotFound) {
		return nil, false, "", nil
	}
	if err != nil {
		return nil, false, "", err
	}
	defer file.Close()
	fi, _ := file.Stat()
	switch {
	case fi.IsDir():
		return nil, false, "", sandbox.ErrIsDir
	case fi.Size() > sandbox.EditMaxBytes:
		return nil, false, "", sandbox.ErrTooLarge
	}
	// The size was checked, and Read ends with an error on a byte more
	// than it: no limit is needed here.
	if data, err = io.ReadAll(file); err != nil {
		return nil, false, "", err
	}
	h := sha256.Sum256(data)
	return data, true, hex.EncodeToString(h[:]), nil
}

// write writes data whole, with req's precondition.
func (f *FS) write(ctx context.Context, req wire.FSRequest, data []byte) error {
	w, err := f.create(ctx, req)
	if err != nil {
		return err
	}
	if _, err := w.Write(data); err != nil {
		w.Close()
		return err
	}
	return w.Close()
}

// Remove removes a file or an empty directory.
func (f *FS) Remove(ctx context.Context, name string) error {
	if err := f.check(name, true); err != nil {
		return err
	}
	err := f.try(ctx, false, func(c *Conn) error {
		_, _, err := c.do(ctx, wire.FSRequest{Op: wire.OpRemove, Path: name})
		return err
	})
	return pathError(name, err)
}
