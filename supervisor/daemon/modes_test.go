//go:build linux

package daemon

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	client "github.com/sandbox-mcp/sandbox-mcp/supervisor"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor/supervisortest"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor/wire"
)

// The kubernetes provider's shape: an init container installs the binary
// (--install), the supervisor listens with a scrubbed environment and the
// thread's directories made (--listen --mkdir --keep-env), and the server
// reaches it through a relay on an exec's stdin and stdout (--connect).
func TestInstallListenConnect(t *testing.T) {
	exe := supervisortest.Path(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin", "sandbox-mcp")
	os.Mkdir(filepath.Dir(bin), 0o755)
	if out, err := exec.Command(exe, "supervise", "--install", bin).CombinedOutput(); err != nil {
		t.Fatalf("install: %v %s", err, out)
	}
	fi, err := os.Stat(bin)
	if err != nil || fi.Mode().Perm() != 0o555 {
		t.Fatalf("installed: %v %v", fi, err)
	}
	want, _ := os.ReadFile(exe)
	if got, _ := os.ReadFile(bin); !bytes.Equal(got, want) {
		t.Fatal("the installed binary differs")
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "bin", ".install-*")); len(left) > 0 {
		t.Fatalf("temporary files left: %v", left)
	}

	sock := filepath.Join(dir, "sock")
	mk := filepath.Join(dir, "made", "workspace")
	cmd := exec.Command(bin, "supervise", "--listen", sock, "--mkdir", mk, "--keep-env", "PATH KEEP_ME")
	cmd.Env = append(os.Environ(), "KEEP_ME=yes", "KUBERNETES_SERVICE_HOST=10.0.0.1")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })

	// The relay starts before the socket exists: it waits for it.
	relay := exec.Command(bin, "supervise", "--connect", sock)
	stdin, _ := relay.StdinPipe()
	stdout, _ := relay.StdoutPipe()
	if err := relay.Start(); err != nil {
		t.Fatal(err)
	}
	c, err := client.NewConn(context.Background(), stdout, stdin, stdin)
	if err != nil {
		t.Fatal(err)
	}
	out, res, err := sh(c, context.Background(), `echo "$KEEP_ME ${KUBERNETES_SERVICE_HOST:-unset}"; test -d `+mk+` && echo made`, 0)
	if err != nil || res.ExitCode != 0 || out != "yes unset\nmade\n" {
		t.Fatalf("out %q res %+v err %v", out, res, err)
	}
	// The server's end closes: the relay ends, and so do the commands of
	// that channel.
	c.Close()
	done := make(chan error, 1)
	go func() { done <- relay.Wait() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		relay.Process.Kill()
		t.Fatal("the relay outlived its stdin")
	}
	// SIGTERM ends the supervisor at once (a Pod's deletion).
	cmd.Process.Signal(syscall.SIGTERM)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("supervisor: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the supervisor did not end on SIGTERM")
	}
	// No supervisor: the relay says so and fails.
	relay = exec.Command(bin, "supervise", "--connect", filepath.Join(dir, "none"))
	relay.Stdin = strings.NewReader("")
	if out, err := relay.CombinedOutput(); err == nil || !strings.Contains(string(out), "connect to the supervisor") {
		t.Fatalf("no supervisor: %v %s", err, out)
	}
}

// The kubernetes provider's installer: --install DEST --hold copies, then
// runs until terminated (exit 0); --await DEST returns once DEST is there.
func TestInstallHoldAwait(t *testing.T) {
	exe := supervisortest.Path(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin", "sandbox-mcp")
	await := exec.Command(exe, "supervise", "--await", bin)
	if err := await.Start(); err != nil {
		t.Fatal(err)
	}
	awaited := make(chan error, 1)
	go func() { awaited <- await.Wait() }()
	time.Sleep(100 * time.Millisecond)
	select {
	case err := <-awaited:
		t.Fatalf("--await returned before the binary was there: %v", err)
	default:
	}
	os.Mkdir(filepath.Dir(bin), 0o755)
	installer := exec.Command(exe, "supervise", "--install", bin, "--hold")
	if err := installer.Start(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-awaited:
		if err != nil {
			t.Fatalf("--await: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("--await still waits")
	}
	if got, _ := os.ReadFile(bin); len(got) == 0 {
		t.Fatal("not installed")
	}
	held := make(chan error, 1)
	go func() { held <- installer.Wait() }()
	select {
	case err := <-held:
		t.Fatalf("--hold ended by itself: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	installer.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-held:
		if err != nil {
			t.Fatalf("--hold on SIGTERM: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("--hold ignores SIGTERM")
	}
}

func TestSuperviseUsage(t *testing.T) {
	for _, args := range [][]string{
		{"--mkdir", "/x"},
		{"--listen", "s", "--install", "d"},
		{"--hold"},
		{"--connect", "s", "--hold"},
		{"--await", "d", "--install", "d"},
		{"--connect"},
		{"--bogus", "x"},
	} {
		if code := Run(args, nil, nil); code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
	}
}

// --version says the version and the protocol, with the word supervise
// first or not (the server asks a daemon it found before it runs it).
func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"supervise", "--version"}} {
		out, err := supervisortest.Command(t, args...).Output()
		want := fmt.Sprintf("%s dev protocol %d\n", Name, wire.Protocol)
		if err != nil || string(out) != want {
			t.Errorf("%q: %q %v, want %q", args, out, err, want)
		}
	}
}
