package supervisor

import (
	"context"
	"encoding/json"
	"io"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/supervisor/wire"
)

func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// Output in tiny frames costs the server what it carries, not a buffer
// a frame: 4000 one-byte frames while the output's consumer is blocked
// hold kilobytes, and an empty frame ends the channel.
func TestHostileTinyOutputFrames(t *testing.T) {
	f, c := newFake(t)
	block := make(chan struct{})
	defer close(block)
	go c.Exec(context.Background(), ExecRequest{Argv: []string{"x"}, Output: writerFunc(func(p []byte) (int, error) { <-block; return len(p), nil })})
	time.Sleep(20 * time.Millisecond)
	before := heapInUse()
	for range 4000 {
		if err := f.fw.Write(wire.KindOutput, 1, []byte{'x'}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(50 * time.Millisecond)
	if grew := int64(heapInUse()) - int64(before); grew > 4<<20 {
		t.Fatalf("4000 one-byte frames hold %d KiB", grew>>10)
	}
	if err := f.fw.Write(wire.KindOutput, 1, nil); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for c.Err() == nil && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if c.Err() == nil || !strings.Contains(c.Err().Error(), "empty output frame") {
		t.Fatalf("an empty output frame: channel err %v", c.Err())
	}
}

// A supervisor that stops reading cannot hold a cancelled call: the kill's
// write is bounded (sendTimeout), the channel fails and the call returns.
func TestHostileSupervisorStopsReading(t *testing.T) {
	cr, sw := io.Pipe()
	sr, cw := io.Pipe()
	fw := wire.Writer{W: sw}
	got := make(chan struct{})
	go func() { // reads the exec frame, then never again
		fr := wire.Reader{R: sr}
		fr.Read()
		close(got)
	}()
	hello, _ := json.Marshal(wire.Hello{Protocol: wire.Protocol, Shell: "/bin/sh"})
	go fw.Write(wire.KindHello, 0, hello)
	c, err := NewConn(context.Background(), cr, cw, closerFunc(func() error { sw.Close(); cw.Close(); return nil }))
	if err != nil {
		t.Fatal(err)
	}
	c.sendTimeout = 300 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, err := c.Exec(ctx, ExecRequest{Argv: []string{"x"}}); done <- err }()
	<-got
	cancel()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a cancelled call on a channel that stopped reading returned no error")
		}
	case <-time.After(killGrace + 2*time.Second):
		t.Fatal("a cancelled call hangs on a supervisor that stopped reading")
	}
	if c.Err() == nil {
		t.Fatal("the channel did not fail")
	}
}

// Frames that carry nothing (an empty listing or read chunk, zero credit)
// end the channel: they would keep a file operation waiting with no bound.
func TestHostileEmptyFSFrames(t *testing.T) {
	for _, tc := range []struct {
		name    string
		op      func(fsys *FS) error
		prep    func(f *fsFake, id uint32)
		kind    wire.Kind
		payload []byte
	}{
		{"readdir", func(fsys *FS) error { _, err := fsys.ReadDir(context.Background(), "/d"); return err }, nil, wire.KindFSEntries, nil},
		{"read", func(fsys *FS) error {
			r, err := fsys.Open(context.Background(), "/f")
			if err != nil {
				return err
			}
			_, err = io.ReadAll(r)
			return err
		}, func(f *fsFake, id uint32) { f.info(id, wire.FSInfo{Mode: 0o100644, Size: 10}) }, wire.KindFSData, nil},
		{"write", func(fsys *FS) error { _, err := fsys.Create(context.Background(), "/f"); return err }, nil, wire.KindCredit, []byte{0, 0, 0, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, fsys, c := newFSFake(t)
			wait := async(func() error { return tc.op(fsys) })
			id := f.request(t)
			if tc.prep != nil {
				tc.prep(f, id)
			}
			f.fw.Write(tc.kind, id, tc.payload)
			err := wait(t)
			if err == nil || c.Err() == nil {
				t.Fatalf("err %v, channel err %v", err, c.Err())
			}
		})
	}
}
