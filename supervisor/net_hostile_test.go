package supervisor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor/wire"
)

// netFake is a supervisor played by the test that also reads what the
// client sends; hold stops its reading (the client's writes then block).
type netFake struct {
	fw     wire.Writer
	wm     sync.Mutex
	hold   sync.Mutex
	frames chan wire.Frame
}

func newNetFake(t *testing.T) (*netFake, *Conn) {
	t.Helper()
	cr, sw := io.Pipe() // supervisor -> client
	sr, cw := io.Pipe() // client -> supervisor
	f := &netFake{fw: wire.Writer{W: sw}, frames: make(chan wire.Frame, 1<<14)}
	go func() {
		fr := wire.Reader{R: sr}
		for {
			f.hold.Lock() // held by the test: no more reads
			f.hold.Unlock()
			fm, err := fr.Read()
			if err != nil {
				return
			}
			fm.Payload = bytes.Clone(fm.Payload)
			select {
			case f.frames <- fm:
			default: // the test reads only what it wants
			}
		}
	}()
	hello, _ := json.Marshal(wire.Hello{Protocol: wire.Protocol, Shell: "/bin/sh"})
	go f.send(wire.KindHello, 0, hello)
	c, err := NewConn(context.Background(), cr, cw, closerFunc(func() error { sw.Close(); sr.Close(); return nil }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return f, c
}

func (f *netFake) send(kind wire.Kind, id uint32, payload []byte) {
	f.wm.Lock()
	defer f.wm.Unlock()
	f.fw.Write(kind, id, payload)
}

func (f *netFake) sendJSON(kind wire.Kind, id uint32, v any) {
	b, _ := json.Marshal(v)
	f.send(kind, id, b)
}

// request waits for the client's network request.
func (f *netFake) request(t *testing.T) (uint32, wire.NetRequest) {
	t.Helper()
	for {
		select {
		case fm := <-f.frames:
			if fm.Kind != wire.KindNet {
				continue
			}
			var req wire.NetRequest
			json.Unmarshal(fm.Payload, &req)
			return fm.Stream, req
		case <-time.After(5 * time.Second):
			t.Fatal("no network request")
		}
	}
}

// listening has c Listen, answered by the fake, accepted connections
// going to the channel returned.
func (f *netFake) listening(t *testing.T, c *Conn) chan net.Conn {
	t.Helper()
	accepted := make(chan net.Conn, 1024)
	wait := async(func() error {
		_, err := c.Listen(context.Background(), nil, func(nc net.Conn) { accepted <- nc })
		return err
	})
	id, _ := f.request(t)
	f.sendJSON(wire.KindNetEnd, id, wire.NetEnd{Addr: "127.0.0.1:3128"})
	if err := wait(t); err != nil {
		t.Fatal(err)
	}
	return accepted
}

// channelEnds waits for c to fail for the reason given.
func channelEnds(t *testing.T, c *Conn, why string) {
	t.Helper()
	select {
	case <-c.Done():
	case <-time.After(5 * time.Second):
		t.Fatalf("the channel did not end (%s)", why)
	}
	if err := c.Err(); !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), why) {
		t.Fatalf("the channel ended with %v, want %q", err, why)
	}
}

// Frames a daemon should never send on a pipe end the channel.
func TestHostilePipeFrames(t *testing.T) {
	open := func(f *netFake, c *Conn) {
		f.listening(t, c)
		f.sendJSON(wire.KindNetOpen, wire.DaemonStream|1, wire.NetOpen{Peer: "127.0.0.1:5555"})
	}
	for _, tc := range []struct {
		name, why string
		do        func(f *netFake, c *Conn)
	}{
		{"an open without the supervisor's bit", "never opened", func(f *netFake, c *Conn) {
			f.listening(t, c)
			f.sendJSON(wire.KindNetOpen, 7, wire.NetOpen{})
		}},
		{"an open on a stream of another kind", "another kind", func(f *netFake, c *Conn) {
			go c.Exec(context.Background(), ExecRequest{Argv: []string{"x"}})
			time.Sleep(20 * time.Millisecond)
			f.sendJSON(wire.KindNetOpen, 1, wire.NetOpen{})
		}},
		{"an open twice", "opened twice", func(f *netFake, c *Conn) {
			open(f, c)
			f.sendJSON(wire.KindNetOpen, wire.DaemonStream|1, wire.NetOpen{})
		}},
		{"an open out of turn", "out of turn", func(f *netFake, c *Conn) {
			f.listening(t, c)
			f.sendJSON(wire.KindNetOpen, wire.DaemonStream|5, wire.NetOpen{})
			f.sendJSON(wire.KindNetOpen, wire.DaemonStream|4, wire.NetOpen{})
		}},
		{"a bad peer", "bad peer", func(f *netFake, c *Conn) {
			f.listening(t, c)
			f.sendJSON(wire.KindNetOpen, wire.DaemonStream|1, wire.NetOpen{Peer: "nowhere"})
		}},
		{"data on a supervisor's stream never opened", "never opened", func(f *netFake, c *Conn) {
			f.send(wire.KindNetData, wire.DaemonStream|3, []byte("x"))
		}},
		{"data on a stream never opened", "never opened", func(f *netFake, c *Conn) {
			f.send(wire.KindNetData, 9, []byte("x"))
		}},
		{"output on a supervisor's stream", "on the supervisor's stream", func(f *netFake, c *Conn) {
			open(f, c)
			f.send(wire.KindOutput, wire.DaemonStream|1, []byte("x"))
		}},
		{"an empty data frame", "empty data", func(f *netFake, c *Conn) {
			open(f, c)
			f.send(wire.KindNetData, wire.DaemonStream|1, nil)
		}},
		{"data beyond the credit", "more data than its credit", func(f *netFake, c *Conn) {
			open(f, c) // nobody reads the accepted connection
			chunk := make([]byte, wire.ChunkSize)
			for range wire.PipeWindow/wire.ChunkSize + 1 {
				f.send(wire.KindNetData, wire.DaemonStream|1, chunk)
			}
		}},
		{"data after EOF", "after its EOF", func(f *netFake, c *Conn) {
			open(f, c)
			f.send(wire.KindNetEOF, wire.DaemonStream|1, nil)
			f.send(wire.KindNetData, wire.DaemonStream|1, []byte("x"))
		}},
		{"credit over the window", "over the window", func(f *netFake, c *Conn) {
			open(f, c)
			f.send(wire.KindCredit, wire.DaemonStream|1, wire.Credit(1))
		}},
		{"data before a dial's open", "before the pipe opened", func(f *netFake, c *Conn) {
			go c.DialPort(context.Background(), 80)
			id, _ := f.request(t)
			f.send(wire.KindNetData, id, []byte("x"))
		}},
		{"a dial opened twice", "opened twice", func(f *netFake, c *Conn) {
			go c.DialPort(context.Background(), 80)
			id, _ := f.request(t)
			f.sendJSON(wire.KindNetOpen, id, wire.NetOpen{})
			f.sendJSON(wire.KindNetOpen, id, wire.NetOpen{})
		}},
		{"a listen's address elsewhere", "supervisor's address", func(f *netFake, c *Conn) {
			go c.Listen(context.Background(), nil, func(net.Conn) {})
			id, _ := f.request(t)
			f.sendJSON(wire.KindNetEnd, id, wire.NetEnd{Addr: "10.0.0.1:80"})
		}},
		{"a listen's bundle not asked for", "CA bundle", func(f *netFake, c *Conn) {
			go c.Listen(context.Background(), nil, func(net.Conn) {})
			id, _ := f.request(t)
			f.sendJSON(wire.KindNetEnd, id, wire.NetEnd{Addr: "127.0.0.1:80", CAFile: "/x"})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, c := newNetFake(t)
			tc.do(f, c)
			channelEnds(t, c, tc.why)
		})
	}
}

// Frames that cross an end are dropped: the channel goes on.
func TestPipeFramesAfterEnd(t *testing.T) {
	f, c := newNetFake(t)
	accepted := f.listening(t, c)
	f.sendJSON(wire.KindNetOpen, wire.DaemonStream|1, wire.NetOpen{})
	nc := <-accepted
	f.send(wire.KindNetData, wire.DaemonStream|1, []byte("abc"))
	f.sendJSON(wire.KindNetEnd, wire.DaemonStream|1, wire.NetEnd{Err: "ECONNRESET"})
	f.send(wire.KindNetData, wire.DaemonStream|1, []byte("late"))
	f.send(wire.KindCredit, wire.DaemonStream|1, wire.Credit(5))
	b, err := io.ReadAll(nc)
	if string(b) != "abc" || err == nil || !strings.Contains(err.Error(), "ECONNRESET") {
		t.Fatalf("read %q, %v", b, err)
	}
	if _, err := nc.Write([]byte("x")); err == nil {
		t.Fatal("a write to a pipe the supervisor ended")
	}
	// A cancelled dial's late open, and what follows it, are dropped too.
	ctx, cancel := context.WithCancel(context.Background())
	done := async(func() error { _, err := c.DialPort(ctx, 80); return err })
	id, _ := f.request(t)
	cancel()
	if err := done(t); !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	f.sendJSON(wire.KindNetOpen, id, wire.NetOpen{})
	f.send(wire.KindNetData, id, []byte("x"))
	// A refused dial.
	done = async(func() error { _, err := c.DialPort(context.Background(), 80); return err })
	id, _ = f.request(t)
	f.sendJSON(wire.KindNetEnd, id, wire.NetEnd{Err: wire.CodeRefused})
	if err := done(t); !errors.Is(err, sandbox.ErrPortRefused) {
		t.Fatalf("a refused dial: %v", err)
	}
	time.Sleep(50 * time.Millisecond)
	if err := c.Err(); err != nil {
		t.Fatal(err)
	}
}

// A flood of opens: MaxPipes are taken, each more is answered with an
// end; a supervisor that floods and does not read its answers ends the
// channel rather than make the server hold them.
func TestHostileOpenFlood(t *testing.T) {
	f, c := newNetFake(t)
	accepted := f.listening(t, c)
	const extra = 100
	for i := range wire.MaxPipes + extra {
		f.sendJSON(wire.KindNetOpen, wire.DaemonStream|uint32(i+1), wire.NetOpen{})
	}
	refused := 0
	for refused < extra {
		select {
		case fm := <-f.frames:
			var end wire.NetEnd
			if fm.Kind == wire.KindNetEnd && json.Unmarshal(fm.Payload, &end) == nil && end.Err == wire.CodeLimit {
				refused++
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%d opens refused, want %d", refused, extra)
		}
	}
	for deadline := time.Now().Add(5 * time.Second); len(accepted) < wire.MaxPipes && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	if n := len(accepted); n != wire.MaxPipes {
		t.Fatalf("%d connections accepted, want %d", n, wire.MaxPipes)
	}
	if err := c.Err(); err != nil {
		t.Fatal(err)
	}
	// Now without reading the answers.
	f.hold.Lock()
	defer f.hold.Unlock()
	for i := range 2 * wire.MaxPipes {
		f.sendJSON(wire.KindNetOpen, wire.DaemonStream|uint32(wire.MaxPipes+extra+i+1), wire.NetOpen{})
	}
	channelEnds(t, c, "a flood")
}
