//go:build unix

package daemon

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"path"
	"strings"
	"sync"

	"github.com/sandbox-mcp/sandbox-mcp/checkpoint"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor/wire"
)

// The supervisor's side of the checkpoint requests (wire/kinds.go,
// KindCkpt): the checkpoint engine run on the one store and the one
// user-data root given on the command line (--checkpoints, --user-data),
// for a box whose user-data lives in it (a Pod's volume). A request names
// neither: the server can make the supervisor save, list, read, restore,
// export or import nothing but that store and that tree. Each request runs
// on a goroutine of its own, as a file operation does, and a KindKill (or
// the channel's end) cancels it.
//
// What the engine guards against is what a command in the box could do
// to the store (commands run as the supervisor's user, so they can write
// it): every object is checked against its hash and every name against
// the path rules, so a tampered store makes a restore or a read fail
// (CORRUPT), never write outside the root.

// ckptStore is the supervisor's checkpoint store, opened on first use.
type ckptStore struct {
	dir, root string // "": no checkpoints

	mu    sync.Mutex
	store *checkpoint.Store
}

// open is the store, opened now if need be.
func (k *ckptStore) open() (*checkpoint.Store, error) {
	if k == nil || k.dir == "" || k.root == "" {
		return nil, errNoCkpt
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.store != nil {
		return k.store, nil
	}
	saved := strings.TrimPrefix(sandbox.SavedDir, sandbox.UserDataDir+"/")
	st, err := checkpoint.Open(k.dir, checkpoint.Options{Exclude: []string{saved}})
	if err != nil {
		return nil, err
	}
	k.store = st
	return st, nil
}

var errNoCkpt = errors.New("this supervisor keeps no checkpoints (started without --checkpoints and --user-data)")

// ckptOp is the fsStream op of a checkpoint request: writeFS takes an
// import's bytes as a write's.
func ckptOp(op string) string { return "ckpt-" + op }

// startCkpt starts a checkpoint request as the frame's stream.
func (c *channel) startCkpt(f wire.Frame) error {
	var req wire.CkptRequest
	if err := json.Unmarshal(f.Payload, &req); err != nil {
		return wire.Errorf("checkpoint: %v", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.open(f.Stream); err != nil {
		return err
	}
	st := &fsStream{op: ckptOp(req.Op), done: make(chan struct{}), credit: wire.Window}
	st.cond = sync.NewCond(&st.mu)
	c.fs[f.Stream] = st
	go func() {
		defer close(st.done)
		ctx, cancel := context.WithCancel(context.Background())
		finished := false
		go func() { // the stream's stop cancels the request
			st.mu.Lock()
			for !st.closed && !finished {
				st.cond.Wait()
			}
			st.mu.Unlock()
			cancel()
		}()
		end := c.serveCkpt(ctx, f.Stream, st, req)
		st.mu.Lock()
		finished = true
		st.cond.Broadcast()
		st.mu.Unlock()
		cancel()
		b, _ := json.Marshal(end)
		c.send(wire.KindFSEnd, f.Stream, b)
		c.mu.Lock()
		delete(c.fs, f.Stream)
		c.mu.Unlock()
	}()
	return nil
}

func (c *channel) serveCkpt(ctx context.Context, id uint32, st *fsStream, req wire.CkptRequest) wire.FSEnd {
	store, err := c.s.ckpt.open()
	if err != nil {
		return ckptError(err)
	}
	root := c.s.ckpt.root
	msg := capMessage(req.Message)
	switch req.Op {
	case wire.CkptSave:
		res, err := store.Save(ctx, root, checkpoint.SaveOptions{Message: msg, Auto: req.Auto, Force: req.Force})
		if err != nil {
			return ckptError(err)
		}
		if req.MaxBytes > 0 {
			if _, err := store.Prune(ctx, req.MaxBytes); err != nil {
				return ckptError(err)
			}
		}
		return wire.FSEnd{Ckpt: &wire.CkptEnd{Info: &res.Info, Saved: res.Saved, Skipped: capSkipped(res.Skipped)}}
	case wire.CkptList:
		infos, err := store.List(ctx)
		if err != nil {
			return ckptError(err)
		}
		if len(infos) > wire.MaxCkptList {
			infos = infos[len(infos)-wire.MaxCkptList:] // the newest
		}
		lines := newLines(c, id, st)
		for i := range infos {
			infos[i].Message = capMessage(infos[i].Message)
			if !lines.add(infos[i]) {
				return lines.failed()
			}
		}
		return lines.end()
	case wire.CkptChanges:
		changes, err := store.Changes(ctx, root, req.From, req.To)
		if err != nil {
			return ckptError(err)
		}
		if len(changes) > wire.MaxCkptChanges {
			return wire.FSEnd{Err: wire.CodeTooMany, Msg: fmt.Sprintf("%d changes, over %d", len(changes), wire.MaxCkptChanges)}
		}
		lines := newLines(c, id, st)
		for i := range changes {
			if !lines.add(changes[i]) {
				return lines.failed()
			}
		}
		return lines.end()
	case wire.CkptOpen:
		r, e, err := store.OpenFile(ctx, req.ID, req.Path)
		if err != nil {
			return ckptError(err)
		}
		defer r.Close()
		b, _ := json.Marshal(wire.FSInfo{Size: e.Size, MtimeNS: e.ModTime.UnixNano(), Entry: &e})
		if c.send(wire.KindFSInfo, id, b) != nil {
			return wire.FSEnd{Err: wire.CodeCancelled}
		}
		_, err = io.CopyBuffer(dataWriter{c, id, st}, r, make([]byte, wire.ChunkSize))
		return ckptError(err)
	case wire.CkptRestore:
		root := root
		locker := checkpoint.LockerFunc(func(ctx context.Context, rel string) (func(), error) {
			return c.s.paths.Lock(ctx, path.Join(root, rel))
		})
		res, err := store.Restore(ctx, root, req.ID, checkpoint.RestoreOptions{Locker: locker, SaveFirst: true, UndoMessage: capMessage(req.UndoMessage)})
		if err != nil {
			return ckptError(err)
		}
		if req.MaxBytes > 0 {
			// The undo checkpoint counts against the bound too. The files
			// are restored whatever comes of it (and a call cancelled now
			// does not stop it): a prune that fails is the next save's to
			// try again, and to report.
			store.Prune(context.WithoutCancel(ctx), req.MaxBytes)
		}
		lines := newLines(c, id, st)
		n := min(len(res.Changes), wire.MaxCkptChanges)
		for i := range n {
			if !lines.add(res.Changes[i]) {
				return lines.failed()
			}
		}
		if e := lines.end(); e.Err != "" {
			return e
		}
		return wire.FSEnd{Ckpt: &wire.CkptEnd{Undo: &res.Undo, Skipped: capSkipped(res.Skipped), Cut: len(res.Changes) - n}}
	case wire.CkptExport:
		return ckptError(store.ExportTar(ctx, req.ID, dataWriter{c, id, st}))
	case wire.CkptImport:
		r := &importReader{c: c, id: id, st: st, sum: sha256.New()}
		c.send(wire.KindCredit, id, wire.Credit(wire.Window)) // ready: the server may send
		info, err := store.ImportTar(ctx, root, r, msg)
		if err != nil {
			return ckptError(err)
		}
		return wire.FSEnd{Ckpt: &wire.CkptEnd{Info: &info}}
	}
	return wire.FSEnd{Err: "EINVAL", Msg: "unknown checkpoint operation"}
}

// ckptError is the FSEnd of an engine's error.
func ckptError(err error) wire.FSEnd {
	code := "EIO"
	switch {
	case err == nil:
		return wire.FSEnd{}
	case errors.Is(err, errNoCkpt):
		code = wire.CodeNoCkpt
	case errors.Is(err, context.Canceled), errors.Is(err, errStreamEnded):
		return wire.FSEnd{Err: wire.CodeCancelled}
	case errors.Is(err, checkpoint.ErrNotFound):
		code = wire.CodeNotFound
	case errors.Is(err, checkpoint.ErrCorrupt):
		code = wire.CodeCorrupt
	case errors.Is(err, checkpoint.ErrNotEmpty):
		code = wire.CodeNotEmpty
	case errors.Is(err, checkpoint.ErrNotFile):
		code = wire.CodeNotFile
	case errors.Is(err, checkpoint.ErrBadArchive), errors.Is(err, errShort):
		code = wire.CodeBadArchive
	}
	return wire.FSEnd{Err: code, Msg: wire.CapText(err.Error(), 200)}
}

func capMessage(m string) string {
	if len(m) <= wire.MaxCkptMessage {
		return m
	}
	return wire.CapText(m, wire.MaxCkptMessage)
}

func capSkipped(s []checkpoint.Skip) []checkpoint.Skip {
	if len(s) > wire.MaxCkptSkipped {
		return s[:wire.MaxCkptSkipped]
	}
	return s
}

// dataWriter sends what is written as the stream's data, within its
// credit.
type dataWriter struct {
	c  *channel
	id uint32
	st *fsStream
}

var errStreamEnded = errors.New("the request was stopped")

func (w dataWriter) Write(p []byte) (int, error) {
	if !w.c.sendData(w.id, w.st, p) {
		return 0, errStreamEnded
	}
	return len(p), nil
}

// lines sends JSON values, one a line, gathered into frames of about a
// chunk.
type lines struct {
	w       dataWriter
	buf     []byte
	tooLong bool
}

func newLines(c *channel, id uint32, st *fsStream) *lines {
	return &lines{w: dataWriter{c, id, st}}
}

// add sends v (once a chunk is gathered); false when the stream was
// stopped, or v is over wire.MaxCkptLine (which a path of at most 512
// names of NAME_MAX and a cut message never are).
func (l *lines) add(v any) bool {
	b, _ := json.Marshal(v)
	if len(b) >= wire.MaxCkptLine {
		l.tooLong = true
		return false
	}
	l.buf = append(append(l.buf, b...), '\n')
	if len(l.buf) >= wire.ChunkSize {
		_, err := l.w.Write(l.buf)
		l.buf = l.buf[:0]
		return err == nil
	}
	return true
}

// failed is the end of a request whose add failed.
func (l *lines) failed() wire.FSEnd {
	if l.tooLong {
		return wire.FSEnd{Err: "EIO", Msg: fmt.Sprintf("an entry of the answer is over %d bytes", wire.MaxCkptLine)}
	}
	return wire.FSEnd{Err: wire.CodeCancelled}
}

func (l *lines) end() wire.FSEnd {
	if len(l.buf) > 0 {
		if _, err := l.w.Write(l.buf); err != nil {
			return wire.FSEnd{Err: wire.CodeCancelled}
		}
	}
	return wire.FSEnd{}
}

// importReader reads an import's bytes as the server sends them (queued
// by writeFS within the credit granted), giving credit back as they are
// read; it ends with io.EOF only once the commit came and matches what was
// read, so that ImportTar, which reads its stream to the end before it
// restores anything, restores only the bytes the server meant.
type importReader struct {
	c    *channel
	id   uint32
	st   *fsStream
	sum  hash.Hash
	size int64
	cur  []byte
	err  error
}

var errShort = errors.New("the stream's bytes are not those the server sent")

func (r *importReader) Read(p []byte) (int, error) {
	for len(r.cur) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		st := r.st
		st.mu.Lock()
		for len(st.queue) == 0 && st.commit == nil && !st.closed {
			st.cond.Wait()
		}
		switch {
		case len(st.queue) > 0:
			r.cur = st.queue[0]
			st.queue = st.queue[1:]
			st.queued -= len(r.cur)
			st.mu.Unlock()
			r.sum.Write(r.cur)
			r.size += int64(len(r.cur))
			r.c.send(wire.KindCredit, r.id, wire.Credit(len(r.cur)))
		case st.commit != nil:
			commit := st.commit
			st.mu.Unlock()
			if commit.Size != r.size || hex.EncodeToString(r.sum.Sum(nil)) != commit.SHA256 {
				r.err = errShort
			} else {
				r.err = io.EOF
			}
		default:
			st.mu.Unlock()
			r.err = errStreamEnded
		}
	}
	n := copy(p, r.cur)
	r.cur = r.cur[n:]
	return n, nil
}
