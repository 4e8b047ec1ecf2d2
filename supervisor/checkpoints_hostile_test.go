package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/checkpoint"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor/wire"
)

// ckptFake is a supervisor played by the test, for checkpoint requests.
type ckptFake struct {
	fw       wire.Writer
	requests chan wire.CkptRequest
	ids      chan uint32
}

func newCkptFake(t *testing.T) (*ckptFake, *Checkpoints, *Conn) {
	t.Helper()
	cr, sw := io.Pipe()
	sr, cw := io.Pipe()
	f := &ckptFake{fw: wire.Writer{W: sw}, requests: make(chan wire.CkptRequest, 16), ids: make(chan uint32, 16)}
	go func() {
		fr := wire.Reader{R: sr}
		for {
			fm, err := fr.Read()
			if err != nil {
				return
			}
			if fm.Kind == wire.KindCkpt {
				var req wire.CkptRequest
				json.Unmarshal(fm.Payload, &req)
				f.requests <- req
				f.ids <- fm.Stream
			}
		}
	}()
	hello, _ := json.Marshal(wire.Hello{Protocol: wire.Protocol, Shell: "/bin/sh"})
	go f.fw.Write(wire.KindHello, 0, hello)
	c, err := NewConn(context.Background(), cr, cw, closerFunc(func() error { sw.Close(); sr.Close(); return nil }))
	if err != nil {
		t.Fatal(err)
	}
	dialed := false
	l := NewLink(func(context.Context) (*Conn, error) {
		if dialed {
			return nil, errors.New("fake: no second channel")
		}
		dialed = true
		return c, nil
	})
	t.Cleanup(l.Close)
	return f, NewCheckpoints(l), c
}

func (f *ckptFake) request(t *testing.T) (wire.CkptRequest, uint32) {
	t.Helper()
	select {
	case req := <-f.requests:
		return req, <-f.ids
	case <-time.After(5 * time.Second):
		t.Fatal("no request")
		return wire.CkptRequest{}, 0
	}
}

func (f *ckptFake) send(kind wire.Kind, id uint32, v any) {
	b, _ := json.Marshal(v)
	f.fw.Write(kind, id, b)
}

func (f *ckptFake) lines(id uint32, vs ...any) {
	var b []byte
	for _, v := range vs {
		j, _ := json.Marshal(v)
		b = append(append(b, j...), '\n')
	}
	f.fw.Write(wire.KindFSData, id, b)
}

var (
	goodHash = strings.Repeat("ab", 32)
	goodFile = &checkpoint.Entry{Path: "workspace/a", Mode: 0o644, Size: 3, Hash: goodHash}
)

// Whatever a box answers is checked: a malformed answer fails the call
// (and ends the channel), never reaches the caller.
func TestCheckpointsHostileAnswers(t *testing.T) {
	ctx := context.Background()
	entry := func(p string, mode fs.FileMode, hash, target string) *checkpoint.Entry {
		return &checkpoint.Entry{Path: p, Mode: mode, Hash: hash, Target: target}
	}
	badChanges := map[string]checkpoint.Change{
		"dotdot":         {Path: "../etc/passwd", Kind: checkpoint.Added, New: entry("../etc/passwd", 0o644, goodHash, "")},
		"absolute":       {Path: "/etc/passwd", Kind: checkpoint.Added, New: entry("/etc/passwd", 0o644, goodHash, "")},
		"unclean":        {Path: "workspace//a", Kind: checkpoint.Added, New: entry("workspace//a", 0o644, goodHash, "")},
		"NUL":            {Path: "work\x00space", Kind: checkpoint.Added, New: entry("work\x00space", 0o644, goodHash, "")},
		"kind":           {Path: "a", Kind: "exploded", New: entry("a", 0o644, goodHash, "")},
		"added with old": {Path: "a", Kind: checkpoint.Added, Old: entry("a", 0o644, goodHash, ""), New: entry("a", 0o644, goodHash, "")},
		"entry path":     {Path: "a", Kind: checkpoint.Added, New: entry("b", 0o644, goodHash, "")},
		"bad hash":       {Path: "a", Kind: checkpoint.Added, New: entry("a", 0o644, "zz", "")},
		"device":         {Path: "a", Kind: checkpoint.Added, New: entry("a", fs.ModeDevice|0o644, "", "")},
		"link NUL":       {Path: "a", Kind: checkpoint.Added, New: entry("a", fs.ModeSymlink, "", "x\x00y")},
		"deleted no old": {Path: "a", Kind: checkpoint.Deleted, New: entry("a", 0o644, goodHash, "")},
	}
	for name, ch := range badChanges {
		t.Run("changes "+name, func(t *testing.T) {
			f, k, c := newCkptFake(t)
			wait := async(func() error { _, err := k.Changes(ctx, "1", ""); return err })
			_, id := f.request(t)
			good := checkpoint.Change{Path: "workspace/a", Kind: checkpoint.Added, New: goodFile}
			f.lines(id, good, ch)
			f.send(wire.KindFSEnd, id, wire.FSEnd{})
			err := wait(t)
			if !errors.Is(err, wire.ErrProtocol) {
				t.Fatalf("a hostile change was taken: %v", err)
			}
			_ = c
		})
	}

	badInfos := map[string]checkpoint.Info{
		"leading zero": {ID: "01"},
		"not a number": {ID: "../1"},
		"empty":        {ID: ""},
		"negative":     {ID: "3", Files: -1},
	}
	for name, in := range badInfos {
		t.Run("list "+name, func(t *testing.T) {
			f, k, _ := newCkptFake(t)
			wait := async(func() error { _, err := k.List(ctx); return err })
			_, id := f.request(t)
			f.lines(id, checkpoint.Info{ID: "1"}, in)
			f.send(wire.KindFSEnd, id, wire.FSEnd{})
			if err := wait(t); !errors.Is(err, wire.ErrProtocol) {
				t.Fatalf("a hostile info was taken: %v", err)
			}
		})
	}

	t.Run("message cut", func(t *testing.T) {
		f, k, _ := newCkptFake(t)
		var list []checkpoint.Info
		wait := async(func() (err error) { list, err = k.List(ctx); return err })
		_, id := f.request(t)
		f.lines(id, checkpoint.Info{ID: "1", Message: strings.Repeat("m", 100_000)})
		f.send(wire.KindFSEnd, id, wire.FSEnd{})
		if err := wait(t); err != nil || len(list) != 1 || len(list[0].Message) != wire.MaxCkptMessage {
			t.Fatalf("list %d, %v", len(list), err)
		}
	})

	t.Run("endless line", func(t *testing.T) {
		f, k, _ := newCkptFake(t)
		wait := async(func() error { _, err := k.List(ctx); return err })
		_, id := f.request(t)
		go func() {
			chunk := []byte(strings.Repeat("x", wire.ChunkSize))
			for range wire.MaxCkptLine/wire.ChunkSize + 2 {
				if f.fw.Write(wire.KindFSData, id, chunk) != nil {
					return
				}
			}
		}()
		if err := wait(t); err == nil || !strings.Contains(err.Error(), "line of over") {
			t.Fatalf("an endless line: %v", err)
		}
	})

	t.Run("save without its answer", func(t *testing.T) {
		f, k, _ := newCkptFake(t)
		wait := async(func() error { _, err := k.Save(ctx, checkpoint.SaveOptions{}, 0); return err })
		_, id := f.request(t)
		f.send(wire.KindFSEnd, id, wire.FSEnd{})
		if err := wait(t); !errors.Is(err, wire.ErrProtocol) {
			t.Fatalf("a save answered nothing: %v", err)
		}
	})

	t.Run("save with data", func(t *testing.T) {
		f, k, _ := newCkptFake(t)
		wait := async(func() error { _, err := k.Save(ctx, checkpoint.SaveOptions{}, 0); return err })
		_, id := f.request(t)
		f.lines(id, checkpoint.Info{ID: "1"})
		f.send(wire.KindFSEnd, id, wire.FSEnd{Ckpt: &wire.CkptEnd{Info: &checkpoint.Info{ID: "1"}}})
		if err := wait(t); !errors.Is(err, wire.ErrProtocol) {
			t.Fatalf("a save answered data: %v", err)
		}
	})

	t.Run("restore negative cut, skipped outside", func(t *testing.T) {
		for _, end := range []wire.CkptEnd{
			{Undo: &checkpoint.Info{ID: "2"}, Cut: -1},
			{Undo: &checkpoint.Info{ID: "2"}, Skipped: []checkpoint.Skip{{Path: "../x", Reason: "fifo"}}},
			{},
		} {
			f, k, _ := newCkptFake(t)
			wait := async(func() error { _, err := k.Restore(ctx, "1", "", 0); return err })
			_, id := f.request(t)
			f.send(wire.KindFSEnd, id, wire.FSEnd{Ckpt: &end})
			if err := wait(t); !errors.Is(err, wire.ErrProtocol) {
				t.Fatalf("restore answer %+v taken: %v", end, err)
			}
		}
	})

	t.Run("open", func(t *testing.T) {
		for name, info := range map[string]wire.FSInfo{
			"no entry":     {Size: 3},
			"a directory":  {Entry: &checkpoint.Entry{Path: "workspace/a", Mode: fs.ModeDir | 0o755}},
			"size differs": {Size: 3, Entry: &checkpoint.Entry{Path: "workspace/a", Mode: 0o644, Size: 4, Hash: goodHash}},
			"another path": {Size: 3, Entry: &checkpoint.Entry{Path: "workspace/b", Mode: 0o644, Size: 3, Hash: goodHash}},
		} {
			t.Run(name, func(t *testing.T) {
				f, k, _ := newCkptFake(t)
				wait := async(func() error { _, _, err := k.Open(ctx, "1", "workspace/a"); return err })
				_, id := f.request(t)
				f.send(wire.KindFSInfo, id, info)
				if err := wait(t); err == nil {
					t.Fatalf("open answer %+v taken", info)
				}
			})
		}
		// More bytes than the entry's size: the channel ends.
		f, k, c := newCkptFake(t)
		var data []byte
		wait := async(func() error {
			r, _, err := k.Open(ctx, "1", "workspace/a")
			if err != nil {
				return err
			}
			data, err = io.ReadAll(r)
			return err
		})
		_, id := f.request(t)
		f.send(wire.KindFSInfo, id, wire.FSInfo{Size: 3, Entry: goodFile})
		f.fw.Write(wire.KindFSData, id, []byte("abcdef"))
		f.send(wire.KindFSEnd, id, wire.FSEnd{})
		if err := wait(t); err == nil || len(data) > 3 {
			t.Fatalf("read %q, %v", data, err)
		}
		if c.Err() == nil || !strings.Contains(c.Err().Error(), "more bytes than") {
			t.Fatalf("channel err %v", c.Err())
		}
	})

	t.Run("a checkpoint answer to a stat", func(t *testing.T) {
		f, fsys, c := newFSFake(t)
		wait := async(func() error { _, err := fsys.Stat(ctx, "/x"); return err })
		id := f.request(t)
		f.end(id, wire.FSEnd{Ckpt: &wire.CkptEnd{Info: &checkpoint.Info{ID: "1"}}})
		wantFailed(t, wait(t), c, "unexpected checkpoint answer")
	})

	t.Run("error codes", func(t *testing.T) {
		for code, want := range map[string]error{
			wire.CodeNotFound:   checkpoint.ErrNotFound,
			wire.CodeCorrupt:    checkpoint.ErrCorrupt,
			wire.CodeNoCkpt:     ErrNoCheckpoints,
			wire.CodeBadArchive: checkpoint.ErrBadArchive,
		} {
			f, k, _ := newCkptFake(t)
			wait := async(func() error { _, err := k.List(ctx); return err })
			_, id := f.request(t)
			f.send(wire.KindFSEnd, id, wire.FSEnd{Err: code, Msg: "checkpoint: said\nthe box"})
			err := wait(t)
			if !errors.Is(err, want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("%s: %v", code, err)
			}
		}
	})
}
