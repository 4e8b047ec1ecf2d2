//go:build linux

package supervisor

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/internal/testkit"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor/supervisortest"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor/wire"
)

// The daemon these tests start over pipes runs on this machine: its
// sandbox's loopback is this one's, where the tests' servers listen and
// from where they dial its proxy listener.

// startDaemon runs the daemon over pipes, as the local provider does.
func startDaemon(t *testing.T) *Conn {
	t.Helper()
	c, err := StartProcess(context.Background(), exec.Command(supervisortest.Path(t), "supervise"), true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// server listens on the loopback ("in the sandbox") and serves each
// connection with serve; it returns the port.
func server(t *testing.T, serve func(*net.TCPConn)) int {
	t.Helper()
	return testkit.TCPServer(t, serve).Port
}

// echo copies what it reads back, and half-closes at the reader's EOF.
func echo(c *net.TCPConn) {
	io.Copy(c, c)
	c.CloseWrite()
	io.Copy(io.Discard, c)
	c.Close()
}

type halfCloser interface {
	net.Conn
	CloseWrite() error
}

func TestDialPortEcho(t *testing.T) {
	t.Parallel()
	port := server(t, echo)
	c := startDaemon(t)
	if b := c.Hello().Boot; len(b) != 32 {
		t.Fatalf("boot %q", b)
	}
	nc, err := c.DialPort(t.Context(), port)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if got := nc.RemoteAddr().String(); got != "127.0.0.1:"+strconv.Itoa(port) {
		t.Fatalf("remote address %s", got)
	}
	for _, msg := range []string{"hello", strings.Repeat("x", 100<<10)} {
		if _, err := nc.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(nc, got); err != nil || string(got) != msg {
			t.Fatalf("echoed %d bytes, err %v", len(got), err)
		}
	}
	// Our half close reaches the server, whose own comes back as EOF.
	nc.Write([]byte("last"))
	if err := nc.(halfCloser).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if _, err := nc.Write([]byte("x")); err == nil {
		t.Fatal("a write after CloseWrite")
	}
	rest, err := io.ReadAll(nc)
	if err != nil || string(rest) != "last" {
		t.Fatalf("after the half close: %q, %v", rest, err)
	}
	if err := nc.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := nc.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("a read after Close: %v", err)
	}
}

func TestDialPortRefused(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	c := startDaemon(t)
	if _, err := c.DialPort(t.Context(), port); !errors.Is(err, sandbox.ErrPortRefused) {
		t.Fatalf("err %v, want ErrPortRefused", err)
	}
	for _, port := range []int{0, -1, 65536} {
		if _, err := c.DialPort(t.Context(), port); err == nil {
			t.Fatalf("port %d dialed", port)
		}
	}
	// The channel goes on.
	if _, err := c.DialPort(t.Context(), server(t, echo)); err != nil {
		t.Fatal(err)
	}
}

// acceptor collects a Conn's accepted connections.
type acceptor chan net.Conn

func (a acceptor) accept(c net.Conn) { a <- c }

func (a acceptor) next(t *testing.T) net.Conn {
	t.Helper()
	select {
	case c := <-a:
		t.Cleanup(func() { c.Close() })
		return c
	case <-time.After(10 * time.Second):
		t.Fatal("no connection accepted")
		return nil
	}
}

// closedAtOnce checks that the sandbox's connection c was closed by the
// other side without a byte.
func closedAtOnce(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := c.Read(make([]byte, 1))
	if n != 0 || err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read %d bytes, err %v: not closed", n, err)
	}
}

// One listener per daemon, whichever channel asks; the last live channel
// that asked receives its connections, then the one before, then none.
func TestListenOneListenerLastReceives(t *testing.T) {
	t.Parallel()
	dial := listen(t)
	conns := make([]*Conn, 2)
	accepted := []acceptor{make(acceptor, 4), make(acceptor, 4)}
	var addr string
	for i := range conns {
		c, err := dial(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		conns[i] = c
		l, err := c.Listen(t.Context(), nil, accepted[i].accept)
		if err != nil {
			t.Fatal(err)
		}
		if i > 0 && l.Addr != addr || l.CAFile != "" || !strings.HasPrefix(l.Addr, "127.0.0.1:") {
			t.Fatalf("listener %+v, the first %s", l, addr)
		}
		addr = l.Addr
	}
	reaches := func(want int) {
		t.Helper()
		s, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if want < 0 {
			closedAtOnce(t, s)
			return
		}
		s.Write([]byte{byte(want)})
		nc := accepted[want].next(t)
		b := make([]byte, 1)
		if _, err := io.ReadFull(nc, b); err != nil || b[0] != byte(want) {
			t.Fatalf("read %v %v", b, err)
		}
	}
	reaches(1)
	// Listening again makes a channel the receiver again.
	if _, err := conns[0].Listen(t.Context(), nil, accepted[0].accept); err != nil {
		t.Fatal(err)
	}
	reaches(0)
	conns[0].Close()
	time.Sleep(100 * time.Millisecond) // the daemon sees the channel's end
	reaches(1)
	conns[1].Close()
	time.Sleep(100 * time.Millisecond)
	reaches(-1)
}

// An accepted connection carries bytes both ways, each way's half close
// as EOF on the other side.
func TestListenHalfClose(t *testing.T) {
	t.Parallel()
	c := startDaemon(t)
	accepted := make(acceptor, 1)
	l, err := c.Listen(t.Context(), nil, accepted.accept)
	if err != nil {
		t.Fatal(err)
	}
	s, err := net.Dial("tcp", l.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	nc := accepted.next(t)
	if nc.RemoteAddr().String() != s.LocalAddr().String() || nc.LocalAddr().String() != l.Addr {
		t.Fatalf("addresses %s %s, want %s %s", nc.RemoteAddr(), nc.LocalAddr(), s.LocalAddr(), l.Addr)
	}
	// The sandbox's side half-closes first: the server reads it all, then
	// EOF, and can still answer.
	s.Write([]byte("request"))
	s.(*net.TCPConn).CloseWrite()
	got, err := io.ReadAll(nc)
	if err != nil || string(got) != "request" {
		t.Fatalf("the server read %q, %v", got, err)
	}
	nc.Write([]byte("answer"))
	if err := nc.(halfCloser).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	s.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err = io.ReadAll(s)
	if err != nil || string(got) != "answer" {
		t.Fatalf("the sandbox read %q, %v", got, err)
	}
	// Both ways ended: the pipe is gone; Close sends nothing more.
	c.mu.Lock()
	n := len(c.pipes)
	c.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d pipes left", n)
	}
	if err := nc.Close(); err != nil {
		t.Fatal(err)
	}

	// And the other way round: the server half-closes first.
	s2, err := net.Dial("tcp", l.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	nc2 := accepted.next(t)
	nc2.Write([]byte("hello"))
	nc2.(halfCloser).CloseWrite()
	s2.SetReadDeadline(time.Now().Add(5 * time.Second))
	if got, err := io.ReadAll(s2); err != nil || string(got) != "hello" {
		t.Fatalf("the sandbox read %q, %v", got, err)
	}
	s2.Write([]byte("still"))
	s2.(*net.TCPConn).CloseWrite()
	if got, err := io.ReadAll(nc2); err != nil || string(got) != "still" {
		t.Fatalf("the server read %q, %v", got, err)
	}
}

// Many pipes at once, each its own bytes.
func TestPipesConcurrent(t *testing.T) {
	t.Parallel()
	port := server(t, echo)
	c := startDaemon(t)
	const n, size = 64, 512 << 10
	errs := make(chan error, n)
	for i := range n {
		go func() {
			errs <- func() error {
				nc, err := c.DialPort(t.Context(), port)
				if err != nil {
					return err
				}
				defer nc.Close()
				data := bytes.Repeat([]byte{byte(i)}, size)
				rand.Read(data[:64])
				go func() {
					nc.Write(data)
					nc.(halfCloser).CloseWrite()
				}()
				got, err := io.ReadAll(nc)
				if err != nil {
					return err
				}
				if !bytes.Equal(got, data) {
					return fmt.Errorf("pipe %d: %d bytes came back changed", i, len(got))
				}
				return nil
			}()
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// kernelBuffers is what the loopback's sockets can hold beside a pipe: a
// send buffer that grows to tcp_wmem's maximum, and a receive buffer.
func kernelBuffers(t *testing.T) int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_wmem")
	f := strings.Fields(string(b))
	if err != nil || len(f) != 3 {
		return 4 << 20
	}
	n, _ := strconv.Atoi(f[2])
	return n
}

// 50 MB each way through one pipe, while each reader stalls a while: what
// a writer gets through during the stall is the credit and the kernel's
// buffers, not the 50 MB (which either side would then hold).
func TestPipeFlowControl(t *testing.T) {
	t.Parallel()
	const size = 50 << 20
	stall := 500 * time.Millisecond
	bound := int64(wire.PipeWindow + kernelBuffers(t) + 1<<20)
	var sandboxWrote atomic.Int64
	sandboxRead := make(chan string, 1)
	port := server(t, func(s *net.TCPConn) {
		s.SetReadBuffer(64 << 10) // no autotuning: the kernel holds little
		s.SetWriteBuffer(64 << 10)
		go func() {
			time.Sleep(stall)
			h := sha256.New()
			io.Copy(h, s)
			sandboxRead <- hex.EncodeToString(h.Sum(nil))
		}()
		r := newPattern(2)
		h := sha256.New()
		buf := make([]byte, 64<<10)
		for sent := 0; sent < size; sent += len(buf) {
			r.Read(buf)
			h.Write(buf)
			s.Write(buf)
			sandboxWrote.Add(int64(len(buf)))
		}
		s.CloseWrite()
	})
	c := startDaemon(t)
	nc, err := c.DialPort(t.Context(), port)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var serverWrote atomic.Int64
	wrote := make(chan error, 1)
	go func() {
		r := newPattern(1)
		buf := make([]byte, 64<<10)
		for sent := 0; sent < size; sent += len(buf) {
			r.Read(buf)
			if _, err := nc.Write(buf); err != nil {
				wrote <- err
				return
			}
			serverWrote.Add(int64(len(buf)))
		}
		wrote <- nc.(halfCloser).CloseWrite()
	}()
	time.Sleep(stall - 100*time.Millisecond)
	a, b := serverWrote.Load(), sandboxWrote.Load()
	t.Logf("during the stall: the server wrote %d, the sandbox %d (bound %d)", a, b, bound)
	if a > bound || b > bound {
		t.Fatalf("while the readers stalled, the server wrote %d bytes, the sandbox %d: over %d", a, b, bound)
	}
	h := sha256.New()
	n, err := io.Copy(h, nc)
	if err != nil || n != size {
		t.Fatalf("the server read %d bytes, %v", n, err)
	}
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	if got, want := hex.EncodeToString(h.Sum(nil)), patternSum(2, size); got != want {
		t.Fatal("the sandbox's bytes came changed")
	}
	if got, want := <-sandboxRead, patternSum(1, size); got != want {
		t.Fatal("the server's bytes came changed")
	}
}

// pattern is a cheap reproducible byte stream.
type pattern struct{ x uint64 }

func newPattern(seed uint64) *pattern { return &pattern{x: seed*0x9e3779b97f4a7c15 + 1} }

func (p *pattern) Read(b []byte) (int, error) {
	for i := range b {
		p.x ^= p.x << 13
		p.x ^= p.x >> 7
		p.x ^= p.x << 17
		b[i] = byte(p.x)
	}
	return len(b), nil
}

func patternSum(seed uint64, n int64) string {
	h := sha256.New()
	io.CopyN(h, newPattern(seed), n)
	return hex.EncodeToString(h.Sum(nil))
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) && errors.As(err, &ne) && ne.Timeout()
}

func TestPipeDeadlines(t *testing.T) {
	t.Parallel()
	hold := make(chan struct{})
	defer close(hold)
	port := server(t, func(s *net.TCPConn) {
		s.SetReadBuffer(16 << 10)
		<-hold // reads nothing, writes nothing
		s.Close()
	})
	c := startDaemon(t)
	nc, err := c.DialPort(t.Context(), port)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()

	// A read with nothing to read ends at its deadline, and one past it
	// at once.
	start := time.Now()
	nc.SetReadDeadline(start.Add(100 * time.Millisecond))
	if _, err := nc.Read(make([]byte, 1)); !isTimeout(err) {
		t.Fatalf("read: %v", err)
	}
	if d := time.Since(start); d < 90*time.Millisecond || d > 5*time.Second {
		t.Fatalf("the read ended after %v", d)
	}
	if _, err := nc.Read(make([]byte, 1)); !isTimeout(err) {
		t.Fatalf("a read past its deadline: %v", err)
	}
	// A deadline moved while a read waits is the one that holds.
	nc.SetReadDeadline(time.Now().Add(time.Hour))
	go func() {
		time.Sleep(50 * time.Millisecond)
		nc.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	}()
	if _, err := nc.Read(make([]byte, 1)); !isTimeout(err) {
		t.Fatalf("read: %v", err)
	}

	// A write with no credit left (the sandbox's server reads nothing)
	// ends at its deadline, having written part.
	nc.SetWriteDeadline(time.Now().Add(500 * time.Millisecond))
	n, err := nc.Write(make([]byte, 64<<20))
	if !isTimeout(err) || n == 0 || n >= 64<<20 {
		t.Fatalf("write: %d bytes, %v", n, err)
	}
	if _, err := nc.Write([]byte("x")); !isTimeout(err) {
		t.Fatalf("a write past its deadline: %v", err)
	}
	// The credit the write above did not use up in time (a loaded machine:
	// the daemon still drains it into the socket's growing buffers) is
	// used up now: writes until none gets a byte through in 300 ms.
	for i := 0; ; i++ {
		nc.SetWriteDeadline(time.Now().Add(300 * time.Millisecond))
		n, err := nc.Write(make([]byte, 1<<20))
		if !isTimeout(err) {
			t.Fatalf("a write to a server that reads nothing: %d bytes, %v", n, err)
		}
		if n == 0 {
			break
		}
		if i == 100 {
			t.Fatalf("credit still coming after %d writes", i)
		}
	}
	// No deadline: the write waits (until Close).
	nc.SetWriteDeadline(time.Time{})
	done := make(chan error, 1)
	go func() { _, err := nc.Write([]byte("x")); done <- err }()
	select {
	case err := <-done:
		t.Fatalf("a write without credit returned %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	nc.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("a write closed under: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end a waiting write")
	}
}

// pipeListener makes a Conn's accepted connections a net.Listener.
type pipeListener struct {
	conns chan net.Conn
	addr  net.Addr
	done  chan struct{}
	once  sync.Once
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}
func (l *pipeListener) Close() error   { l.once.Do(func() { close(l.done) }); return nil }
func (l *pipeListener) Addr() net.Addr { return l.addr }

// net/http on both kinds of pipe: a server on the proxy listener's
// connections (what the egress proxy is), and a reverse proxy whose
// transport dials the sandbox's port (what expose_port is).
func TestPipeHTTP(t *testing.T) {
	t.Parallel()
	c := startDaemon(t)
	pl := &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
	l, err := c.Listen(t.Context(), nil, func(nc net.Conn) {
		select {
		case pl.conns <- nc:
		case <-pl.done:
			nc.Close()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	pl.addr, _ = net.ResolveTCPAddr("tcp", l.Addr)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s %s %d", r.Method, r.URL.Path, len(body))
	}), ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second, IdleTimeout: time.Second}
	go srv.Serve(pl)
	defer srv.Close()
	for i := range 3 {
		resp, err := http.Post("http://"+l.Addr+"/p"+strconv.Itoa(i), "text/plain", strings.NewReader(strings.Repeat("b", 300<<10)))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if want := fmt.Sprintf("POST /p%d %d", i, 300<<10); string(b) != want {
			t.Fatalf("got %q, want %q", b, want)
		}
	}

	// The sandbox's own web server, reached through a reverse proxy.
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write(bytes.Repeat([]byte("a"), 1<<20))
	}))
	defer app.Close()
	port := app.Listener.Addr().(*net.TCPAddr).Port
	target, _ := url.Parse("http://sandbox")
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.Transport = &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return c.DialPort(ctx, port) }}
	front := httptest.NewServer(rp)
	defer front.Close()
	for range 3 {
		resp, err := http.Get(front.URL + "/x")
		if err != nil {
			t.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || n != 1<<20 {
			t.Fatalf("status %d, %d bytes", resp.StatusCode, n)
		}
	}
}

// The channel's end fails every pipe of it, on both sides: the net.Conns
// fail, the daemon closes their connections; another channel's pipes go
// on.
func TestChannelEndFailsPipes(t *testing.T) {
	t.Parallel()
	dial := listen(t)
	closed := make(chan struct{}, 8)
	port := server(t, func(s *net.TCPConn) {
		io.Copy(s, s) // until the daemon closes it
		closed <- struct{}{}
		s.Close()
	})
	a, err := dial(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	b, err := dial(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var pipes []net.Conn
	for range 3 {
		nc, err := a.DialPort(t.Context(), port)
		if err != nil {
			t.Fatal(err)
		}
		pipes = append(pipes, nc)
	}
	accepted := make(acceptor, 1)
	l, err := a.Listen(t.Context(), nil, accepted.accept)
	if err != nil {
		t.Fatal(err)
	}
	s, err := net.Dial("tcp", l.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	pipes = append(pipes, accepted.next(t))
	other, err := b.DialPort(t.Context(), port)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()

	reads := make(chan error, len(pipes))
	for _, nc := range pipes {
		go func() { _, err := nc.Read(make([]byte, 1)); reads <- err }()
	}
	a.Close()
	for range pipes {
		select {
		case err := <-reads:
			var ce *ChannelError
			if !errors.As(err, &ce) {
				t.Fatalf("a read on a pipe of a closed channel: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a read on a pipe of a closed channel hangs")
		}
	}
	for _, nc := range pipes {
		if _, err := nc.Write([]byte("x")); err == nil {
			t.Fatal("a write on a pipe of a closed channel")
		}
	}
	for range 3 {
		select {
		case <-closed:
		case <-time.After(5 * time.Second):
			t.Fatal("the daemon did not close a dialed connection of the channel")
		}
	}
	closedAtOnce(t, s)
	// b's pipe is another channel's: it works.
	other.Write([]byte("ok"))
	got := make([]byte, 2)
	if _, err := io.ReadFull(other, got); err != nil || string(got) != "ok" {
		t.Fatalf("another channel's pipe: %q %v", got, err)
	}
}

// testCA is a self-signed CA certificate, PEM-encoded.
func testCA(t *testing.T, name string) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// systemRoots is the first system bundle there is (the daemon's list).
func systemRoots() []byte {
	for _, p := range []string{"/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem", "/etc/ssl/ca-bundle.pem"} {
		if b, err := os.ReadFile(p); err == nil {
			return b
		}
	}
	return nil
}

// A listen with a CA writes a bundle a command can read: the system's
// roots, then each distinct CA any channel gave.
func TestListenCABundle(t *testing.T) {
	t.Parallel()
	dial := listen(t)
	ca1, ca2 := testCA(t, "one"), testCA(t, "two")
	var file string
	for i, ca := range [][]byte{ca1, ca2, ca1} {
		c, err := dial(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		l, err := c.Listen(t.Context(), ca, func(nc net.Conn) { nc.Close() })
		if err != nil {
			t.Fatal(err)
		}
		if i > 0 && l.CAFile != file || l.CAFile == "" {
			t.Fatalf("bundle %q, before %q", l.CAFile, file)
		}
		file = l.CAFile
		// A command of the sandbox reads it.
		out, res, err := sh(c, t.Context(), "cat "+file, 0)
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("cat: %v %+v %s", err, res, out)
		}
		roots := systemRoots()
		if !strings.HasPrefix(out, string(roots)) {
			t.Fatal("the bundle does not start with the system's roots")
		}
		rest := out[len(roots):]
		// Each CA once, in the order last given.
		want := []string{string(ca1), string(ca1) + string(ca2), string(ca2) + string(ca1)}[i]
		if strings.TrimLeft(rest, "\n") != want {
			t.Fatalf("after the roots, the bundle holds %q, want %q", rest, want)
		}
	}
	fi, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm()&0o022 != 0 {
		t.Fatalf("the bundle's mode %v: others may write", fi.Mode())
	}
	// Not certificates: refused before anything is sent.
	c, err := dial(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Listen(t.Context(), []byte("-----BEGIN PRIVATE KEY-----\nAQID\n-----END PRIVATE KEY-----\n"), func(net.Conn) {}); err == nil {
		t.Fatal("a private key as a CA")
	}
}
