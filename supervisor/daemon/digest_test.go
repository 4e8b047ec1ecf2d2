//go:build linux

package daemon

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	client "github.com/sandbox-mcp/sandbox-mcp/supervisor"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor/wire"
)

// A digest counts lines as read_file does (a last line without a newline
// counts, CRLF is one line), tells UTF-8 over the whole file (a character
// cut between two chunks is not an error; a bad byte far from the start
// is), and follows symlinks as a read does.
func TestDigest(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fsys := client.NewFS(client.NewLink(listen(t)), nil)
	chunkEdge := strings.Repeat("a", wire.ChunkSize-1) + "€\n" // € is cut by the first chunk's end
	lateBad := strings.Repeat("line\n", 100_000) + "\xff\n"
	tests := []struct {
		name    string
		content string
		lines   int
		utf8    bool
	}{
		{"empty", "", 0, true},
		{"one newline", "\n", 1, true},
		{"no trailing newline", "a\nb", 2, true},
		{"trailing newline", "a\nb\n", 2, true},
		{"crlf", "a\r\nb\r\n", 2, true},
		{"lone cr", "a\rb", 1, true},
		{"character across chunks", chunkEdge, 1, true},
		{"invalid utf-8 late", lateBad, 100_001, false},
		{"cut character at the end", "ab\xe2\x82", 1, false},
		{"nul", "a\x00b\n", 1, true},
	}
	for i, tc := range tests {
		p := filepath.Join(dir, "f"+string(rune('a'+i)))
		if err := os.WriteFile(p, []byte(tc.content), 0o644); err != nil {
			t.Fatal(err)
		}
		d, err := fsys.Digest(t.Context(), p, sandbox.EditMaxBytes)
		sum := sha256.Sum256([]byte(tc.content))
		want := sandbox.Digest{Size: int64(len(tc.content)), Computed: true, SHA256: hex.EncodeToString(sum[:]), Lines: tc.lines, UTF8: tc.utf8}
		if err != nil || d != want {
			t.Errorf("%s: %+v, %v; want %+v", tc.name, d, err, want)
		}
	}

	// A symlink is followed, wherever it points (the box is the
	// confinement), as a read follows it.
	target := filepath.Join(t.TempDir(), "target")
	os.WriteFile(target, []byte("x\ny\n"), 0o644)
	link := filepath.Join(dir, "link")
	os.Symlink(target, link)
	if d, err := fsys.Digest(t.Context(), link, 100); err != nil || d.Lines != 2 || d.Size != 4 || !d.Computed {
		t.Errorf("symlink: %+v, %v", d, err)
	}
	os.Symlink(filepath.Join(dir, "nowhere"), filepath.Join(dir, "dangling"))
	fifo := filepath.Join(dir, "fifo")
	syscall.Mkfifo(fifo, 0o644)
	for _, tc := range []struct {
		path string
		want error
	}{
		{dir, sandbox.ErrIsDir},
		{filepath.Join(dir, "dangling"), sandbox.ErrNotFound},
		{filepath.Join(dir, "missing"), sandbox.ErrNotFound},
		{fifo, sandbox.ErrNotRegular},
		{"relative", sandbox.ErrOutsideRoot},
	} {
		_, err := fsys.Digest(t.Context(), tc.path, 100)
		var pe *sandbox.PathError
		if !errors.Is(err, tc.want) || !errors.As(err, &pe) || pe.Path != tc.path {
			t.Errorf("%s: %v, want %v naming the path", tc.path, err, tc.want)
		}
	}
}

// Over the bound, a digest reports the size only; the daemon's own bound
// holds whatever the request asks.
func TestDigestBound(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fsys := client.NewFS(client.NewLink(listen(t)), nil)
	p := filepath.Join(dir, "f")
	os.WriteFile(p, []byte("0123456789\n"), 0o644)
	if d, err := fsys.Digest(t.Context(), p, 10); err != nil || d != (sandbox.Digest{Size: 11}) {
		t.Errorf("11 bytes, bound 10: %+v, %v", d, err)
	}
	if d, err := fsys.Digest(t.Context(), p, 11); err != nil || !d.Computed {
		t.Errorf("11 bytes, bound 11: %+v, %v", d, err)
	}
	big := filepath.Join(dir, "big") // sparse: nothing on disk
	os.WriteFile(big, nil, 0o644)
	if err := os.Truncate(big, wire.MaxDigestBytes+1); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	end := digest(&fsStream{}, wire.FSRequest{Op: wire.OpDigest, Path: big, Max: 1 << 40})
	if end.Digest == nil || end.Digest.SHA256 != "" || end.Digest.Size != wire.MaxDigestBytes+1 {
		t.Errorf("over MaxDigestBytes with a larger Max: %+v", end)
	}
	if time.Since(start) > time.Second {
		t.Errorf("a file over the bound was read (%v)", time.Since(start))
	}
}

// A digest killed midway stops reading; a caller whose context ends
// does not wait for it.
func TestDigestStops(t *testing.T) {
	t.Parallel()
	big := filepath.Join(t.TempDir(), "big")
	os.WriteFile(big, nil, 0o644)
	if err := os.Truncate(big, wire.MaxDigestBytes); err != nil { // 64 MiB to hash, sparse
		t.Fatal(err)
	}
	st := &fsStream{}
	st.cond = sync.NewCond(&st.mu)
	time.AfterFunc(2*time.Millisecond, st.stop)
	if end := digest(st, wire.FSRequest{Op: wire.OpDigest, Path: big}); end.Err != wire.CodeCancelled {
		t.Errorf("a killed digest: %+v", end)
	}

	fsys := client.NewFS(client.NewLink(listen(t)), nil)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Millisecond)
	defer cancel()
	if _, err := fsys.Digest(ctx, big, wire.MaxDigestBytes); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("cancelled: %v", err)
	}
}
