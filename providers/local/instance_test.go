//go:build linux

package local

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/providers/internal/cgroups"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor/supervisortest"
)

// The supervisors' binary is the daemon: a hard link where one can be
// made, else a copy of the daemon as it was found (0755), in the state
// dir's bin/; where neither can be made, the daemon where it is, with one
// warning.
func TestSupervisorBinary(t *testing.T) {
	t.Parallel()
	daemon := supervisortest.Path(t)
	found, err := os.ReadFile(daemon)
	if err != nil {
		t.Fatal(err)
	}
	newInstance := func(path, bin string, log *slog.Logger) *instance {
		src, err := os.Open(daemon)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { src.Close() })
		return &instance{daemon: &supervisor.Binary{Path: path}, src: src, bin: bin, log: log}
	}
	sameFS := os.Link(daemon, filepath.Join(t.TempDir(), "probe")) == nil
	for _, c := range []struct {
		name, path string
		linked     bool
	}{
		{"linked", daemon, true},
		// Another file at the path: the daemon was replaced (an upgrade)
		// since the server started.
		{"replaced", "/bin/true", false},
	} {
		bin := filepath.Join(t.TempDir(), "sandbox-mcp-0123456789abcdef")
		in := newInstance(c.path, bin, nil)
		if got := in.supervisorBinary(); got != bin {
			t.Fatalf("%s: binary at %s, want %s", c.name, got, bin)
		}
		if again := in.supervisorBinary(); again != bin {
			t.Errorf("%s: a second call gives %s", c.name, again)
		}
		fi, err := os.Stat(bin)
		if err != nil {
			t.Fatal(err)
		}
		src, _ := os.Stat(daemon)
		if c.linked && sameFS && !os.SameFile(fi, src) {
			t.Errorf("%s: a copy where a link can be made", c.name)
		}
		if !c.linked {
			b, _ := os.ReadFile(bin)
			if !bytes.Equal(b, found) || fi.Mode().Perm() != 0o755 {
				t.Errorf("%s: not a 0755 copy of the daemon found (mode %v, %d bytes)", c.name, fi.Mode(), len(b))
			}
		}
		// Removed (by another server's start, or by hand): made again.
		os.Remove(bin)
		if got := in.supervisorBinary(); got != bin {
			t.Errorf("%s: after its removal, binary at %s", c.name, got)
		}
	}
	// No room (here: no directory) for a link or a copy: the daemon where
	// it is, said once.
	var logged bytes.Buffer
	in := newInstance("/bin/true", filepath.Join(t.TempDir(), "gone", "sandbox-mcp-0123456789abcdef"), slog.New(slog.NewTextHandler(&logged, nil)))
	for range 2 {
		if got := in.supervisorBinary(); got != "/bin/true" {
			t.Errorf("with no room, binary at %s, want /bin/true", got)
		}
	}
	if n := strings.Count(logged.String(), "cannot be linked or copied"); n != 1 {
		t.Errorf("%d warnings, want 1:\n%s", n, logged.String())
	}
}

// A start removes the binaries no live server on the state dir uses, and
// keeps those live ones use.
func TestStaleBinariesRemoved(t *testing.T) {
	t.Parallel()
	state := t.TempDir()
	live, err := newInstance(state, mustResolve(t, Limits{}), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer live.close()
	binDir := filepath.Join(state, "bin")
	liveBin := filepath.Base(live.bin)
	// A binary of the live server's version, one of a version nobody runs,
	// and a copy another server is making.
	for _, n := range []string{liveBin, "sandbox-mcp-00000000000000aa", liveBin + ".tmp-123", "notes.txt"} {
		os.WriteFile(filepath.Join(binDir, n), []byte("x"), 0o755)
	}
	next, err := newInstance(state, mustResolve(t, Limits{}), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer next.close()
	for n, want := range map[string]bool{liveBin: true, "sandbox-mcp-00000000000000aa": false, liveBin + ".tmp-123": true, "notes.txt": true} {
		if _, err := os.Stat(filepath.Join(binDir, n)); (err == nil) != want {
			t.Errorf("%s kept: %v, want %v", n, err == nil, want)
		}
	}
}

func mustResolve(t *testing.T, l Limits) cgroups.Limits {
	t.Helper()
	lim, err := l.resolve()
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

// BenchmarkSupervisorBinary is what bubblewrap's first sandbox of a
// daemon's version on a state dir pays to bind it from there: a link, or
// a copy.
func BenchmarkSupervisorBinary(b *testing.B) {
	daemon := supervisortest.Path(b)
	for _, c := range []struct{ name, path string }{{"link", daemon}, {"copy", "/bin/true"}} {
		b.Run(c.name, func(b *testing.B) {
			src, err := os.Open(daemon)
			if err != nil {
				b.Fatal(err)
			}
			defer src.Close()
			fi, _ := src.Stat()
			b.SetBytes(fi.Size())
			for b.Loop() {
				b.StopTimer()
				in := &instance{daemon: &supervisor.Binary{Path: c.path}, src: src, bin: filepath.Join(b.TempDir(), "sandbox-mcp-0123456789abcdef")}
				b.StartTimer()
				in.supervisorBinary()
			}
		})
	}
}
