//go:build linux

package supervisor

import (
	"context"
	"strings"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/search"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor/wire"
)

// A lying supervisor's search results: junk, a result that never ends,
// a count for a grep. None hangs the call or crashes the server; the
// caller (tools' checkedSearcher) checks the rest.
func TestFSHostileSearch(t *testing.T) {
	grep := func(fsys *FS) func() error {
		return func() error {
			return fsys.Grep(context.Background(), search.GrepRequest{Root: "/r", Pattern: "x", Mode: search.ModeFiles}, func(search.FileMatch) error { return nil })
		}
	}
	f, fsys, _ := newFSFake(t)
	wait := async(grep(fsys))
	id := f.request(t)
	f.fw.Write(wire.KindFSData, id, []byte("{not json\n"))
	if err := wait(t); err == nil || !strings.Contains(err.Error(), "unreadable grep result") {
		t.Fatalf("junk: %v", err)
	}

	f, fsys, _ = newFSFake(t)
	wait = async(grep(fsys))
	id = f.request(t)
	f.fw.Write(wire.KindFSData, id, []byte(`{"path":"/r/a","matches":[1]}`))
	f.end(id, wire.FSEnd{})
	if err := wait(t); err == nil || !strings.Contains(err.Error(), "cut short") {
		t.Fatalf("a result without its end: %v", err)
	}

	f, fsys, c := newFSFake(t)
	wait = async(grep(fsys))
	id = f.request(t)
	f.end(id, wire.FSEnd{Total: 5})
	wantFailed(t, wait(t), c, "unexpected count")

	// A result that does not end within maxResultBytes: the call fails.
	defer func(n int) { maxResultBytes = n }(maxResultBytes)
	maxResultBytes = 3 * wire.MaxPayload
	f, fsys, _ = newFSFake(t)
	wait = async(grep(fsys))
	id = f.request(t)
	chunk := make([]byte, wire.MaxPayload)
	for range 4 {
		f.fw.Write(wire.KindFSData, id, chunk)
	}
	if err := wait(t); err == nil || !strings.Contains(err.Error(), "a search result of over") {
		t.Fatalf("an endless result: %v", err)
	}
}
