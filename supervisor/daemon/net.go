//go:build unix

package daemon

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/supervisor/wire"
)

// The supervisor's network requests (wire/kinds.go, SPEC §17): its one
// proxy listener on the sandbox's loopback, whose connections it hands to
// the channel that asked last, and dials to a port of the sandbox's
// loopback. Both become pipes (pipe.go).

// proxy is the supervisor's proxy listener and who receives its
// connections.
type proxy struct {
	mu        sync.Mutex
	ln        net.Listener
	receivers []*channel // live channels that asked, the receiver last
	cas       [][]byte   // the distinct CAs given, the last given last
}

// forget drops a channel that ended from the receivers.
func (px *proxy) forget(c *channel) {
	px.mu.Lock()
	defer px.mu.Unlock()
	for i, r := range px.receivers {
		if r == c {
			px.receivers = append(px.receivers[:i], px.receivers[i+1:]...)
			break
		}
	}
}

// dialTimeout bounds a dial's connect to the sandbox's loopback.
var dialTimeout = 10 * time.Second

// netRequest starts a network request as the frame's stream. The work
// (a connect, a file written) is done by a goroutine: the read loop never
// waits.
func (c *channel) netRequest(f wire.Frame) error {
	var req wire.NetRequest
	if err := json.Unmarshal(f.Payload, &req); err != nil {
		return wire.Errorf("net: %v", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.open(f.Stream); err != nil {
		return err
	}
	switch req.Op {
	case wire.NetDial:
		switch {
		case req.Port < 1 || req.Port > 65535:
			return c.answer(f.Stream, func() wire.NetEnd { return wire.NetEnd{Err: wire.CodeInval, Msg: "a port is 1 to 65535"} })
		case len(c.pipes) >= wire.MaxPipes:
			return c.answer(f.Stream, func() wire.NetEnd {
				return wire.NetEnd{Err: wire.CodeLimit, Msg: strconv.Itoa(wire.MaxPipes) + " connections are open"}
			})
		}
		p := newPipe(c, f.Stream, nil)
		c.pipes[f.Stream] = p
		go c.dial(p, req.Port)
		return nil
	case wire.NetListen:
		return c.answer(f.Stream, func() wire.NetEnd { return c.s.listenFor(c, req.CA) })
	}
	return c.answer(f.Stream, func() wire.NetEnd { return wire.NetEnd{Err: wire.CodeInval, Msg: "unknown operation"} })
}

// answer sends a request's answer, which end computes, from a goroutine;
// at most MaxPipes are in flight (c.mu held).
func (c *channel) answer(id uint32, end func() wire.NetEnd) error {
	if c.answering >= wire.MaxPipes {
		return wire.Errorf("over %d network requests in flight", wire.MaxPipes)
	}
	c.answering++
	go func() {
		b, _ := json.Marshal(end())
		c.send(wire.KindNetEnd, id, b)
		c.mu.Lock()
		c.answering--
		c.mu.Unlock()
	}()
	return nil
}

// dial connects a pipe to 127.0.0.1:port; never another address.
func (c *channel) dial(p *pipe, port int) {
	conn, err := net.DialTimeout("tcp", netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), uint16(port)).String(), dialTimeout)
	p.mu.Lock()
	ended := p.state != pipeLive
	if err == nil && !ended {
		p.conn, p.open = conn, true
	}
	p.mu.Unlock()
	switch {
	case err != nil:
		c.forgetPipe(p.id, p)
		if !ended {
			b, _ := json.Marshal(netError(err))
			c.send(wire.KindNetEnd, p.id, b)
		}
	case ended: // the server gave up first
		conn.Close()
		c.forgetPipe(p.id, p)
	default:
		if p.send(wire.KindNetOpen, []byte("{}")) {
			p.run()
		} else {
			conn.Close()
			c.forgetPipe(p.id, p)
		}
	}
}

// listenFor makes c the receiver of the proxy listener's connections,
// starting it on first use, and writes the CA bundle when ca is given.
func (s *supervisor) listenFor(c *channel, ca []byte) wire.NetEnd {
	var file string
	if len(ca) > 0 {
		if !wire.ValidCA(ca) {
			return wire.NetEnd{Err: wire.CodeInval, Msg: "the CA is not PEM certificates"}
		}
		var err error
		if file, err = s.writeCA(ca); err != nil {
			return wire.NetEnd{Err: wire.CodeCA, Msg: err.Error()}
		}
	}
	px := &s.proxy
	px.mu.Lock()
	defer px.mu.Unlock()
	if px.ln == nil {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			end := netError(err)
			end.Msg = wire.CapText("listen: "+err.Error(), 200)
			return end
		}
		px.ln = ln
		go s.acceptLoop(ln)
	}
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if !closed {
		for i, r := range px.receivers {
			if r == c {
				px.receivers = append(px.receivers[:i], px.receivers[i+1:]...)
				break
			}
		}
		px.receivers = append(px.receivers, c)
	}
	return wire.NetEnd{Addr: px.ln.Addr().String(), CAFile: file}
}

// acceptLoop hands every connection the listener accepts to the receiver:
// the last live channel that asked; one at its MaxPipes, or none, closes
// it at once.
func (s *supervisor) acceptLoop(ln net.Listener) {
	for {
		conn, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(50 * time.Millisecond) // out of descriptors: later
			continue
		}
		go s.proxy.hand(conn)
	}
}

// hand gives an accepted connection to the receiver.
func (px *proxy) hand(conn net.Conn) {
	px.mu.Lock()
	rs := append([]*channel(nil), px.receivers...)
	px.mu.Unlock()
	for i := len(rs) - 1; i >= 0; i-- {
		p, live := rs[i].accepted(conn)
		if live {
			if p != nil {
				p.run()
				return
			}
			break
		}
		// ended meanwhile: the one before
	}
	conn.Close()
}

// accepted makes conn a new pipe of c, opened by the supervisor (its id
// has wire.DaemonStream), and sends its open; nil when c has MaxPipes
// (opened, or waiting to be). live is false for a channel that ended. The
// opens of a channel go out in the order of their ids (c.openMu); a
// channel that does not take them holds up only its own.
func (c *channel) accepted(conn net.Conn) (p *pipe, live bool) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, false
	}
	if len(c.pipes)+c.opening >= wire.MaxPipes || c.nextPipe+1 >= wire.DaemonStream {
		c.mu.Unlock()
		return nil, true
	}
	c.opening++
	c.mu.Unlock()
	c.openMu.Lock()
	defer c.openMu.Unlock()
	c.mu.Lock()
	c.opening--
	closed := c.closed
	if !closed {
		c.nextPipe++
		p = newPipe(c, c.nextPipe|wire.DaemonStream, conn)
		p.open = true
		c.pipes[p.id] = p
	}
	c.mu.Unlock()
	if closed {
		return nil, false
	}
	b, _ := json.Marshal(wire.NetOpen{Peer: conn.RemoteAddr().String()})
	if !p.send(wire.KindNetOpen, b) {
		c.forgetPipe(p.id, p)
		return nil, true
	}
	return p, true
}

// systemRoots are where systems keep their roots, the first found is the
// bundle's start.
var systemRoots = []string{"/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem", "/etc/ssl/ca-bundle.pem"}

// maxRootsBytes bounds the system's roots read: a larger file is not
// taken.
const maxRootsBytes = 16 << 20

// caBundle is the bundle's name in the private directory.
const caBundle = "ca-bundle.pem"

// writeCA adds ca to the CAs given and writes the bundle — the system's
// roots, then each CA — atomically into the supervisor's private
// directory (shellstate.go's: the supervisor's user alone writes there,
// and the commands it runs are that user), and returns its path.
func (s *supervisor) writeCA(ca []byte) (string, error) {
	px := &s.proxy
	px.mu.Lock()
	defer px.mu.Unlock()
	for i, old := range px.cas {
		if bytes.Equal(old, ca) {
			px.cas = append(px.cas[:i], px.cas[i+1:]...)
			break
		}
	}
	px.cas = append(px.cas, bytes.Clone(ca))
	if n := len(px.cas); n > wire.MaxCAs {
		px.cas = append([][]byte(nil), px.cas[n-wire.MaxCAs:]...)
	}
	dir := s.state.dir
	if dir == "" {
		return "", errors.New("the supervisor has no private directory")
	}
	if err := s.state.ensureDir(); err != nil {
		return "", err
	}
	var b bytes.Buffer
	for _, p := range systemRoots {
		roots, err := readRoots(p)
		if err == nil {
			b.Write(roots)
			if len(roots) > 0 && roots[len(roots)-1] != '\n' {
				b.WriteByte('\n')
			}
			break
		}
	}
	for _, c := range px.cas {
		b.Write(c)
		if c[len(c)-1] != '\n' {
			b.WriteByte('\n')
		}
	}
	tmp, err := os.CreateTemp(dir, ".ca-*")
	if err != nil {
		return "", err
	}
	_, err = tmp.Write(b.Bytes())
	if err == nil {
		err = tmp.Chmod(0o644)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	file := filepath.Join(dir, caBundle)
	if err == nil {
		err = os.Rename(tmp.Name(), file)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return "", err
	}
	return file, nil
}

// readRoots reads a system's roots: a regular file (the open does not
// block on a FIFO), bounded.
func readRoots(p string) ([]byte, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() || fi.Size() > maxRootsBytes {
		return nil, errors.New("not a bundle")
	}
	return io.ReadAll(io.LimitReader(f, maxRootsBytes))
}
