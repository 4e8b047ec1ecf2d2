package supervisor

import (
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/supervisor/wire"
)

// pipe is the server's end of a pipe (wire/kinds.go): a TCP connection in
// the sandbox as a net.Conn. What it holds of the supervisor's bytes is
// bounded by the credit it gives (wire.PipeWindow); what it sends, by the
// credit it got. Everything the supervisor sends on it is checked by the
// handlers below (dispatched from net.go), with p.mu held.
type pipe struct {
	c             *Conn
	id            uint32
	local, remote net.Addr

	wmu sync.Mutex // one Write or CloseWrite at a time: a Write's bytes go out whole, before an EOF

	mu      sync.Mutex
	changed chan struct{} // closed, and replaced, at every change
	opened  bool          // NetOpen came (a dial: connected)
	chunks  [][]byte      // received, not yet read
	pending int           // bytes in chunks
	unacked int           // bytes read whose credit was not given back yet
	free    [][]byte      // read buffers, for reuse
	credit  int           // bytes it may still send
	gotEOF  bool          // the supervisor sent NetEOF or NetEnd: reads end after chunks
	sentEOF bool          // CloseWrite
	ended   bool          // NetEnd sent or got, the channel ended, or Close
	endErr  error         // why reads end (after chunks) and writes fail; nil: io.EOF
	closed  bool          // Close
	gone    bool          // forgotten by the Conn: frames for it are dropped

	readDL, writeDL deadline
}

var _ net.Conn = (*pipe)(nil)

func newPipe(c *Conn, id uint32, local, remote net.Addr) *pipe {
	return &pipe{c: c, id: id, local: local, remote: remote, changed: make(chan struct{}), readDL: newDeadline(), writeDL: newDeadline()}
}

// signal wakes whoever waits on the pipe (p.mu held).
func (p *pipe) signal() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// wait waits, with p.mu held (released meanwhile), for a change or for
// done.
func (p *pipe) wait(done <-chan struct{}) {
	ch := p.changed
	p.mu.Unlock()
	select {
	case <-ch:
	case <-done:
	}
	p.mu.Lock()
}

// forget drops the pipe from its Conn (p.mu held): it sent or got
// NetEnd, or sent and got NetEOF.
func (p *pipe) forget() {
	if p.gone {
		return
	}
	p.gone = true
	p.c.mu.Lock()
	if p.c.pipes[p.id] == p {
		delete(p.c.pipes, p.id)
	}
	p.c.mu.Unlock()
}

// creditBatch is how many bytes read make a credit frame: fewer frames,
// and the supervisor still has most of its window.
const creditBatch = wire.PipeChunk

// Read reads what the supervisor sent; after its NetEOF, io.EOF, after
// its NetEnd{Err} or the channel's end, an error.
func (p *pipe) Read(b []byte) (int, error) {
	p.mu.Lock()
	for {
		switch {
		case p.closed:
			p.mu.Unlock()
			return 0, net.ErrClosed
		case p.readDL.expired():
			p.mu.Unlock()
			return 0, os.ErrDeadlineExceeded
		case len(b) == 0:
			p.mu.Unlock()
			return 0, nil
		case p.pending > 0:
			n := 0
			for n < len(b) && len(p.chunks) > 0 {
				k := copy(b[n:], p.chunks[0])
				n += k
				if p.chunks[0] = p.chunks[0][k:]; len(p.chunks[0]) == 0 {
					if first := p.chunks[0]; cap(first) == wire.PipeChunk {
						p.free = append(p.free, first[:0])
					}
					p.chunks = p.chunks[1:]
				}
			}
			p.pending -= n
			p.unacked += n
			give := 0
			if p.unacked >= creditBatch && !p.gotEOF && !p.gone {
				give, p.unacked = p.unacked, 0
			}
			p.mu.Unlock()
			if give > 0 {
				p.c.send(wire.KindCredit, p.id, wire.Credit(give))
			}
			return n, nil
		case p.gotEOF:
			err := p.endErr
			p.mu.Unlock()
			if err == nil {
				err = io.EOF
			}
			return 0, err
		}
		p.wait(p.readDL.done())
	}
}

// errWriteShut: a Write after CloseWrite.
var errWriteShut = errors.New("write after CloseWrite")

// Write sends b within the credit the supervisor gives, waiting for more
// (until the write deadline) when there is none.
func (p *pipe) Write(b []byte) (int, error) {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	p.mu.Lock()
	written := 0
	for {
		var err error
		switch {
		case p.closed:
			err = net.ErrClosed
		case p.sentEOF:
			err = errWriteShut
		case p.ended:
			if err = p.endErr; err == nil {
				err = errors.New("the connection was closed in the sandbox")
			}
		case p.writeDL.expired():
			err = os.ErrDeadlineExceeded
		case len(b) == 0:
		case p.credit == 0:
			p.wait(p.writeDL.done())
			continue
		default:
			n := min(p.credit, wire.PipeChunk, len(b))
			p.credit -= n
			p.mu.Unlock()
			if err := p.c.send(wire.KindNetData, p.id, b[:n]); err != nil {
				return written, p.c.channelErr()
			}
			written += n
			b = b[n:]
			p.mu.Lock()
			continue
		}
		p.mu.Unlock()
		return written, err
	}
}

// CloseWrite sends NetEOF: the supervisor shuts its connection's write
// side once it wrote what came before. Reading goes on.
func (p *pipe) CloseWrite() error {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	p.mu.Lock()
	switch {
	case p.closed:
		p.mu.Unlock()
		return net.ErrClosed
	case p.sentEOF || p.ended:
		p.mu.Unlock()
		return nil
	}
	p.sentEOF = true
	if p.gotEOF {
		p.forget() // both ways ended
	}
	p.mu.Unlock()
	if err := p.c.send(wire.KindNetEOF, p.id, nil); err != nil {
		return p.c.channelErr()
	}
	return nil
}

// Close ends the pipe: NetEnd, unless both ways had ended. What Write sent
// before is still delivered in the sandbox.
func (p *pipe) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return net.ErrClosed
	}
	p.closed = true
	tell := !p.ended && !(p.sentEOF && p.gotEOF)
	p.ended = true
	p.chunks, p.pending, p.free = nil, 0, nil
	p.forget()
	p.signal()
	p.mu.Unlock()
	p.readDL.set(time.Time{})
	p.writeDL.set(time.Time{})
	if tell {
		b, _ := json.Marshal(wire.NetEnd{})
		p.c.send(wire.KindNetEnd, p.id, b)
	}
	return nil
}

// fail ends the pipe with the channel's end.
func (p *pipe) fail(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.ended {
		p.ended, p.gotEOF, p.endErr = true, true, &ChannelError{Err: err}
	}
	p.gone = true
	p.signal()
}

func (p *pipe) LocalAddr() net.Addr                { return p.local }
func (p *pipe) RemoteAddr() net.Addr               { return p.remote }
func (p *pipe) SetReadDeadline(t time.Time) error  { return p.setDeadline(t, &p.readDL) }
func (p *pipe) SetWriteDeadline(t time.Time) error { return p.setDeadline(t, &p.writeDL) }
func (p *pipe) SetDeadline(t time.Time) error {
	if err := p.setDeadline(t, &p.readDL); err != nil {
		return err
	}
	return p.setDeadline(t, &p.writeDL)
}

func (p *pipe) setDeadline(t time.Time, d *deadline) error {
	p.mu.Lock()
	closed := p.closed
	p.mu.Unlock()
	if closed {
		return net.ErrClosed
	}
	d.set(t)
	return nil
}

// The supervisor's frames on the pipe (p.mu held).

// onOpen: a dial connected.
func (p *pipe) onOpen(f wire.Frame) error {
	if p.opened {
		return wire.Errorf("stream %#x opened twice", f.Stream)
	}
	p.opened, p.credit = true, wire.PipeWindow
	return nil
}

// onData takes bytes, within the credit given.
func (p *pipe) onData(f wire.Frame) error {
	switch {
	case !p.opened:
		return wire.Errorf("stream %#x: data before the pipe opened", f.Stream)
	case p.gotEOF && !p.ended:
		return wire.Errorf("stream %#x: data after its EOF", f.Stream)
	case len(f.Payload) == 0:
		return wire.Errorf("stream %#x: an empty data frame", f.Stream)
	case p.pending+p.unacked+len(f.Payload) > wire.PipeWindow:
		return wire.Errorf("stream %#x sent more data than its credit", f.Stream)
	case p.ended:
		return nil
	}
	// Small frames fill the last buffer first: what a pipe holds stays
	// about PipeWindow however the bytes are cut into frames.
	if n := len(p.chunks); n > 0 && len(p.chunks[n-1])+len(f.Payload) <= cap(p.chunks[n-1]) {
		p.chunks[n-1] = append(p.chunks[n-1], f.Payload...)
	} else if n := len(p.free); n > 0 && len(f.Payload) <= wire.PipeChunk {
		p.chunks = append(p.chunks, append(p.free[n-1], f.Payload...))
		p.free = p.free[:n-1]
	} else {
		p.chunks = append(p.chunks, append(make([]byte, 0, max(wire.PipeChunk, len(f.Payload))), f.Payload...))
	}
	p.pending += len(f.Payload)
	return nil
}

// onEOF: the supervisor sends no more bytes.
func (p *pipe) onEOF(f wire.Frame) error {
	switch {
	case !p.opened:
		return wire.Errorf("stream %#x: EOF before the pipe opened", f.Stream)
	case p.gotEOF && !p.ended:
		return wire.Errorf("stream %#x: a second EOF", f.Stream)
	case len(f.Payload) != 0:
		return wire.Errorf("stream %#x: an EOF with a payload", f.Stream)
	}
	p.gotEOF = true
	if p.sentEOF {
		p.forget()
	}
	return nil
}

// onEnd: the supervisor ended the pipe (a dial's: it failed).
func (p *pipe) onEnd(m *wire.NetEnd) {
	if p.ended {
		return
	}
	p.ended, p.gotEOF = true, true
	if m.Err != "" {
		p.endErr = netEndError(m)
	}
	p.forget()
}

// onCredit takes room for more bytes.
func (p *pipe) onCredit(f wire.Frame) error {
	n, err := wire.ParseCredit(f.Payload)
	switch {
	case err != nil:
		return err
	case !p.opened:
		return wire.Errorf("stream %#x: credit before the pipe opened", f.Stream)
	case n == 0 || p.credit+int(n) > wire.PipeWindow:
		return wire.Errorf("stream %#x: credit over the window", f.Stream)
	}
	p.credit += int(n)
	return nil
}

// deadline is a read's or a write's deadline: done is closed once it
// passed.
type deadline struct {
	mu    sync.Mutex
	timer *time.Timer
	ch    chan struct{}
}

func newDeadline() deadline { return deadline{ch: make(chan struct{})} }

// set moves the deadline to t (zero: none).
func (d *deadline) set(t time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.timer != nil && !d.timer.Stop() {
		<-d.ch // the timer fired: wait for its close
	}
	d.timer = nil
	passed := isClosed(d.ch)
	if t.IsZero() {
		if passed {
			d.ch = make(chan struct{})
		}
		return
	}
	if dur := time.Until(t); dur > 0 {
		if passed {
			d.ch = make(chan struct{})
		}
		ch := d.ch
		d.timer = time.AfterFunc(dur, func() { close(ch) })
		return
	}
	if !passed {
		close(d.ch)
	}
}

// done is closed when the deadline passes.
func (d *deadline) done() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.ch
}

func (d *deadline) expired() bool { return isClosed(d.done()) }

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
