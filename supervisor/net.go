package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor/wire"
)

// The server's side of the network requests and pipes (wire/kinds.go,
// SPEC §17): the sandbox's proxy listener, whose connections reach the
// server as net.Conns, and dials to a port on the sandbox's loopback.

// Listener is the supervisor's proxy listener, as Listen answers it.
type Listener struct {
	Addr   string // "127.0.0.1:N" on the sandbox's loopback
	CAFile string // the CA bundle's path in the sandbox; "" without a CA
}

// netCall is a listen request in flight.
type netCall struct {
	notify chan struct{}
	ca     bool // a CA was given: the answer names a bundle
	failed bool // the channel ended
	end    *wire.NetEnd
}

// pipeStall bounds how long a request waits for the supervisor to answer
// (its own dial gives up well before).
var pipeStall = 30 * time.Second

// Listen asks the daemon for its proxy listener (NetRequest listen) and
// makes this Conn the receiver of its connections: each is passed to
// accept in its own goroutine, as a net.Conn. The listener is the
// daemon's one, whichever channel asks; the last live channel that asked
// receives. With ca (PEM certificates), the daemon writes a bundle of
// the system's roots and ca, named by CAFile. accept takes connections
// from when Listen is called: the latest Listen's accept does.
func (c *Conn) Listen(ctx context.Context, ca []byte, accept func(net.Conn)) (Listener, error) {
	if accept == nil {
		return Listener{}, errors.New("listen: no accept function")
	}
	if len(ca) > 0 && !wire.ValidCA(ca) {
		return Listener{}, fmt.Errorf("listen: the CA is not PEM certificates of at most %d bytes", wire.MaxCABytes)
	}
	body, err := json.Marshal(wire.NetRequest{Op: wire.NetListen, CA: ca})
	if err != nil {
		return Listener{}, err
	}
	nc := &netCall{notify: make(chan struct{}, 1), ca: len(ca) > 0}
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return Listener{}, &ChannelError{Err: err, NotStarted: true}
	}
	c.accept = accept
	c.next++
	id := c.next
	c.nets[id] = nc
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.nets, id)
		c.mu.Unlock()
	}()
	if err := c.send(wire.KindNet, id, body); err != nil {
		return Listener{}, &ChannelError{Err: c.Err(), NotStarted: true}
	}
	t := time.NewTimer(pipeStall)
	defer t.Stop()
	for {
		c.mu.Lock()
		end, failed := nc.end, nc.failed
		c.mu.Unlock()
		switch {
		case failed:
			return Listener{}, c.channelErr()
		case end != nil && end.Err != "":
			return Listener{}, fmt.Errorf("listen in the sandbox: %w", netEndError(end))
		case end != nil:
			return Listener{Addr: end.Addr, CAFile: end.CAFile}, nil
		}
		select {
		case <-nc.notify:
		case <-ctx.Done():
			return Listener{}, ctx.Err()
		case <-t.C:
			return Listener{}, errStalled
		}
	}
}

// DialPort connects to 127.0.0.1:port in the sandbox; sandbox.ErrPortRefused
// when nothing listens there.
func (c *Conn) DialPort(ctx context.Context, port int) (net.Conn, error) {
	if port < 1 || port > 65535 {
		return nil, fmt.Errorf("port %d: a port is 1 to 65535", port)
	}
	body, err := json.Marshal(wire.NetRequest{Op: wire.NetDial, Port: port})
	if err != nil {
		return nil, err
	}
	remote := net.TCPAddrFromAddrPort(netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), uint16(port)))
	p := newPipe(c, 0, channelAddr, remote)
	c.mu.Lock()
	switch {
	case c.err != nil:
		err := c.err
		c.mu.Unlock()
		return nil, &ChannelError{Err: err, NotStarted: true}
	case len(c.pipes) >= wire.MaxPipes:
		c.mu.Unlock()
		return nil, fmt.Errorf("%d connections to the sandbox are open already", wire.MaxPipes)
	}
	c.next++
	p.id = c.next
	c.pipes[p.id] = p
	c.mu.Unlock()
	if err := c.send(wire.KindNet, p.id, body); err != nil {
		p.Close()
		return nil, &ChannelError{Err: c.Err(), NotStarted: true}
	}
	t := time.NewTimer(pipeStall)
	defer t.Stop()
	p.mu.Lock()
	for !p.opened && !p.ended {
		ch := p.changed
		p.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			p.Close()
			return nil, ctx.Err()
		case <-t.C:
			p.Close()
			return nil, errStalled
		}
		p.mu.Lock()
	}
	opened, endErr := p.opened, p.endErr
	p.mu.Unlock()
	if !opened {
		if endErr == nil {
			endErr = errors.New("the sandbox ended the connection before it opened")
		}
		return nil, fmt.Errorf("connect to port %d in the sandbox: %w", port, endErr)
	}
	return p, nil
}

// channelAddr is a dialed pipe's local end: the supervisor's channel.
var channelAddr net.Addr = pipeAddr("sandbox-mcp supervisor channel")

type pipeAddr string

func (a pipeAddr) Network() string { return "supervisor" }
func (a pipeAddr) String() string  { return string(a) }

// netEndError is the error a NetEnd's code says.
func netEndError(m *wire.NetEnd) error {
	m.Err, m.Msg = wire.CapText(m.Err, 32), wire.CapText(m.Msg, 200)
	switch m.Err {
	case wire.CodeRefused:
		return sandbox.ErrPortRefused
	case wire.CodeLimit:
		return fmt.Errorf("too many connections in the sandbox's supervisor (%s)", m.Msg)
	}
	if m.Msg != "" {
		return fmt.Errorf("failed in the sandbox: %s: %s", m.Err, m.Msg)
	}
	return fmt.Errorf("failed in the sandbox: %s", m.Err)
}

// The supervisor's network frames (dispatch.go's table).

// onPipe is a pipe's frame: for a pipe that ended, dropped; for a stream
// never opened, or one of another kind, the channel's end.
func onPipe(h func(p *pipe, f wire.Frame) error) func(*Conn, wire.Frame) error {
	return func(c *Conn, f wire.Frame) error {
		c.mu.Lock()
		p := c.pipes[f.Stream]
		var err error
		if p == nil {
			err = c.notPipe(f)
		}
		c.mu.Unlock()
		if p == nil {
			return err
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.gone {
			return nil
		}
		defer p.signal()
		return h(p, f)
	}
}

// notPipe checks a pipe's frame on a stream that is no pipe (c.mu held):
// one that ended (nil: dropped), or an error.
func (c *Conn) notPipe(f wire.Frame) error {
	if f.Stream&wire.DaemonStream != 0 {
		if n := f.Stream &^ wire.DaemonStream; n == 0 || n > c.peerNext {
			return wire.Errorf("network message on stream %#x, which was never opened", f.Stream)
		}
		return nil
	}
	switch {
	case f.Stream == 0 || f.Stream > c.next:
		return wire.Errorf("network message on stream %d, which was never opened", f.Stream)
	case c.calls[f.Stream] != nil || c.fs[f.Stream] != nil || c.jobs[f.Stream] != nil || c.nets[f.Stream] != nil && f.Kind != wire.KindNetEnd:
		return wire.Errorf("network message on stream %d of another kind", f.Stream)
	}
	return nil
}

// onNetOpen: a dial connected, or (a new stream of the supervisor's) the
// listener accepted a connection, which goes to the accept function of the
// last Listen; none, or MaxPipes open: NetEnd{LIMIT}.
func (c *Conn) onNetOpen(f wire.Frame) error {
	var m wire.NetOpen
	if err := json.Unmarshal(f.Payload, &m); err != nil {
		return wire.Errorf("stream %#x: a bad open: %v", f.Stream, err)
	}
	if f.Stream&wire.DaemonStream == 0 {
		if m.Peer != "" {
			return wire.Errorf("stream %d: a dial's open with a peer", f.Stream)
		}
		return onPipe((*pipe).onOpen)(c, f)
	}
	var peer net.Addr = pipeAddr("sandbox")
	if m.Peer != "" {
		ap, err := netip.ParseAddrPort(m.Peer)
		if err != nil {
			return wire.Errorf("stream %#x: a bad peer", f.Stream)
		}
		peer = net.TCPAddrFromAddrPort(ap)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n := f.Stream &^ wire.DaemonStream
	if n <= c.peerNext {
		return wire.Errorf("stream %#x opened twice, or out of turn", f.Stream)
	}
	c.peerNext = n
	if c.err != nil {
		return nil
	}
	if c.accept == nil || len(c.pipes) >= wire.MaxPipes {
		return c.refuse(f.Stream)
	}
	var local net.Addr = pipeAddr("sandbox-mcp proxy listener")
	if c.listenAddr != nil {
		local = c.listenAddr
	}
	p := newPipe(c, f.Stream, local, peer)
	p.opened, p.credit = true, wire.PipeWindow
	c.pipes[f.Stream] = p
	go c.accept(p)
	return nil
}

// refuse answers an open the server does not take with NetEnd{LIMIT}, from
// a goroutine (the read loop never waits on a write): at most MaxPipes
// answers in flight; more is a flood, and ends the channel (c.mu held).
func (c *Conn) refuse(id uint32) error {
	if c.refusing >= wire.MaxPipes {
		return wire.Errorf("a flood of connections: over %d refused in flight", wire.MaxPipes)
	}
	c.refusing++
	go func() {
		b, _ := json.Marshal(wire.NetEnd{Err: wire.CodeLimit, Msg: "the server takes no more connections"})
		c.send(wire.KindNetEnd, id, b)
		c.mu.Lock()
		c.refusing--
		c.mu.Unlock()
	}()
	return nil
}

// onNetEnd: a listen's answer, or a pipe's end.
func (c *Conn) onNetEnd(f wire.Frame) error {
	var m wire.NetEnd
	if err := json.Unmarshal(f.Payload, &m); err != nil {
		return wire.Errorf("stream %#x: a bad end: %v", f.Stream, err)
	}
	c.mu.Lock()
	if nc := c.nets[f.Stream]; nc != nil {
		defer c.mu.Unlock()
		if nc.end != nil {
			return wire.Errorf("stream %d: a second answer", f.Stream)
		}
		if m.Err == "" {
			// The listener is on the sandbox's loopback; a bundle is a
			// clean absolute path, there when a CA was given.
			ap, err := netip.ParseAddrPort(m.Addr)
			switch {
			case err != nil || ap.Addr() != netip.AddrFrom4([4]byte{127, 0, 0, 1}) || ap.Port() == 0:
				return wire.Errorf("stream %d: the supervisor's address %q", f.Stream, wire.CapText(m.Addr, 64))
			case nc.ca != (m.CAFile != "") || m.CAFile != "" && !wire.ValidPath(m.CAFile):
				return wire.Errorf("stream %d: the CA bundle %q", f.Stream, wire.CapText(m.CAFile, 256))
			}
			c.listenAddr = net.TCPAddrFromAddrPort(ap)
		}
		nc.end = &m
		select {
		case nc.notify <- struct{}{}:
		default:
		}
		return nil
	}
	c.mu.Unlock()
	return onPipe(func(p *pipe, f wire.Frame) error { p.onEnd(&m); return nil })(c, f)
}

// onCredit is a credit: a pipe's, or a file write's.
func (c *Conn) onCredit(f wire.Frame) error {
	c.mu.Lock()
	_, isPipe := c.pipes[f.Stream]
	c.mu.Unlock()
	if isPipe || f.Stream&wire.DaemonStream != 0 {
		return onPipe((*pipe).onCredit)(c, f)
	}
	return onFS((*fsCall).onCredit)(c, f)
}
