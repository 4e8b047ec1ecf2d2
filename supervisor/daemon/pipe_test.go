//go:build linux

package daemon

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/internal/testkit"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor/supervisortest"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor/wire"
)

// raw is the daemon driven frame by frame, by a server the test plays:
// for what the real client never sends.
type raw struct {
	t      *testing.T
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr syncBuf
	hello  wire.Hello

	wm     sync.Mutex
	fw     wire.Writer
	frames chan wire.Frame // what the daemon sent (payloads copied); closed at its end
	exited chan struct{}   // the daemon exited
}

func startRaw(t *testing.T) *raw {
	t.Helper()
	r := &raw{t: t, cmd: supervisortest.Command(t, "supervise"), frames: make(chan wire.Frame, 1<<16), exited: make(chan struct{})}
	var err error
	if r.stdin, err = r.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := r.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	r.cmd.Stderr = &r.stderr
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r.fw = wire.Writer{W: r.stdin}
	read := make(chan struct{})
	go func() {
		defer close(r.frames)
		defer close(read)
		fr := wire.Reader{R: bufio.NewReader(stdout)}
		for {
			f, err := fr.Read()
			if err != nil {
				return
			}
			f.Payload = bytes.Clone(f.Payload)
			r.frames <- f
		}
	}()
	go func() { <-read; r.cmd.Wait(); close(r.exited) }()
	t.Cleanup(func() {
		r.stdin.Close()
		r.cmd.Process.Kill()
		<-r.exited
	})
	f := r.next()
	if f.Kind != wire.KindHello || json.Unmarshal(f.Payload, &r.hello) != nil {
		t.Fatalf("first frame %+v", f)
	}
	return r
}

// send sends a frame; false once the daemon stopped reading.
func (r *raw) send(kind wire.Kind, id uint32, payload []byte) bool {
	r.wm.Lock()
	defer r.wm.Unlock()
	return r.fw.Write(kind, id, payload) == nil
}

func (r *raw) sendJSON(kind wire.Kind, id uint32, v any) bool {
	b, _ := json.Marshal(v)
	return r.send(kind, id, b)
}

// next is the daemon's next frame.
func (r *raw) next() wire.Frame {
	r.t.Helper()
	select {
	case f, ok := <-r.frames:
		if !ok {
			r.t.Fatalf("the daemon ended: %s", r.stderr.String())
		}
		return f
	case <-time.After(10 * time.Second):
		r.t.Fatal("no frame from the daemon")
	}
	return wire.Frame{}
}

// want is the next frame, which must be of kind on stream id; a NetEnd's
// payload is returned decoded.
func (r *raw) want(kind wire.Kind, id uint32) (wire.Frame, wire.NetEnd) {
	r.t.Helper()
	f := r.next()
	var end wire.NetEnd
	if f.Kind == wire.KindNetEnd {
		json.Unmarshal(f.Payload, &end)
	}
	if f.Kind != kind || f.Stream != id {
		r.t.Fatalf("frame kind %d on stream %#x (%+v), want kind %d on %#x", f.Kind, f.Stream, end, kind, id)
	}
	return f, end
}

// ended waits for the daemon to end the channel, saying why.
func (r *raw) ended(why string) {
	r.t.Helper()
	go func() {
		for range r.frames {
		}
	}()
	select {
	case <-r.exited:
	case <-time.After(10 * time.Second):
		r.t.Fatalf("the daemon did not end the channel (%s)", why)
	}
	if !strings.Contains(r.stderr.String(), why) {
		r.t.Fatalf("the daemon ended saying %q, want %q", r.stderr.String(), why)
	}
}

// tcpServer listens on 127.0.0.1 and hands each connection to serve.
func tcpServer(t *testing.T, serve func(net.Conn)) int {
	t.Helper()
	return testkit.TCPServer(t, func(c *net.TCPConn) { serve(c) }).Port
}

// freePort is a port nothing listens on.
func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return port
}

func TestBootIsNewEachStart(t *testing.T) {
	t.Parallel()
	a, b := startRaw(t).hello.Boot, startRaw(t).hello.Boot
	if _, err := hex.DecodeString(a); err != nil || len(a) != 32 || a == b {
		t.Fatalf("boots %q and %q", a, b)
	}
}

// A dial's answers: refused, and the requests the daemon refuses.
func TestDialAnswers(t *testing.T) {
	t.Parallel()
	r := startRaw(t)
	for i, tc := range []struct {
		req  wire.NetRequest
		code string
	}{
		{wire.NetRequest{Op: wire.NetDial, Port: freePort(t)}, wire.CodeRefused},
		{wire.NetRequest{Op: wire.NetDial, Port: 0}, wire.CodeInval},
		{wire.NetRequest{Op: wire.NetDial, Port: 65536}, wire.CodeInval},
		{wire.NetRequest{Op: "bind"}, wire.CodeInval},
		{wire.NetRequest{Op: wire.NetListen, CA: []byte("-----BEGIN PRIVATE KEY-----\nAQID\n-----END PRIVATE KEY-----\n")}, wire.CodeInval},
	} {
		id := uint32(i + 1)
		r.sendJSON(wire.KindNet, id, tc.req)
		if _, end := r.want(wire.KindNetEnd, id); end.Err != tc.code {
			t.Errorf("%+v: answer %+v, want %s", tc.req, end, tc.code)
		}
	}
}

// A pipe frame by frame: data and EOF each way, then the pipe is
// forgotten (a late credit on it is dropped) and the connection closed.
func TestPipeHalfClose(t *testing.T) {
	t.Parallel()
	got := make(chan string, 1)
	port := tcpServer(t, func(c net.Conn) {
		b, _ := io.ReadAll(c) // until the server's EOF
		got <- string(b)
		c.Write([]byte("xyz"))
		c.(*net.TCPConn).CloseWrite()
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err != io.EOF {
			got <- "the daemon did not close the connection: " + err.Error()
		}
		got <- "closed"
	})
	r := startRaw(t)
	r.sendJSON(wire.KindNet, 1, wire.NetRequest{Op: wire.NetDial, Port: port})
	r.want(wire.KindNetOpen, 1)
	r.send(wire.KindNetData, 1, []byte("abc"))
	r.send(wire.KindNetEOF, 1, nil)
	if s := <-got; s != "abc" {
		t.Fatalf("the sandbox's server read %q", s)
	}
	var data []byte
	for {
		f := r.next()
		if f.Kind == wire.KindCredit && f.Stream == 1 {
			continue // for the 3 bytes written
		}
		if f.Kind == wire.KindNetEOF && f.Stream == 1 {
			break
		}
		if f.Kind != wire.KindNetData || f.Stream != 1 {
			t.Fatalf("frame %d on %#x", f.Kind, f.Stream)
		}
		data = append(data, f.Payload...)
	}
	if string(data) != "xyz" {
		t.Fatalf("the pipe carried %q", data)
	}
	if s := <-got; s != "closed" {
		t.Fatal(s)
	}
	// Forgotten: a late credit is dropped, the channel goes on.
	r.send(wire.KindCredit, 1, wire.Credit(3))
	r.sendJSON(wire.KindNet, 2, wire.NetRequest{Op: wire.NetDial, Port: freePort(t)})
	if _, end := r.want(wire.KindNetEnd, 2); end.Err != wire.CodeRefused {
		t.Fatalf("%+v", end)
	}
}

// The server's NetEnd: what it sent before is still written, then the
// connection closes.
func TestPipeEndFlushes(t *testing.T) {
	t.Parallel()
	got := make(chan int, 1)
	port := tcpServer(t, func(c net.Conn) {
		time.Sleep(200 * time.Millisecond) // the end is there before this reads
		n, _ := io.Copy(io.Discard, c)
		got <- int(n)
	})
	r := startRaw(t)
	r.sendJSON(wire.KindNet, 1, wire.NetRequest{Op: wire.NetDial, Port: port})
	r.want(wire.KindNetOpen, 1)
	chunk := make([]byte, wire.ChunkSize)
	for range wire.PipeWindow / wire.ChunkSize {
		r.send(wire.KindNetData, 1, chunk)
	}
	r.sendJSON(wire.KindNetEnd, 1, wire.NetEnd{})
	select {
	case n := <-got:
		if n != wire.PipeWindow {
			t.Fatalf("the sandbox's server read %d bytes, want %d", n, wire.PipeWindow)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the connection was not closed after the end")
	}
}

// What the daemon takes no more of: MaxPipes per channel, dialed or
// accepted; past it a dial is LIMIT, an accepted connection closed.
func TestPipesCapped(t *testing.T) {
	t.Parallel()
	port := tcpServer(t, func(c net.Conn) { io.Copy(io.Discard, c); c.Close() })
	r := startRaw(t)
	const extra = 20
	for i := range wire.MaxPipes + extra {
		r.sendJSON(wire.KindNet, uint32(i+1), wire.NetRequest{Op: wire.NetDial, Port: port})
	}
	opens, limits := 0, 0
	for opens+limits < wire.MaxPipes+extra {
		switch f := r.next(); f.Kind {
		case wire.KindNetOpen:
			opens++
		case wire.KindNetEnd:
			var end wire.NetEnd
			json.Unmarshal(f.Payload, &end)
			if end.Err != wire.CodeLimit {
				t.Fatalf("an answer %+v", end)
			}
			limits++
		default:
			t.Fatalf("frame kind %d", f.Kind)
		}
	}
	if opens != wire.MaxPipes || limits != extra {
		t.Fatalf("%d opened, %d refused", opens, limits)
	}

	// The listener's connections to this full channel are closed at once.
	r.sendJSON(wire.KindNet, 1000, wire.NetRequest{Op: wire.NetListen})
	_, end := r.want(wire.KindNetEnd, 1000)
	c, err := net.Dial("tcp", end.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err != io.EOF && !errors.Is(err, net.ErrClosed) && !strings.Contains(fmtErr(err), "reset") {
		t.Fatalf("a connection past the cap: %v", err)
	}
	select {
	case f := <-r.frames:
		t.Fatalf("an open past the cap: kind %d on %#x", f.Kind, f.Stream)
	case <-time.After(100 * time.Millisecond):
	}
}

func fmtErr(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// Frames the real client never sends end the channel; none makes the
// daemon hold what it was not given credit for.
func TestPipeHostileFrames(t *testing.T) {
	t.Parallel()
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	sink := tcpServer(t, func(c net.Conn) {
		<-stop // reads nothing
		c.Close()
	})
	dialed := func(r *raw) {
		r.sendJSON(wire.KindNet, 1, wire.NetRequest{Op: wire.NetDial, Port: sink})
		r.want(wire.KindNetOpen, 1)
	}
	for _, tc := range []struct {
		name, why string
		do        func(r *raw)
	}{
		{"a server's stream with the supervisor's bit", "of the supervisor's", func(r *raw) {
			r.sendJSON(wire.KindNet, wire.DaemonStream|1, wire.NetRequest{Op: wire.NetDial, Port: sink})
		}},
		{"a command on the supervisor's bit", "of the supervisor's", func(r *raw) {
			r.sendJSON(wire.KindExec, wire.DaemonStream|7, wire.Exec{Argv: []string{"true"}})
		}},
		{"data on a stream never opened", "never opened", func(r *raw) { r.send(wire.KindNetData, 5, []byte("x")) }},
		{"data on a supervisor's stream never opened", "never opened", func(r *raw) {
			r.send(wire.KindNetData, wire.DaemonStream|5, []byte("x"))
		}},
		{"an end on a supervisor's stream never opened", "never opened", func(r *raw) {
			r.sendJSON(wire.KindNetEnd, wire.DaemonStream|1, wire.NetEnd{})
		}},
		{"credit on a supervisor's stream never opened", "never opened", func(r *raw) {
			r.send(wire.KindCredit, wire.DaemonStream|1, wire.Credit(1))
		}},
		{"an empty data frame", "empty data", func(r *raw) { dialed(r); r.send(wire.KindNetData, 1, nil) }},
		{"data after EOF", "after its EOF", func(r *raw) {
			dialed(r)
			r.send(wire.KindNetEOF, 1, nil)
			r.send(wire.KindNetData, 1, []byte("x"))
		}},
		{"EOF twice", "second EOF", func(r *raw) {
			dialed(r)
			r.send(wire.KindNetEOF, 1, nil)
			r.send(wire.KindNetEOF, 1, nil)
		}},
		{"credit over the window", "over the window", func(r *raw) { dialed(r); r.send(wire.KindCredit, 1, wire.Credit(1)) }},
		{"a bad end", "bad end", func(r *raw) { dialed(r); r.send(wire.KindNetEnd, 1, []byte("{")) }},
		{"data beyond the credit", "more data than its credit", func(r *raw) {
			dialed(r)
			// The sink reads nothing: the kernel's buffers take a few MB,
			// and then the credit the daemon gave is spent.
			chunk := make([]byte, wire.MaxPayload)
			for range 64 << 20 / wire.MaxPayload {
				if !r.send(wire.KindNetData, 1, chunk) {
					break
				}
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := startRaw(t)
			tc.do(r)
			r.ended(tc.why)
		})
	}
}
