//go:build linux

package local

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// The supervisor's binary is this one: a hard link where one can be made,
// else a copy of the running binary (0755), in the instance's directory.
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
	for _, c := range []struct {
		name, exe string
		linked    bool
	}{
		{"linked", exe, true},
		// Another file at the path: the binary was replaced (an upgrade)
		// since the server started.
		{"replaced", "/bin/true", false},
	} {
		dir := t.TempDir()
		in := &instance{dir: dir}
		got, err := in.supervisorBinary(c.exe)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got != filepath.Join(dir, "sandbox-mcp") {
			t.Errorf("%s: binary at %s", c.name, got)
		}
		if again, _ := in.supervisorBinary(c.exe); again != got {
			t.Errorf("%s: a second call gives %s, not %s", c.name, again, got)
		}
		fi, err := os.Stat(got)
		if err != nil {
			t.Fatal(err)
		}
		src, _ := os.Stat(exe)
		sameFS := func() bool { // a link is made where exe and dir share a file system
			return os.Link(exe, filepath.Join(t.TempDir(), "probe")) == nil
		}()
		if c.linked && sameFS && !os.SameFile(fi, src) {
			t.Errorf("%s: a copy where a link can be made", c.name)
		}
		if !c.linked {
			b, _ := os.ReadFile(got)
			if !bytes.Equal(b, running) || fi.Mode().Perm() != 0o755 {
				t.Errorf("%s: not a 0755 copy of the running binary (mode %v, %d bytes)", c.name, fi.Mode(), len(b))
			}
		}
	}
}

// BenchmarkSupervisorBinary is what bubblewrap's first sandbox of a
// server pays to bind the binary from the state dir: a link, or a copy.
func BenchmarkSupervisorBinary(b *testing.B) {
	exe, _ := os.Executable()
	for _, c := range []struct{ name, exe string }{{"link", exe}, {"copy", "/bin/true"}} {
		b.Run(c.name, func(b *testing.B) {
			fi, _ := os.Stat("/proc/self/exe")
			b.SetBytes(fi.Size())
			for b.Loop() {
				b.StopTimer()
				in := &instance{dir: b.TempDir()}
				b.StartTimer()
				if _, err := in.supervisorBinary(c.exe); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
