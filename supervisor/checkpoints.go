package supervisor

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"
	"syscall"

	"github.com/sandbox-mcp/sandbox-mcp/checkpoint"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor/wire"
)

// Checkpoints are the checkpoints (SPEC §18) a box's supervisor keeps of
// its user-data (wire/kinds.go, KindCkpt): the store and the tree are the
// supervisor's own, given on its command line; a request names neither.
//
// Everything an answer holds came from inside the box, where a command
// can write the store: ids, paths, entries and counts are checked before
// they are returned (a malformed one ends the call with wire.ErrProtocol),
// lists are bounded (wire.MaxCkptList, wire.MaxCkptChanges), a file's bytes
// are counted against the size its entry declared, and messages are cut
// to wire.MaxCkptMessage.
type Checkpoints struct{ link *Link }

// NewCheckpoints returns the checkpoints of l's box.
func NewCheckpoints(l *Link) *Checkpoints { return &Checkpoints{link: l} }

// try runs op on the link's channel, again on a new one when the first was
// gone before the supervisor had the request — or at any point, for a
// request that changes nothing.
func (k *Checkpoints) try(ctx context.Context, idempotent bool, op func(c *Conn) error) error {
	return (&FS{link: k.link}).try(ctx, idempotent, op)
}

// Save saves user-data as a checkpoint, then prunes the store to maxBytes
// (0: no bound).
func (k *Checkpoints) Save(ctx context.Context, opts checkpoint.SaveOptions, maxBytes int64) (checkpoint.SaveResult, error) {
	req := wire.CkptRequest{Op: wire.CkptSave, Message: opts.Message, Auto: opts.Auto, Force: opts.Force, MaxBytes: maxBytes}
	var end *wire.FSEnd
	err := k.try(ctx, false, func(c *Conn) (err error) {
		end, err = c.ckptLines(ctx, req, nil)
		return err
	})
	if err != nil {
		return checkpoint.SaveResult{}, err
	}
	ck := end.Ckpt
	if ck == nil || ck.Info == nil || !validInfo(ck.Info, false) {
		return checkpoint.SaveResult{}, badAnswer("save")
	}
	skipped, err := checkSkipped(ck.Skipped)
	if err != nil {
		return checkpoint.SaveResult{}, err
	}
	return checkpoint.SaveResult{Info: *ck.Info, Saved: ck.Saved, Skipped: skipped}, nil
}

// List lists the checkpoints, oldest first.
func (k *Checkpoints) List(ctx context.Context) ([]checkpoint.Info, error) {
	var out []checkpoint.Info
	err := k.try(ctx, true, func(c *Conn) error {
		out = out[:0]
		_, err := c.ckptLines(ctx, wire.CkptRequest{Op: wire.CkptList}, func(line []byte) error {
			var in checkpoint.Info
			if err := json.Unmarshal(line, &in); err != nil || !validInfo(&in, false) {
				return badAnswer("list")
			}
			if len(out) == wire.MaxCkptList {
				return fmt.Errorf("%w: over %d checkpoints listed", wire.ErrProtocol, wire.MaxCkptList)
			}
			out = append(out, in)
			return nil
		})
		return err
	})
	return out, err
}

// Changes lists what differs from checkpoint from to checkpoint to ("":
// user-data as it is now).
func (k *Checkpoints) Changes(ctx context.Context, from, to string) ([]checkpoint.Change, error) {
	var out []checkpoint.Change
	err := k.try(ctx, true, func(c *Conn) error {
		out = out[:0]
		_, err := c.ckptLines(ctx, wire.CkptRequest{Op: wire.CkptChanges, From: from, To: to}, changeLine(&out))
		return err
	})
	return out, err
}

// Restore puts user-data back as checkpoint id holds it, saving it first
// (an automatic checkpoint with undoMessage: the result's Undo), then
// (maxBytes > 0) prunes the oldest to maxBytes.
func (k *Checkpoints) Restore(ctx context.Context, id, undoMessage string, maxBytes int64) (checkpoint.RestoreResult, error) {
	var res checkpoint.RestoreResult
	var end *wire.FSEnd
	err := k.try(ctx, false, func(c *Conn) (err error) {
		res.Changes = res.Changes[:0]
		end, err = c.ckptLines(ctx, wire.CkptRequest{Op: wire.CkptRestore, ID: id, UndoMessage: undoMessage, MaxBytes: maxBytes}, changeLine(&res.Changes))
		return err
	})
	if err != nil {
		return checkpoint.RestoreResult{}, err
	}
	ck := end.Ckpt
	if ck == nil || ck.Undo == nil || !validInfo(ck.Undo, true) || ck.Cut < 0 {
		return checkpoint.RestoreResult{}, badAnswer("restore")
	}
	if res.Skipped, err = checkSkipped(ck.Skipped); err != nil {
		return checkpoint.RestoreResult{}, err
	}
	res.Undo = *ck.Undo
	return res, nil
}

// Open opens the content of the regular file rel (relative to user-data)
// as checkpoint id holds it. Its bytes are counted against the entry's
// size; the supervisor checked them against the entry's hash as it read
// them.
func (k *Checkpoints) Open(ctx context.Context, id, rel string) (io.ReadCloser, checkpoint.Entry, error) {
	clean := path.Clean(rel)
	if !validRel(clean) {
		return nil, checkpoint.Entry{}, fmt.Errorf("checkpoint: %s: %w", strings.ToValidUTF8(wire.CapText(rel, 200), "?"), checkpoint.ErrNotFound)
	}
	var f *file
	var entry checkpoint.Entry
	err := k.try(ctx, true, func(c *Conn) (err error) {
		f, entry, err = c.ckptOpen(ctx, id, clean)
		return err
	})
	if err != nil {
		return nil, entry, err
	}
	return f, entry, nil
}

func (c *Conn) ckptOpen(ctx context.Context, id, rel string) (*file, checkpoint.Entry, error) {
	sid, fc, err := c.startCkpt(wire.CkptRequest{Op: wire.CkptOpen, ID: id, Path: rel})
	if err != nil {
		return nil, checkpoint.Entry{}, err
	}
	if err := c.waitFS(ctx, fc, func() bool { return fc.info != nil || fc.end != nil }); err != nil {
		c.endFS(sid, fc)
		return nil, checkpoint.Entry{}, err
	}
	fc.mu.Lock()
	info, end := fc.info, fc.end
	fc.mu.Unlock()
	if info == nil {
		c.endFS(sid, fc)
		if err := endError(end); err != nil {
			return nil, checkpoint.Entry{}, err
		}
		return nil, checkpoint.Entry{}, badAnswer("open")
	}
	e := *info.Entry // checked by onInfo: a regular file of info.Size bytes
	if e.Path != rel {
		c.endFS(sid, fc)
		return nil, checkpoint.Entry{}, badAnswer("open")
	}
	fi := wire.FSInfo{Mode: syscall.S_IFREG | uint32(e.Mode.Perm()), Size: e.Size, MtimeNS: e.ModTime.UnixNano()}
	return &file{c: c, id: sid, fc: fc, ctx: ctx, name: rel, fi: fi.FileInfo(path.Base(rel))}, e, nil
}

// Export writes checkpoint id to w as a tar stream (checkpoint.Store.
// ExportTar, run in the box). The bytes pass within the channel's credit;
// the stream is whole only when Export returns nil.
func (k *Checkpoints) Export(ctx context.Context, id string, w io.Writer) error {
	wrote := false
	return k.try(ctx, true, func(c *Conn) error {
		if wrote {
			return errors.New("checkpoint: export: the channel failed partway")
		}
		return c.ckptExport(ctx, id, w, &wrote)
	})
}

func (c *Conn) ckptExport(ctx context.Context, id string, w io.Writer, wrote *bool) error {
	sid, fc, err := c.startCkpt(wire.CkptRequest{Op: wire.CkptExport, ID: id})
	if err != nil {
		return err
	}
	defer c.endFS(sid, fc)
	for {
		if err := c.waitFS(ctx, fc, func() bool { return len(fc.chunks) > 0 || fc.end != nil }); err != nil {
			return err
		}
		fc.mu.Lock()
		chunks, end := fc.chunks, fc.end
		fc.chunks, fc.pending = nil, 0
		fc.mu.Unlock()
		for _, b := range chunks {
			*wrote = true
			if _, err := w.Write(b); err != nil {
				return fmt.Errorf("checkpoint: export: %w", err)
			}
			c.send(wire.KindCredit, sid, wire.Credit(len(b)))
		}
		if len(chunks) == 0 && end != nil {
			return endError(end)
		}
	}
}

// Import makes a checkpoint of the tar stream r and restores user-data to
// it (checkpoint.Store.ImportTar, run in the box; user-data must hold no
// files). The bytes are checked there against their size and sha256
// before anything is restored.
func (k *Checkpoints) Import(ctx context.Context, r io.Reader, message string) (checkpoint.Info, error) {
	c, err := k.link.Conn(ctx)
	if err != nil {
		return checkpoint.Info{}, err
	}
	sid, fc, err := c.startCkpt(wire.CkptRequest{Op: wire.CkptImport, Message: message})
	if err != nil {
		return checkpoint.Info{}, err
	}
	if err := c.waitFS(ctx, fc, func() bool { return fc.credit > 0 || fc.end != nil }); err != nil {
		c.endFS(sid, fc)
		return checkpoint.Info{}, err
	}
	w := &writer{c: c, id: sid, fc: fc, ctx: ctx, name: "checkpoint import", sum: sha256.New()}
	if _, err := io.CopyBuffer(w, onlyReader{r}, make([]byte, wire.ChunkSize)); err != nil {
		w.done = true
		c.endFS(sid, fc)
		if w.err != nil {
			return checkpoint.Info{}, unwrapPath(w.err)
		}
		return checkpoint.Info{}, fmt.Errorf("checkpoint: import: %w", err)
	}
	if err := w.Close(); err != nil {
		return checkpoint.Info{}, unwrapPath(err)
	}
	fc.mu.Lock()
	end := fc.end
	fc.mu.Unlock()
	if end == nil || end.Ckpt == nil || end.Ckpt.Info == nil || !validInfo(end.Ckpt.Info, false) {
		return checkpoint.Info{}, badAnswer("import")
	}
	return *end.Ckpt.Info, nil
}

// unwrapPath drops the PathError the writer wraps its errors in (its name
// is not a path).
func unwrapPath(err error) error {
	var pe interface{ Unwrap() error }
	if errors.As(err, &pe) {
		if inner := pe.Unwrap(); inner != nil {
			return inner
		}
	}
	return err
}

// onlyReader hides a reader's WriteTo, so that io.CopyBuffer uses the
// buffer given.
type onlyReader struct{ io.Reader }

// The fsCall ops of checkpoint requests, by what their streams carry.
var (
	ckptOpen   = "ckpt-" + wire.CkptOpen
	ckptImport = "ckpt-" + wire.CkptImport
	// ckptData: requests answered with data frames (JSON lines, a tar).
	ckptData = map[string]bool{"ckpt-" + wire.CkptList: true, "ckpt-" + wire.CkptChanges: true,
		"ckpt-" + wire.CkptRestore: true, "ckpt-" + wire.CkptExport: true}
)

// startCkpt opens a checkpoint request's stream (startFS's, with
// KindCkpt).
func (c *Conn) startCkpt(req wire.CkptRequest) (uint32, *fsCall, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return 0, nil, err
	}
	return c.startStream(wire.KindCkpt, "ckpt-"+req.Op, body)
}

// ckptLines runs a request that answers with JSON values, one a line
// (each passed to line, which may be nil when none may come), and its
// end.
func (c *Conn) ckptLines(ctx context.Context, req wire.CkptRequest, line func([]byte) error) (*wire.FSEnd, error) {
	id, fc, err := c.startCkpt(req)
	if err != nil {
		return nil, err
	}
	defer c.endFS(id, fc)
	var buf []byte
	for {
		if err := c.waitFS(ctx, fc, func() bool { return len(fc.chunks) > 0 || fc.end != nil }); err != nil {
			return nil, err
		}
		fc.mu.Lock()
		chunks, end := fc.chunks, fc.end
		fc.chunks, fc.pending = nil, 0
		fc.mu.Unlock()
		n := 0
		for _, b := range chunks {
			buf = append(buf, b...)
			n += len(b)
		}
		if n > 0 {
			if line == nil {
				return nil, badAnswer(req.Op)
			}
			c.send(wire.KindCredit, id, wire.Credit(n))
		}
		for {
			i := bytes.IndexByte(buf, '\n')
			if i < 0 {
				break
			}
			if err := line(buf[:i]); err != nil {
				return nil, err
			}
			buf = buf[i+1:]
		}
		if len(buf) >= wire.MaxCkptLine {
			return nil, fmt.Errorf("%w: a checkpoint answer's line of over %d bytes", wire.ErrProtocol, wire.MaxCkptLine)
		}
		if len(chunks) == 0 && end != nil {
			if err := endError(end); err != nil {
				return nil, err
			}
			if len(buf) > 0 {
				return nil, badAnswer(req.Op)
			}
			return end, nil
		}
	}
}

// changeLine takes one change of an answer into *out, checked.
func changeLine(out *[]checkpoint.Change) func([]byte) error {
	return func(line []byte) error {
		var ch checkpoint.Change
		if err := json.Unmarshal(line, &ch); err != nil || !validChange(&ch) {
			return badAnswer("changes")
		}
		if len(*out) == wire.MaxCkptChanges {
			return fmt.Errorf("%w: over %d changes listed", wire.ErrProtocol, wire.MaxCkptChanges)
		}
		*out = append(*out, ch)
		return nil
	}
}

func badAnswer(op string) error {
	return fmt.Errorf("%w: a malformed checkpoint %s answer", wire.ErrProtocol, op)
}

// validID reports whether id is a checkpoint id: "1", "2", ... (what the
// engine makes).
func validID(id string) bool {
	if id == "" || len(id) > 9 || id[0] == '0' {
		return false
	}
	for _, c := range id {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// validInfo checks a checkpoint's description, and cuts its message;
// emptyOK takes an Info with no id (a restore's Undo without one).
func validInfo(in *checkpoint.Info, emptyOK bool) bool {
	if !(validID(in.ID) || emptyOK && in.ID == "") {
		return false
	}
	if in.Added < 0 || in.Modified < 0 || in.Deleted < 0 || in.Files < 0 || in.Size < 0 {
		return false
	}
	in.Message = cutMessage(in.Message)
	return true
}

// cutMessage bounds a message from the box, and makes it valid UTF-8.
func cutMessage(m string) string {
	if len(m) > wire.MaxCkptMessage {
		m = m[:wire.MaxCkptMessage]
	}
	return strings.ToValidUTF8(m, "\uFFFD")
}

// validRel reports whether p is a clean path relative to user-data that
// a checkpoint may hold: components the engine's tree rules take, no NUL.
func validRel(p string) bool {
	if p == "" || p == "." || len(p) > 1<<16 || path.Clean(p) != p || path.IsAbs(p) {
		return false
	}
	for _, part := range strings.Split(p, "/") {
		if part == "" || part == "." || part == ".." || len(part) > 4096 || strings.IndexByte(part, 0) >= 0 {
			return false
		}
	}
	return true
}

// validEntry checks one entry of an answer, at rel.
func validEntry(e *checkpoint.Entry, rel string) bool {
	if e.Path != rel || e.Size < 0 || len(e.Target) > 1<<16 || strings.IndexByte(e.Target, 0) >= 0 || len(e.Skipped) > 64 {
		return false
	}
	if e.Hash != "" && !validHex64(e.Hash) {
		return false
	}
	switch t := e.Mode.Type(); t {
	case 0:
		return validHex64(e.Hash) && e.Target == ""
	case fs.ModeDir:
		return e.Hash == "" && e.Target == ""
	case fs.ModeSymlink:
		return e.Hash == "" && e.Target != ""
	case fs.ModeIrregular:
		return e.Hash == ""
	}
	return false
}

func validHex64(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// validChange checks one change of an answer.
func validChange(ch *checkpoint.Change) bool {
	if !validRel(ch.Path) {
		return false
	}
	switch ch.Kind {
	case checkpoint.Added:
		return ch.Old == nil && ch.New != nil && validEntry(ch.New, ch.Path)
	case checkpoint.Deleted:
		return ch.New == nil && ch.Old != nil && validEntry(ch.Old, ch.Path)
	case checkpoint.Modified:
		return ch.Old != nil && ch.New != nil && validEntry(ch.Old, ch.Path) && validEntry(ch.New, ch.Path)
	}
	return false
}

// checkSkipped checks the skipped paths of an answer.
func checkSkipped(list []checkpoint.Skip) ([]checkpoint.Skip, error) {
	if len(list) > wire.MaxCkptSkipped {
		return nil, badAnswer("skipped")
	}
	for i := range list {
		if !validRel(list[i].Path) {
			return nil, badAnswer("skipped")
		}
		list[i].Reason = wire.CapText(list[i].Reason, 64)
	}
	return list, nil
}

// ckptEndError is the error of a checkpoint request's end code: the
// engine's sentinels, with the supervisor's message (one line, cut).
func ckptEndError(e *wire.FSEnd) error {
	var sentinel error
	switch e.Err {
	case wire.CodeNoCkpt:
		sentinel = ErrNoCheckpoints
	case wire.CodeNotFound:
		sentinel = checkpoint.ErrNotFound
	case wire.CodeCorrupt:
		sentinel = checkpoint.ErrCorrupt
	case wire.CodeNotEmpty:
		sentinel = checkpoint.ErrNotEmpty
	case wire.CodeNotFile:
		sentinel = checkpoint.ErrNotFile
	case wire.CodeBadArchive:
		sentinel = checkpoint.ErrBadArchive
	default:
		return nil
	}
	msg := strings.ToValidUTF8(e.Msg, "?")
	if msg == "" {
		msg = sentinel.Error()
	}
	return &ckptError{msg: msg, err: sentinel}
}

// ErrNoCheckpoints: the box's supervisor keeps no checkpoints (it was
// started without a store).
var ErrNoCheckpoints = errors.New("the sandbox's supervisor keeps no checkpoints")

// ckptError is an error from the box with its own text that is also err
// (errors.Is).
type ckptError struct {
	msg string
	err error
}

func (e *ckptError) Error() string { return e.msg }
func (e *ckptError) Unwrap() error { return e.err }
