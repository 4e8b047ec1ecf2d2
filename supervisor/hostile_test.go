package supervisor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/supervisor/wire"
)

// fake is a supervisor played by the test: it writes what it likes.
type fake struct {
	toClient   *io.PipeWriter
	fromClient *io.PipeReader
	fw         wire.Writer
}

func newFake(t *testing.T) (*fake, *Conn) {
	t.Helper()
	cr, sw := io.Pipe() // supervisor -> client
	sr, cw := io.Pipe() // client -> supervisor
	f := &fake{toClient: sw, fromClient: sr, fw: wire.Writer{W: sw}}
	go io.Copy(io.Discard, sr)
	hello, _ := json.Marshal(wire.Hello{Protocol: wire.Protocol, Shell: "/bin/sh"})
	go f.fw.Write(wire.KindHello, 0, hello)
	c, err := NewConn(context.Background(), cr, cw, closerFunc(func() error { sw.Close(); sr.Close(); return nil }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return f, c
}

type closerFunc func() error

func (f closerFunc) Close() error { return f() }

// execAsync starts a call on stream 1 (the first) and returns its result.
func execAsync(c *Conn) chan error {
	done := make(chan error, 1)
	go func() {
		_, err := c.Exec(context.Background(), ExecRequest{Argv: []string{"x"}, Output: io.Discard})
		done <- err
	}()
	return done
}

func wantChannelError(t *testing.T, done chan error, contains string) {
	t.Helper()
	select {
	case err := <-done:
		var ce *ChannelError
		if !errors.As(err, &ce) || !strings.Contains(err.Error(), contains) {
			t.Fatalf("err %v, want a channel error saying %q", err, contains)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the call hangs")
	}
}

func TestHostileGarbage(t *testing.T) {
	f, c := newFake(t)
	done := execAsync(c)
	time.Sleep(20 * time.Millisecond)
	f.toClient.Write(bytes.Repeat([]byte("garbage!"), 100))
	wantChannelError(t, done, "bad frame header")
}

func TestHostileOversizedFrame(t *testing.T) {
	f, c := newFake(t)
	done := execAsync(c)
	time.Sleep(20 * time.Millisecond)
	h := []byte{'S', 'M', byte(wire.KindOutput), 0, 0, 0, 0, 1, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff}
	f.toClient.Write(h)
	wantChannelError(t, done, "over the")
}

// Output beyond the credit the server gave is a violation, not memory.
func TestHostileIgnoresCredit(t *testing.T) {
	f, c := newFake(t)
	block := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := c.Exec(context.Background(), ExecRequest{Argv: []string{"x"}, Output: writerFunc(func(p []byte) (int, error) { <-block; return len(p), nil })})
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	chunk := make([]byte, wire.MaxPayload)
	for range wire.Window/wire.MaxPayload + 2 {
		if f.fw.Write(wire.KindOutput, 1, chunk) != nil {
			break
		}
	}
	close(block)
	wantChannelError(t, done, "more output than its credit")
}

type writerFunc func([]byte) (int, error)

func (w writerFunc) Write(p []byte) (int, error) { return w(p) }

func TestHostileEndsMidCall(t *testing.T) {
	f, c := newFake(t)
	done := execAsync(c)
	time.Sleep(20 * time.Millisecond)
	f.toClient.Close()
	wantChannelError(t, done, "supervisor ended")
	// Later calls fail at once, with the same clear error.
	if _, err := c.Exec(context.Background(), ExecRequest{Argv: []string{"x"}}); err == nil {
		t.Fatal("a call on a failed channel succeeded")
	}
}

func TestHostileExitTwiceAndBadJSON(t *testing.T) {
	f, c := newFake(t)
	done := execAsync(c)
	time.Sleep(20 * time.Millisecond)
	f.fw.Write(wire.KindExit, 1, []byte("{not json"))
	wantChannelError(t, done, "exit:")
}

// A supervisor that never says hello, or speaks another protocol, is refused.
func TestHelloChecked(t *testing.T) {
	cr, sw := io.Pipe()
	_, cw := io.Pipe()
	go func() {
		fw := wire.Writer{W: sw}
		b, _ := json.Marshal(wire.Hello{Protocol: wire.Protocol + 1})
		fw.Write(wire.KindHello, 0, b)
	}()
	_, err := NewConn(context.Background(), cr, cw, nil)
	if err == nil || !strings.Contains(err.Error(), "another version") {
		t.Fatalf("err %v", err)
	}
}

// A hello's boot is 128 bits in hex, or nothing.
func TestHelloBootChecked(t *testing.T) {
	for boot, ok := range map[string]bool{"": true, strings.Repeat("0a", 16): true, strings.Repeat("0A", 16): false, "zz": false, strings.Repeat("a", 33): false} {
		cr, sw := io.Pipe()
		_, cw := io.Pipe()
		go func() {
			fw := wire.Writer{W: sw}
			b, _ := json.Marshal(wire.Hello{Protocol: wire.Protocol, Boot: boot})
			fw.Write(wire.KindHello, 0, b)
		}()
		c, err := NewConn(context.Background(), cr, cw, closerFunc(func() error { sw.Close(); cr.Close(); return nil }))
		if (err == nil) != ok {
			t.Errorf("boot %q: err %v", boot, err)
		}
		if c != nil {
			c.Close()
		}
	}
}
