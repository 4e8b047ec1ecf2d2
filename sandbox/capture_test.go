package sandbox_test

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

func TestCaptureKeepsHeadAndTail(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		writes     []string
		head, tail int
		wantHead   string
		wantTail   string
		wantTotal  int64
	}{
		{"short", []string{"abc"}, 4, 4, "abc", "", 3},
		{"exact", []string{"abcdefgh"}, 4, 4, "abcd", "efgh", 8},
		{"long one write", []string{"0123456789abcdef"}, 4, 4, "0123", "cdef", 16},
		{"many small", strings.Split("0123456789abcdef", ""), 4, 4, "0123", "cdef", 16},
		{"wraps", []string{"0123", "456", "789", "ab"}, 2, 5, "01", "789ab", 12},
		{"no tail", []string{"0123456789"}, 3, 0, "012", "", 10},
	}
	for _, tt := range tests {
		c := sandbox.NewCapture(tt.head, tt.tail)
		for _, w := range tt.writes {
			c.Write([]byte(w))
		}
		h, tl, total := c.Result()
		if string(h) != tt.wantHead || string(tl) != tt.wantTail || total != tt.wantTotal {
			t.Errorf("%s: got %q %q %d, want %q %q %d", tt.name, h, tl, total, tt.wantHead, tt.wantTail, tt.wantTotal)
		}
	}
}

func TestCaptureLast(t *testing.T) {
	c := sandbox.NewCapture(4, 4)
	if b, more := c.Last(3); len(b) != 0 || more {
		t.Fatalf("empty: %q %v", b, more)
	}
	c.Write([]byte("ab"))
	if b, more := c.Last(3); string(b) != "ab" || more {
		t.Fatalf("in head: %q %v", b, more)
	}
	if b, more := c.Last(1); string(b) != "b" || !more {
		t.Fatalf("end of head: %q %v", b, more)
	}
	c.Write([]byte("cdef")) // head abcd, tail ef
	if b, more := c.Last(5); string(b) != "bcdef" || !more {
		t.Fatalf("head and tail: %q %v", b, more)
	}
	if b, more := c.Last(9); string(b) != "abcdef" || more {
		t.Fatalf("all: %q %v", b, more)
	}
	c.Write([]byte("ghijk")) // dropped: efg; tail hijk
	if b, more := c.Last(9); string(b) != "hijk" || !more {
		t.Fatalf("after a drop: %q %v", b, more)
	}
}

// TestCaptureBoundedMemory writes 1 GiB through a capture: what it keeps
// stays at its bounds.
func TestCaptureBoundedMemory(t *testing.T) {
	t.Parallel()
	c := sandbox.NewCapture(1000, 1000)
	chunk := bytes.Repeat([]byte("x"), 1<<20)
	for range 1024 {
		c.Write(chunk)
	}
	c.Write([]byte("END"))
	h, tl, total := c.Result()
	if len(h) != 1000 || len(tl) != 1000 || total != 1<<30+3 || !bytes.HasSuffix(tl, []byte("END")) {
		t.Fatalf("head %d tail %d total %d", len(h), len(tl), total)
	}
}

func TestUnixMode(t *testing.T) {
	t.Parallel()
	for raw, want := range map[uint32]os.FileMode{
		0o100644: 0o644,
		0o040755: os.ModeDir | 0o755,
		0o120777: os.ModeSymlink | 0o777,
		0o104755: os.ModeSetuid | 0o755,
		0o041777: os.ModeDir | os.ModeSticky | 0o777,
		0o010600: os.ModeNamedPipe | 0o600,
		0o020666: os.ModeDevice | os.ModeCharDevice | 0o666,
	} {
		if got := sandbox.UnixMode(raw); got != want {
			t.Errorf("UnixMode(%o) = %v, want %v", raw, got, want)
		}
	}
}

// Skip is a gap in the middle: counted, never part of head or tail, and
// the head ends at it.
func TestCaptureSkip(t *testing.T) {
	t.Parallel()
	c := sandbox.NewCapture(4, 4)
	c.Write([]byte("ab"))
	c.Skip(100)
	c.Write([]byte("xyz"))
	h, tl, total := c.Result()
	if string(h) != "ab" || string(tl) != "xyz" || total != 105 {
		t.Fatalf("got %q %q %d", h, tl, total)
	}
	c = sandbox.NewCapture(4, 4)
	c.Write([]byte("0123456"))
	c.Skip(10)
	c.Write([]byte("9"))
	if h, tl, total := c.Result(); string(h) != "0123" || string(tl) != "9" || total != 18 {
		t.Fatalf("a tail before the gap: got %q %q %d", h, tl, total)
	}
}
