package testkit

import (
	"io"
	"net"
	"os"
	"sync"
	"testing"
)

// UnixProxy forwards connections to the unix socket at sock to upstream
// until stop is called: an engine that comes back, behind a socket the
// server already knows. stop also closes the connections it forwards and
// removes sock; it is safe to call twice.
func UnixProxy(t testing.TB, sock, upstream string) (stop func()) {
	t.Helper()
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("unix", upstream)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, up)
			mu.Unlock()
			go func() { io.Copy(up, c); up.Close() }()
			go func() { io.Copy(c, up); c.Close() }()
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			ln.Close()
			mu.Lock()
			for _, c := range conns {
				c.Close()
			}
			mu.Unlock()
			os.Remove(sock)
		})
	}
}
