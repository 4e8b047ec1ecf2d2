//go:build linux

package supervisor

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/supervisor/supervisortest"
)

// The docker provider's shape: a supervisor listening on a socket in a
// directory the sandbox can write, many channels to it, and a server that
// follows nothing planted there.
func TestListenAndDialSocket(t *testing.T) {
	exe := supervisortest.Path(t)
	// A long directory: past a unix socket path's 108 bytes.
	dir := filepath.Join(t.TempDir(), strings.Repeat("d", 60), strings.Repeat("e", 60))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "supervise", "--listen", "sock")
	cmd.Dir = dir
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	var conn net.Conn
	var err error
	for range 200 {
		if conn, err = DialSocket(dir, "sock"); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewConn(context.Background(), conn, conn, conn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c2conn, err := DialSocket(dir, "sock")
	if err != nil {
		t.Fatal(err)
	}
	c2, err := NewConn(context.Background(), c2conn, c2conn, c2conn)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	for _, cc := range []*Conn{c, c2} {
		out, res, err := sh(cc, context.Background(), "echo hi", 0)
		if err != nil || out != "hi\n" || res.ExitCode != 0 {
			t.Fatalf("out %q res %+v err %v", out, res, err)
		}
	}
	// A symlink or a plain file planted under the socket's name is refused.
	os.Symlink(filepath.Join(dir, "sock"), filepath.Join(dir, "link"))
	if _, err := DialSocket(dir, "link"); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("symlink: err %v", err)
	}
	os.WriteFile(filepath.Join(dir, "file"), nil, 0o600)
	if _, err := DialSocket(dir, "file"); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("file: err %v", err)
	}
}

// A binary as a container gets it: this test binary (a cgo build where a C
// compiler is: its loader runs it, with libc bound beside it), and the
// daemon (a static build, unless -race).
func TestInspectBinary(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, exe := range []string{self, supervisortest.Path(t)} {
		b, err := InspectBinary(exe)
		if err != nil {
			t.Fatal(err)
		}
		if b.Arch == "" || len(b.Sums) != 64 {
			t.Fatalf("%+v", b)
		}
		argv := b.Argv("supervise")
		if b.Loader != "" {
			found := false
			for _, m := range b.Mounts() {
				found = found || strings.HasPrefix(filepath.Base(m.Target), "libc.so")
			}
			if !found || !strings.HasPrefix(argv[0], BinaryDir+"/lib/") {
				t.Fatalf("%s: mounts %+v argv %v", exe, b.Mounts(), argv)
			}
		} else if argv[0] != BinaryDir+"/sandbox-mcp" || len(b.Mounts()) != 1 {
			t.Fatalf("%s: argv %v mounts %+v", exe, argv, b.Mounts())
		}
		if err := b.CheckArch("s390x-nope"); err == nil {
			t.Fatal("an image of another architecture passed")
		}
	}
}
