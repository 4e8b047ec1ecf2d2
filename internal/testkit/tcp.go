package testkit

import (
	"net"
	"testing"
)

// TCPServer listens on 127.0.0.1 (an ephemeral port) until the test ends
// and hands each connection to serve, in a goroutine of its own; it
// returns the address.
func TCPServer(t testing.TB, serve func(*net.TCPConn)) *net.TCPAddr {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go serve(c.(*net.TCPConn))
		}
	}()
	return ln.Addr().(*net.TCPAddr)
}
