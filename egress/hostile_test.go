package egress

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/internal/testkit"
)

// pair is a real TCP connection: the sandbox's end, and the proxy's.
func pair(t testing.TB) (client *net.TCPConn, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return c.(*net.TCPConn), s
}

// feed serves one connection on which the sandbox writes in (then, with
// half, closes its sending side), and returns all the proxy answered. The
// proxy must end the connection by itself, and ServeConn return.
func feed(t testing.TB, p *Proxy, in []byte, half bool) string {
	t.Helper()
	client, server := pair(t)
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.ServeConn(context.Background(), server, Who{Thread: "t"})
	}()
	client.SetDeadline(time.Now().Add(20 * time.Second))
	go func() {
		client.Write(in)
		if half {
			client.CloseWrite()
		}
	}()
	out, _ := io.ReadAll(client)
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatalf("ServeConn did not return on %q", cutBytes(in))
	}
	return string(out)
}

func cutBytes(b []byte) []byte {
	if len(b) > 100 {
		return b[:100]
	}
	return b
}

func hostileProxy(t testing.TB, logs io.Writer) *Proxy {
	t.Helper()
	p, err := New(Config{Mode: ModeAllowlist, Allow: []string{"example.com", "127.0.0.1:9"}},
		Options{StateDir: t.TempDir(), Logger: slogTo(logs), lookup: noNames, limits: limits{headerTimeout: 2 * time.Second, keepAliveIdle: 2 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// noNames resolves nothing: the tests of hostile input reach no network.
func noNames(_ context.Context, host string) ([]netip.Addr, error) {
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func TestHostileInput(t *testing.T) {
	t.Parallel()
	var logs testkit.Buffer
	p := hostileProxy(t, &logs)
	for _, tc := range []struct {
		name string
		in   string
		half bool
		want string // a prefix of the answer; "" for none at all
		has  string // a substring of it
	}{
		{"garbage", "\x00\xff\xfe garbage\r\n\r\n", false, "HTTP/1.1 400", ""},
		{"a TLS hello to the proxy itself", "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", true, "HTTP/1.1 400", ""},
		{"huge headers", "GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\nX-Big: " + strings.Repeat("a", 200<<10) + "\r\n\r\n", false, "HTTP/1.1 431", ""},
		{"many headers", "GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\n" + strings.Repeat("X-A: b\r\n", 20000) + "\r\n", false, "HTTP/1.1 431", ""},
		{"CONNECT to port 0", "CONNECT example.com:0 HTTP/1.1\r\nHost: example.com:0\r\n\r\n", false, "HTTP/1.1 400", "a port is a number from 1 to 65535"},
		{"CONNECT without a port", "CONNECT example.com HTTP/1.1\r\nHost: example.com\r\n\r\n", false, "HTTP/1.1 400", "CONNECT wants host:port"},
		{"CONNECT to a broken IPv6", "CONNECT [::1:443 HTTP/1.1\r\nHost: x\r\n\r\n", false, "HTTP/1.1 400", ""},
		{"CONNECT to a huge name", "CONNECT " + strings.Repeat("a", 5000) + ".com:443 HTTP/1.1\r\nHost: x\r\n\r\n", false, "HTTP/1.1 400", ""},
		{"CONNECT to a numeric name", "CONNECT 2130706433:80 HTTP/1.1\r\nHost: x\r\n\r\n", false, "HTTP/1.1 400", ""},
		{"CONNECT with a path", "CONNECT /etc/passwd HTTP/1.1\r\nHost: x\r\n\r\n", false, "HTTP/1.1 400", ""},
		{"origin form", "GET / HTTP/1.1\r\nHost: example.com\r\n\r\n", true, "HTTP/1.1 400", "this is a proxy"},
		{"ftp", "GET ftp://example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n", true, "HTTP/1.1 400", ""},
		{"half a request, then half closed", "GET http://example.com/ HTTP/1.1\r\nHo", true, "", ""},
		{"nothing, half closed", "", true, "", ""},
		{"half a CONNECT, then half closed", "CONNECT example.com:443 HT", true, "", ""},
		{"a body that never comes", "POST http://127.0.0.1:9/ HTTP/1.1\r\nHost: 127.0.0.1:9\r\nContent-Length: 100000\r\n\r\nabc", true, "", ""},
		{"conflicting lengths", "POST http://example.com/ HTTP/1.1\r\nHost: example.com\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\nabc", true, "HTTP/1.1 502", "no such host"},
		{"bad chunked", "POST http://127.0.0.1:9/ HTTP/1.1\r\nHost: 127.0.0.1:9\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", true, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			out := feed(t, p, []byte(tc.in), tc.half)
			if !strings.HasPrefix(out, tc.want) || !strings.Contains(out, tc.has) {
				t.Errorf("answer %q, want it to start with %q and hold %q", cutBytes([]byte(out)), tc.want, tc.has)
			}
		})
	}
	t.Cleanup(func() {
		if strings.Contains(logs.String(), "panic") {
			t.Errorf("a handler panicked: %s", logs.String())
		}
	})
}

// Random bytes, and random cuts of good requests, never panic and always
// end.
func TestHostileRandom(t *testing.T) {
	t.Parallel()
	var logs testkit.Buffer
	p := hostileProxy(t, &logs)
	seeds := []string{
		"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n",
		"GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
	}
	r := rand.New(rand.NewPCG(1, 2))
	var wg sync.WaitGroup
	for i := range 40 {
		var in []byte
		if i%2 == 0 {
			in = make([]byte, r.IntN(2000))
			for j := range in {
				in[j] = byte(r.IntN(256))
			}
		} else {
			s := []byte(seeds[r.IntN(len(seeds))])
			for range 3 {
				s[r.IntN(len(s))] = byte(r.IntN(256))
			}
			in = s[:r.IntN(len(s))]
		}
		wg.Go(func() { feed(t, p, in, true) })
	}
	wg.Wait()
	if strings.Contains(logs.String(), "panic") {
		t.Errorf("a handler panicked: %s", logs.String())
	}
}

func FuzzServeConn(f *testing.F) {
	for _, s := range []string{
		"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n",
		"GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n",
		"CONNECT [::1]:0 HTTP/1.0\r\n\r\n",
		"\x16\x03\x01",
	} {
		f.Add([]byte(s))
	}
	var logs testkit.Buffer
	p := hostileProxy(f, &logs)
	f.Fuzz(func(t *testing.T, in []byte) {
		feed(t, p, in, true)
		if strings.Contains(logs.String(), "panic") {
			t.Fatalf("a handler panicked: %s", logs.String())
		}
	})
}

// When the server ends the sandbox's connections (ctx done), ServeConn
// returns, whatever the connection was doing.
func TestServeConnContext(t *testing.T) {
	t.Parallel()
	silent := silentServer(t)
	p, err := New(Config{Mode: ModeAllowlist, Allow: []string{silent}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, in string }{
		{"idle", ""},
		{"in a tunnel", "CONNECT " + silent + " HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"waiting for an answer", "GET http://" + silent + "/ HTTP/1.1\r\nHost: x\r\n\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			client, server := pair(t)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() {
				defer close(done)
				p.ServeConn(ctx, server, Who{})
			}()
			io.WriteString(client, tc.in)
			time.Sleep(200 * time.Millisecond)
			cancel()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("ServeConn did not return when its context was done")
			}
		})
	}
}

// silentServer accepts connections and never writes: it reads until the
// other side ends.
func silentServer(t testing.TB) string {
	t.Helper()
	return testkit.TCPServer(t, func(c *net.TCPConn) { io.Copy(io.Discard, c); c.Close() }).String()
}

// A tunnel passes half closes on: the sandbox finishes sending, the
// server answers, then ends.
func TestTunnelHalfClose(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		b, _ := io.ReadAll(c) // until the sandbox's half close arrives
		fmt.Fprintf(c, "got %d bytes", len(b))
	}()
	p, err := New(Config{Mode: ModeAllowlist, Allow: []string{ln.Addr().String()}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	client, server := pair(t)
	go p.ServeConn(t.Context(), server, Who{})
	client.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(client, "CONNECT %s HTTP/1.1\r\nHost: x\r\n\r\nhello", ln.Addr())
	client.CloseWrite()
	br := bufio.NewReader(client)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	rest, err := io.ReadAll(br)
	if err != nil || string(rest) != "got 5 bytes" {
		t.Errorf("through the half-closed tunnel: %q %v", rest, err)
	}
}

// A tunnel idle too long is closed; a thread holds a bounded number of
// connections, and another thread is not held up by it.
func TestTunnelBounds(t *testing.T) {
	t.Parallel()
	silent := silentServer(t)
	p, err := New(Config{Mode: ModeAllowlist, Allow: []string{silent}},
		Options{limits: limits{tunnelIdle: 300 * time.Millisecond, connsPerThread: 2}})
	if err != nil {
		t.Fatal(err)
	}
	connect := func(who Who) (*bufio.Reader, *http.Response, *net.TCPConn) {
		client, server := pair(t)
		go p.ServeConn(t.Context(), server, who)
		client.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(client, "CONNECT %s HTTP/1.1\r\nHost: x\r\n\r\n", silent)
		br := bufio.NewReader(client)
		resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
		if err != nil {
			t.Fatal(err)
		}
		return br, resp, client
	}
	start := time.Now()
	a := Who{Thread: "a"}
	br1, r1, _ := connect(a)
	_, r2, c2 := connect(a)
	_, r3, _ := connect(a)
	_, rb, _ := connect(Who{Thread: "b"})
	if r1.StatusCode != 200 || r2.StatusCode != 200 || rb.StatusCode != 200 {
		t.Fatalf("CONNECTs within the bound: %d %d %d", r1.StatusCode, r2.StatusCode, rb.StatusCode)
	}
	if r3.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("a third connection of one thread: %d, want 503", r3.StatusCode)
	}
	// Bytes keep the second tunnel alive past the idle time.
	for range 5 {
		time.Sleep(100 * time.Millisecond)
		if _, err := c2.Write([]byte("x")); err != nil {
			t.Fatalf("a busy tunnel was closed: %v", err)
		}
	}
	if _, err := br1.ReadByte(); err != io.EOF {
		t.Errorf("an idle tunnel: read %v, want it closed", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the idle tunnel was closed after %v", d)
	}
	// Once closed, the thread may open another.
	if !testkit.Poll(5*time.Second, 20*time.Millisecond, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.conns["a"] < 2
	}) {
		t.Fatal("the closed tunnel still counts against its thread")
	}
	if _, r4, _ := connect(a); r4.StatusCode != 200 {
		t.Errorf("a new connection after one closed: %d", r4.StatusCode)
	}
}

// With mode none, nothing passes.
func TestModeNone(t *testing.T) {
	t.Parallel()
	p, err := New(Config{}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range []string{
		"CONNECT example.com:443 HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n",
	} {
		out := feed(t, p, []byte(in), true)
		if !strings.HasPrefix(out, "HTTP/1.1 403") || !strings.Contains(out, "network.mode is none") {
			t.Errorf("mode none answered %q", out)
		}
	}
}
