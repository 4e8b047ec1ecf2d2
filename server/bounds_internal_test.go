package server

import (
	"net"
	"net/http"
	"testing"
	"time"
)

func TestAuthorizationLine(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		head        string
		value       string
		found, done bool
	}{
		{"GET / HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer abc\r\n\r\n", "Bearer abc", true, true},
		{"GET / HTTP/1.1\r\nauthorization:   Bearer abc  \r\n", "Bearer abc", true, true},
		{"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "", false, true},
		{"GET / HTTP/1.1\r\nHost: x\r\nAuthoriz", "", false, false},              // more to come
		{"GET / HTTP/1.1\r\nAuthorization: Bearer ab", "", false, false},         // the line is not whole yet
		{"GET / HTTP/1.1\r\n\r\nAuthorization: Bearer abc\r\n", "", false, true}, // in the body: not a header
		{"", "", false, false},
	} {
		v, found, done := authorizationLine([]byte(tc.head))
		if v != tc.value || found != tc.found || done != tc.done {
			t.Errorf("authorizationLine(%q) = %q, %v, %v; want %q, %v, %v", tc.head, v, found, done, tc.value, tc.found, tc.done)
		}
	}
}

// The share keeps its newest connections: past the cap the oldest silent
// one goes (never one younger than the grace), then the oldest.
func TestUnauthConnsEvictOldestSilent(t *testing.T) {
	t.Parallel()
	u := &unauthConns{max: 2, valid: func(h http.Header) bool { return h.Get("Authorization") == "Bearer ok" }}
	conn := func(age time.Duration, spoke bool) *limitedConn {
		a, b := net.Pipe()
		t.Cleanup(func() { a.Close(); b.Close() })
		c := &limitedConn{Conn: a, release: func() {}}
		u.add(c)
		u.mu.Lock()
		c.born = time.Now().Add(-age)
		u.mu.Unlock()
		c.spoke.Store(spoke)
		return c
	}
	speaking := conn(3*time.Second, true)
	silent := conn(2*time.Second, false)
	young := conn(0, false) // past the cap: the oldest silent one goes, not the older speaking one
	if silent.elem != nil || speaking.elem == nil || young.elem == nil {
		t.Fatalf("after a third: silent in the share %v, speaking %v, young %v; want only the silent one gone",
			silent.elem != nil, speaking.elem != nil, young.elem != nil)
	}
	young2 := conn(0, false) // no silent one past its grace: the oldest past it goes
	if speaking.elem != nil || young.elem == nil || young2.elem == nil {
		t.Fatal("after a fourth: want the speaking one gone, the young ones kept")
	}
	young3 := conn(0, false) // all young: the share overflows, no one goes
	if young.elem == nil || young2.elem == nil || young3.elem == nil || u.list.Len() != 3 {
		t.Fatal("a connection younger than the grace was taken")
	}
	// Every slot taken: evictOne takes the oldest silent one, whatever its age.
	if !u.evictOne() || young.elem != nil || young2.elem == nil {
		t.Error("evictOne did not take the oldest silent (young) connection")
	}
	speaking = young2
	// A connection that authenticates leaves the share.
	speaking.authenticated()
	if speaking.elem != nil || u.list.Len() != 1 {
		t.Errorf("after authenticating: %d in the share, want 1", u.list.Len())
	}
	// peek authenticates a connection from its first request's headers.
	c := conn(0, false)
	c.peek([]byte("GET /mcp HTTP/1.1\r\nAuthoriza"))
	if c.elem == nil {
		t.Fatal("authenticated before the header was whole")
	}
	c.peek([]byte("tion: Bearer ok\r\n\r\n"))
	if c.elem != nil {
		t.Error("a valid token in the first request's headers left the connection in the share")
	}
	bad := conn(0, false)
	bad.peek([]byte("GET /mcp HTTP/1.1\r\nAuthorization: Bearer nope\r\n\r\n"))
	if bad.elem == nil {
		t.Error("an invalid token took the connection out of the share")
	}
}
