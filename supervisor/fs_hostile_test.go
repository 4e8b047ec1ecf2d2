package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/supervisor/wire"
)

// fsFake is a supervisor played by the test, for file operations: it
// sees the requests and answers what it likes.
type fsFake struct {
	fw       wire.Writer
	requests chan uint32 // the stream of each wire.KindFS
}

// newFSFake returns a fake supervisor and an FS on a link to it that
// cannot dial again: what the fake does is what the FS gets.
func newFSFake(t *testing.T) (*fsFake, *FS, *Conn) {
	t.Helper()
	cr, sw := io.Pipe()
	sr, cw := io.Pipe()
	f := &fsFake{fw: wire.Writer{W: sw}, requests: make(chan uint32, 16)}
	go func() {
		fr := wire.Reader{R: sr}
		for {
			fm, err := fr.Read()
			if err != nil {
				return
			}
			if fm.Kind == wire.KindFS {
				f.requests <- fm.Stream
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
	return f, NewFS(l, nil), c
}

// request waits for the FS's request and returns its stream.
func (f *fsFake) request(t *testing.T) uint32 {
	t.Helper()
	select {
	case id := <-f.requests:
		return id
	case <-time.After(5 * time.Second):
		t.Fatal("no request")
		return 0
	}
}

func (f *fsFake) end(id uint32, e wire.FSEnd) {
	b, _ := json.Marshal(e)
	f.fw.Write(wire.KindFSEnd, id, b)
}

func (f *fsFake) info(id uint32, i wire.FSInfo) {
	b, _ := json.Marshal(i)
	f.fw.Write(wire.KindFSInfo, id, b)
}

// async runs op and returns its error, failing the test when it hangs.
func async(op func() error) func(t *testing.T) error {
	done := make(chan error, 1)
	go func() { done <- op() }()
	return func(t *testing.T) error {
		t.Helper()
		select {
		case err := <-done:
			return err
		case <-time.After(10 * time.Second):
			t.Fatal("the operation hangs")
			return nil
		}
	}
}

// wantFailed checks that op failed with a one-line error and the channel
// ended for the reason given.
func wantFailed(t *testing.T, err error, c *Conn, why string) {
	t.Helper()
	if err == nil || strings.Contains(err.Error(), "\n") {
		t.Fatalf("err %v", err)
	}
	if c.Err() == nil || !strings.Contains(c.Err().Error(), why) {
		t.Fatalf("channel err %v, want %q", c.Err(), why)
	}
}

func TestFSHostileNames(t *testing.T) {
	for _, name := range []string{"a/b", ".", "..", "", "x\x00y", strings.Repeat("n", 256)} {
		t.Run(fmt.Sprintf("%q", name[:min(len(name), 8)]), func(t *testing.T) {
			f, fsys, c := newFSFake(t)
			wait := async(func() error { _, err := fsys.ReadDir(context.Background(), "/d"); return err })
			id := f.request(t)
			f.fw.Write(wire.KindFSEntries, id, wire.AppendEntry(wire.AppendEntry(nil, wire.Entry{Name: "ok"}), wire.Entry{Name: name}))
			f.end(id, wire.FSEnd{})
			wantFailed(t, wait(t), c, "invalid name")
		})
	}
}

func TestFSHostileListing(t *testing.T) {
	f, fsys, c := newFSFake(t)
	wait := async(func() error { _, err := fsys.ReadDir(context.Background(), "/d"); return err })
	id := f.request(t)
	var buf []byte
	for i := range wire.MaxDirEntries + 1 {
		buf = wire.AppendEntry(buf, wire.Entry{Name: fmt.Sprint(i), Info: wire.FSInfo{Mode: 0o100644}})
		if len(buf) > wire.MaxPayload-64 {
			if f.fw.Write(wire.KindFSEntries, id, buf) != nil {
				break
			}
			buf = buf[:0]
		}
	}
	f.fw.Write(wire.KindFSEntries, id, buf)
	wantFailed(t, wait(t), c, "a listing of over")

	// A cut entry, a negative size: as bad.
	for _, p := range [][]byte{{0, 5, 'a'}, wire.AppendEntry(nil, wire.Entry{Name: "a", Info: wire.FSInfo{Size: -1}})} {
		f, fsys, c := newFSFake(t)
		wait := async(func() error { _, err := fsys.ReadDir(context.Background(), "/d"); return err })
		f.fw.Write(wire.KindFSEntries, f.request(t), p)
		wantFailed(t, wait(t), c, "directory entry")
	}
}

// More bytes than the stat declared end the channel; fewer end the read
// with an error.
func TestFSHostileReadSize(t *testing.T) {
	f, fsys, c := newFSFake(t)
	wait := async(func() error {
		r, err := fsys.Open(context.Background(), "/f")
		if err != nil {
			return err
		}
		defer r.Close()
		_, err = io.ReadAll(r)
		return err
	})
	id := f.request(t)
	f.info(id, wire.FSInfo{Mode: 0o100644, Size: 5})
	f.fw.Write(wire.KindFSData, id, []byte("0123456789"))
	wantFailed(t, wait(t), c, "more bytes than the file's size")

	f, fsys, c = newFSFake(t)
	wait = async(func() error {
		r, err := fsys.Open(context.Background(), "/f")
		if err != nil {
			return err
		}
		defer r.Close()
		_, err = io.ReadAll(r)
		return err
	})
	id = f.request(t)
	f.info(id, wire.FSInfo{Mode: 0o100644, Size: 10})
	f.fw.Write(wire.KindFSData, id, []byte("01234"))
	f.end(id, wire.FSEnd{})
	if err := wait(t); err == nil || !strings.Contains(err.Error(), "incomplete (5 of 10 bytes)") {
		t.Fatalf("err %v", err)
	}
	if c.Err() != nil {
		t.Fatalf("a short read ended the channel: %v", c.Err())
	}
}

func TestFSHostileStreams(t *testing.T) {
	// A reply on a stream never opened.
	f, fsys, c := newFSFake(t)
	wait := async(func() error { _, err := fsys.Stat(context.Background(), "/f"); return err })
	id := f.request(t)
	f.end(id+7, wire.FSEnd{})
	wantFailed(t, wait(t), c, "never opened")

	// Messages an operation does not get: data on a stat, a second end.
	f, fsys, c = newFSFake(t)
	wait = async(func() error { _, err := fsys.Stat(context.Background(), "/f"); return err })
	f.fw.Write(wire.KindFSData, f.request(t), []byte("x"))
	wantFailed(t, wait(t), c, "unexpected data")

	// Credit past the wire.Window on a write.
	f, fsys, c = newFSFake(t)
	wait = async(func() error { _, err := fsys.Create(context.Background(), "/f"); return err })
	id = f.request(t)
	f.fw.Write(wire.KindCredit, id, []byte{0, 0x10, 0, 1}) // wire.Window+1
	wantFailed(t, wait(t), c, "credit over the window")

	// The supervisor ends mid-read: a clean error, no hang.
	f, fsys, c = newFSFake(t)
	wait = async(func() error {
		r, err := fsys.Open(context.Background(), "/f")
		if err != nil {
			return err
		}
		_, err = io.ReadAll(r)
		return err
	})
	id = f.request(t)
	f.info(id, wire.FSInfo{Mode: 0o100644, Size: 10})
	f.fw.Write(wire.KindFSData, id, []byte("01234"))
	f.fw.W.(*io.PipeWriter).Close()
	wantFailed(t, wait(t), c, "supervisor ended")
}

// Text from the supervisor reaches an error capped, on one line; codes
// become the sandbox's sentinels.
func TestFSHostileText(t *testing.T) {
	f, fsys, c := newFSFake(t)
	wait := async(func() error { _, err := fsys.Stat(context.Background(), "/f"); return err })
	f.end(f.request(t), wire.FSEnd{Err: "EWEIRD\n" + strings.Repeat("e", 100), Msg: strings.Repeat("line\n", 2000)})
	err := wait(t)
	if err == nil || strings.Contains(err.Error(), "\n") || len(err.Error()) > 320 || !strings.HasSuffix(err.Error(), ": /f") {
		t.Fatalf("err %q", err)
	}
	if c.Err() != nil {
		t.Fatal(c.Err())
	}
}

// A supervisor that never answers: the operation gives up, the channel
// stays.
func TestFSStalled(t *testing.T) {
	defer func(d time.Duration) { fsStall = d }(fsStall)
	fsStall = 50 * time.Millisecond
	f, fsys, c := newFSFake(t)
	wait := async(func() error { _, err := fsys.Stat(context.Background(), "/f"); return err })
	f.request(t)
	if err := wait(t); !errors.Is(err, errStalled) {
		t.Fatalf("err %v", err)
	}
	if c.Err() != nil {
		t.Fatal(c.Err())
	}
}
