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
)

// The supervisor's binary is this one: a hard link where one can be made,
// else a copy of the running binary (0755), in the state dir's bin/; where
// neither can be made, the binary where it is, with one warning.
func TestSupervisorBinary(t *testing.T) {
	t.Parallel()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	running, err := os.ReadFile("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	sameFS := os.Link(exe, filepath.Join(t.TempDir(), "probe")) == nil
	for _, c := range []struct {
		name, exe string
		linked    bool
	}{
		{"linked", exe, true},
		// Another file at the path: the binary was replaced (an upgrade)
		// since the server started.
		{"replaced", "/bin/true", false},
	} {
		bin := filepath.Join(t.TempDir(), "sandbox-mcp-0123456789abcdef")
		in := &instance{bin: bin}
		if got := in.supervisorBinary(c.exe); got != bin {
			t.Fatalf("%s: binary at %s, want %s", c.name, got, bin)
		}
		if again := in.supervisorBinary(c.exe); again != bin {
			t.Errorf("%s: a second call gives %s", c.name, again)
		}
		fi, err := os.Stat(bin)
		if err != nil {
			t.Fatal(err)
		}
		src, _ := os.Stat(exe)
		if c.linked && sameFS && !os.SameFile(fi, src) {
			t.Errorf("%s: a copy where a link can be made", c.name)
		}
		if !c.linked {
			b, _ := os.ReadFile(bin)
			if !bytes.Equal(b, running) || fi.Mode().Perm() != 0o755 {
				t.Errorf("%s: not a 0755 copy of the running binary (mode %v, %d bytes)", c.name, fi.Mode(), len(b))
			}
		}
		// Removed (by another server's start, or by hand): made again.
		os.Remove(bin)
		if got := in.supervisorBinary(c.exe); got != bin {
			t.Errorf("%s: after its removal, binary at %s", c.name, got)
		}
	}
	// No room (here: no directory) for a link or a copy: the binary where
	// it is, said once.
	var logged bytes.Buffer
	in := &instance{bin: filepath.Join(t.TempDir(), "gone", "sandbox-mcp-0123456789abcdef"), log: slog.New(slog.NewTextHandler(&logged, nil))}
	for range 2 {
		if got := in.supervisorBinary("/bin/true"); got != "/bin/true" {
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
// binary's version on a state dir pays to bind it from there: a link, or
// a copy.
func BenchmarkSupervisorBinary(b *testing.B) {
	exe, _ := os.Executable()
	for _, c := range []struct{ name, exe string }{{"link", exe}, {"copy", "/bin/true"}} {
		b.Run(c.name, func(b *testing.B) {
			fi, _ := os.Stat("/proc/self/exe")
			b.SetBytes(fi.Size())
			for b.Loop() {
				b.StopTimer()
				in := &instance{bin: filepath.Join(b.TempDir(), "sandbox-mcp-0123456789abcdef")}
				b.StartTimer()
				in.supervisorBinary(c.exe)
			}
		})
	}
}
