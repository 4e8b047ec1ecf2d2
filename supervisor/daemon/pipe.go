//go:build unix

package daemon

import (
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/supervisor/wire"
)

// The supervisor's side of a pipe (wire/kinds.go): a TCP connection in the
// sandbox — one it dialed for the server, or one its proxy listener
// accepted (net.go) — carried as a stream of the channel. Two goroutines
// per pipe do the TCP work, never the channel's read loop: the reader
// sends what the connection reads, within the server's credit; the writer
// writes what the server sent (at most PipeWindow bytes queued) and gives
// credit back as it goes. A slow TCP peer so holds up its own pipe only.

// pipeState is how far a pipe is from its end.
type pipeState int

const (
	pipeLive  pipeState = iota
	pipeFlush           // the server sent NetEnd: write what is queued (within DrainGrace), then close
	pipeDone            // closed at once: the channel ended, the connection failed
)

type pipe struct {
	c  *channel
	id uint32

	mu      sync.Mutex
	cond    *sync.Cond
	conn    net.Conn // nil while a dial connects
	open    bool     // NetOpen was sent
	state   pipeState
	credit  int      // bytes it may still send the server
	queue   [][]byte // the server's bytes, not yet written
	queued  int      // bytes in queue and being written: what the server's credit covers
	free    [][]byte // written buffers, for reuse
	gotEOF  bool     // the server sent NetEOF
	running int      // goroutines (reader, writer) still running
}

func newPipe(c *channel, id uint32, conn net.Conn) *pipe {
	p := &pipe{c: c, id: id, conn: conn, credit: wire.PipeWindow}
	p.cond = sync.NewCond(&p.mu)
	return p
}

// flushGrace bounds how long a pipe the server ended still writes what it
// queued to a TCP peer that does not read.
var flushGrace = wire.DrainGrace

// run runs an open pipe's reader and writer; the last to end closes the
// connection and forgets the pipe.
func (p *pipe) run() {
	p.mu.Lock()
	p.running = 2
	p.mu.Unlock()
	go p.readLoop()
	go p.writeLoop()
}

// exit is a goroutine's end.
func (p *pipe) exit() {
	p.mu.Lock()
	p.running--
	last := p.running == 0
	p.mu.Unlock()
	if last {
		p.conn.Close()
		p.c.forgetPipe(p.id, p)
	}
}

// readLoop sends what the connection reads, within the credit; its EOF as
// NetEOF.
func (p *pipe) readLoop() {
	defer p.exit()
	buf := make([]byte, wire.PipeChunk)
	for {
		p.mu.Lock()
		for p.credit == 0 && p.state == pipeLive {
			p.cond.Wait()
		}
		if p.state != pipeLive {
			p.mu.Unlock()
			return
		}
		n := min(p.credit, len(buf))
		p.mu.Unlock()
		k, err := p.conn.Read(buf[:n])
		if k > 0 {
			p.mu.Lock()
			live := p.state == pipeLive
			p.credit -= k
			p.mu.Unlock()
			if !live || !p.send(wire.KindNetData, buf[:k]) {
				return
			}
		}
		if err != nil {
			p.mu.Lock()
			live := p.state == pipeLive
			p.mu.Unlock()
			switch {
			case !live: // ended by the server (its read deadline) or the channel
			case err == io.EOF:
				p.send(wire.KindNetEOF, nil)
			default:
				p.fail(err)
			}
			return
		}
	}
}

// writeLoop writes the server's bytes, gives their credit back, and shuts
// the connection's write side at the server's NetEOF.
func (p *pipe) writeLoop() {
	defer p.exit()
	for {
		p.mu.Lock()
		for len(p.queue) == 0 && !p.gotEOF && p.state == pipeLive {
			p.cond.Wait()
		}
		state := p.state
		if state == pipeDone || len(p.queue) == 0 {
			p.mu.Unlock()
			if state == pipeLive { // NetEOF, all written
				if cw, ok := p.conn.(interface{ CloseWrite() error }); ok {
					cw.CloseWrite()
				}
			}
			return
		}
		b := p.queue[0]
		p.queue = p.queue[1:]
		p.mu.Unlock()
		_, err := p.conn.Write(b)
		p.mu.Lock()
		p.queued -= len(b)
		if cap(b) == wire.PipeChunk {
			p.free = append(p.free, b[:0])
		}
		state = p.state
		p.mu.Unlock()
		if err != nil {
			p.fail(err)
			return
		}
		if state == pipeLive && !p.send(wire.KindCredit, wire.Credit(len(b))) {
			return
		}
	}
}

// send sends one frame of the pipe; a channel that fails ends it.
func (p *pipe) send(kind wire.Kind, payload []byte) bool {
	if err := p.c.send(kind, p.id, payload); err != nil {
		p.abort()
		return false
	}
	return true
}

// fail ends a pipe whose connection failed: the server is told why, unless
// it ended the pipe itself.
func (p *pipe) fail(err error) {
	p.mu.Lock()
	tell := p.state == pipeLive
	p.state = pipeDone
	p.cond.Broadcast()
	p.mu.Unlock()
	p.conn.Close()
	if tell {
		b, _ := json.Marshal(netError(err))
		p.c.send(wire.KindNetEnd, p.id, b)
	}
}

// abort closes the pipe at once, with no frame: the channel ended.
func (p *pipe) abort() {
	p.mu.Lock()
	p.state = pipeDone
	p.cond.Broadcast()
	conn := p.conn
	p.mu.Unlock()
	if conn != nil {
		conn.Close()
	}
}

// netError is the NetEnd of a connection that failed.
func netError(err error) wire.NetEnd {
	var errno syscall.Errno
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return wire.NetEnd{Err: wire.CodeRefused}
	case errors.Is(err, os.ErrDeadlineExceeded):
		return wire.NetEnd{Err: "ETIMEDOUT"}
	case errors.As(err, &errno):
		if name := errnoName(errno); name != "" {
			return wire.NetEnd{Err: name}
		}
		return wire.NetEnd{Err: "EIO", Msg: errno.Error()}
	}
	return wire.NetEnd{Err: "EIO", Msg: err.Error()}
}

// errnoName names the errors a TCP connection meets.
func errnoName(e syscall.Errno) string {
	switch e {
	case syscall.ECONNRESET:
		return "ECONNRESET"
	case syscall.EPIPE:
		return "EPIPE"
	case syscall.ETIMEDOUT:
		return "ETIMEDOUT"
	case syscall.ENETUNREACH:
		return "ENETUNREACH"
	case syscall.EHOSTUNREACH:
		return "EHOSTUNREACH"
	case syscall.EADDRNOTAVAIL:
		return "EADDRNOTAVAIL"
	case syscall.EMFILE:
		return "EMFILE"
	case syscall.ENFILE:
		return "ENFILE"
	case syscall.ENOBUFS:
		return "ENOBUFS"
	}
	return ""
}

// The server's pipe frames. Each is checked whole and acted on without
// blocking: the TCP work is the pipe's goroutines'.

// pipeFor is the pipe a frame is for; nil (and no error) for one that
// ended; an error for a stream never opened.
func (c *channel) pipeFor(f wire.Frame) (*pipe, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p := c.pipes[f.Stream]; p != nil {
		return p, nil
	}
	ours, n := f.Stream&wire.DaemonStream != 0, f.Stream&^wire.DaemonStream
	if n == 0 || (ours && n > c.nextPipe) || (!ours && n > c.maxOpened) {
		return nil, wire.Errorf("network message on stream %#x, which was never opened", f.Stream)
	}
	return nil, nil // a pipe that ended: what was sent before its sender knew
}

// pipeData queues the server's bytes for the connection.
func (c *channel) pipeData(f wire.Frame) error {
	p, err := c.pipeFor(f)
	if p == nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case !p.open:
		return wire.Errorf("stream %#x: data before the pipe opened", f.Stream)
	case p.gotEOF:
		return wire.Errorf("stream %#x: data after its EOF", f.Stream)
	case len(f.Payload) == 0:
		return wire.Errorf("stream %#x: an empty data frame", f.Stream)
	case p.queued+len(f.Payload) > wire.PipeWindow:
		return wire.Errorf("stream %#x sent more data than its credit", f.Stream)
	case p.state != pipeLive:
		return nil
	}
	// Small frames fill the last buffer first: what a pipe holds stays
	// about PipeWindow however the bytes are cut into frames.
	if n := len(p.queue); n > 0 && len(p.queue[n-1])+len(f.Payload) <= cap(p.queue[n-1]) {
		p.queue[n-1] = append(p.queue[n-1], f.Payload...)
	} else if n := len(p.free); n > 0 && len(f.Payload) <= wire.PipeChunk {
		p.queue = append(p.queue, append(p.free[n-1], f.Payload...))
		p.free = p.free[:n-1]
	} else {
		p.queue = append(p.queue, append(make([]byte, 0, max(wire.PipeChunk, len(f.Payload))), f.Payload...))
	}
	p.queued += len(f.Payload)
	p.cond.Broadcast()
	return nil
}

// pipeEOF: the server sends no more bytes; the writer shuts the
// connection's write side once it wrote what is queued.
func (c *channel) pipeEOF(f wire.Frame) error {
	p, err := c.pipeFor(f)
	if p == nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case !p.open:
		return wire.Errorf("stream %#x: EOF before the pipe opened", f.Stream)
	case p.gotEOF:
		return wire.Errorf("stream %#x: a second EOF", f.Stream)
	case len(f.Payload) != 0:
		return wire.Errorf("stream %#x: an EOF with a payload", f.Stream)
	}
	p.gotEOF = true
	p.cond.Broadcast()
	return nil
}

// pipeEnd: the server ended the pipe. What it sent is still written
// (within flushGrace); the connection then closes, and nothing more is
// read from it.
func (c *channel) pipeEnd(f wire.Frame) error {
	var m wire.NetEnd
	if err := json.Unmarshal(f.Payload, &m); err != nil {
		return wire.Errorf("stream %#x: a bad end: %v", f.Stream, err)
	}
	p, err := c.pipeFor(f)
	if p == nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.state != pipeLive {
		return nil
	}
	p.cond.Broadcast()
	if p.conn == nil { // still dialing: closed once connected
		p.state = pipeDone
		return nil
	}
	p.state = pipeFlush
	p.conn.SetReadDeadline(time.Unix(1, 0)) // the reader stops
	p.conn.SetWriteDeadline(time.Now().Add(flushGrace))
	return nil
}

// pipeCredit gives a pipe room for more bytes to the server.
func (c *channel) pipeCredit(f wire.Frame, n uint32) error {
	p, err := c.pipeFor(f)
	if p == nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case !p.open:
		return wire.Errorf("stream %#x: credit before the pipe opened", f.Stream)
	case n == 0 || p.credit+int(n) > wire.PipeWindow:
		return wire.Errorf("stream %#x: credit over the window", f.Stream)
	}
	p.credit += int(n)
	p.cond.Broadcast()
	return nil
}

// forgetPipe forgets a pipe that ended.
func (c *channel) forgetPipe(id uint32, p *pipe) {
	c.mu.Lock()
	if c.pipes[id] == p {
		delete(c.pipes, id)
	}
	c.mu.Unlock()
}

// stopPipes closes every pipe of a channel that ended.
func (c *channel) stopPipes() {
	c.mu.Lock()
	c.closed = true
	var ps []*pipe
	for _, p := range c.pipes {
		ps = append(ps, p)
	}
	c.mu.Unlock()
	for _, p := range ps {
		p.abort()
	}
	c.s.proxy.forget(c)
}
