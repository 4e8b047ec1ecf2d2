package daemon

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sandbox-mcp/sandbox-mcp/supervisor/wire"
)

func TestRingCharacters(t *testing.T) {
	var r ring
	r.append([]byte("a\xe2\x82")) // "a€", the euro sign cut short
	if b, start, next, _ := r.read(0, wire.MaxJobRead, false); string(b) != "a" || start != 0 || next != 1 {
		t.Fatalf("cut: %q %d %d", b, start, next)
	}
	if r.ready(1) {
		t.Fatal("a character cut short counts as output")
	}
	r.append([]byte("\xacé\n"))
	if !r.ready(1) {
		t.Fatal("not ready")
	}
	if b, start, next, _ := r.read(1, wire.MaxJobRead, false); string(b) != "€é\n" || start != 1 || next != 4 {
		t.Fatalf("rest: %q %d %d", b, start, next)
	}
	// Past the end: nothing, at the end.
	if b, start, next, _ := r.read(99, wire.MaxJobRead, false); len(b) != 0 || start != 4 || next != 4 {
		t.Fatalf("past the end: %q %d %d", b, start, next)
	}
	// A bound cuts at a character's start.
	if b, _, next, _ := r.read(0, 2, false); string(b) != "a" || next != 1 {
		t.Fatalf("bounded: %q %d", b, next)
	}
	// An invalid byte is one character.
	var r2 ring
	r2.append([]byte("\xff\xfex"))
	if b, _, next, _ := r2.read(1, wire.MaxJobRead, false); string(b) != "\xfex" || next != 3 {
		t.Fatalf("invalid: %q %d", b, next)
	}
}

func TestRingDrops(t *testing.T) {
	var r ring
	chunk := []byte(strings.Repeat("€", 1000)) // 3000 bytes, 1000 characters
	total := int64(0)
	for range 1000 {
		r.append(chunk)
		total += 1000
	}
	kept := r.kept()
	if len(kept) > wire.JobRing || len(kept) < wire.JobRing-3 || !utf8.Valid(kept) {
		t.Fatalf("kept %d bytes, valid %v", len(kept), utf8.Valid(kept))
	}
	b, start, next, dropped := r.read(0, wire.MaxJobRead, true)
	if next != total || dropped != start || start != total-int64(utf8.RuneCount(kept)) || !bytes.Equal(b, kept) {
		t.Fatalf("start %d next %d dropped %d of %d", start, next, dropped, total)
	}
}
