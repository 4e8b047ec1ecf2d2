// Package supervisortest gives tests the real supervisor daemon: built
// once per test process from ./cmd/sandbox-mcp-supervisor (Go's build
// cache makes that quick), static as releases build it, with -race when
// the tests run with it. It imports nothing of the supervisor, so that the
// supervisor's own tests use it too.
package supervisortest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"sync"
	"testing"
)

// pkg is the daemon's main package.
const pkg = "github.com/sandbox-mcp/sandbox-mcp/cmd/sandbox-mcp-supervisor"

// name is its file's name (supervisor.DaemonName).
const name = "sandbox-mcp-supervisor"

var built struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// Run is a TestMain's body: it builds the daemon, hands its path to use
// (supervisor.SetFallback: what the providers under test run), runs the
// tests, removes the build and returns the exit code.
func Run(m *testing.M, use func(path string)) int {
	p, err := daemon()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if use != nil {
		use(p)
	}
	if built.dir != "" {
		defer os.RemoveAll(built.dir)
	}
	return m.Run()
}

// Path is the daemon built for this test process.
func Path(tb testing.TB) string {
	tb.Helper()
	p, err := daemon()
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// Env names a daemon already built, which a test process started by a
// test (another user's, with no go command) takes instead of building one.
const Env = "SANDBOX_MCP_TEST_SUPERVISOR"

func daemon() (string, error) {
	built.once.Do(func() {
		if p := os.Getenv(Env); p != "" {
			built.path = p
			return
		}
		built.dir, built.err = os.MkdirTemp("", "sandbox-mcp-supervisor-")
		if built.err != nil {
			return
		}
		built.path = filepath.Join(built.dir, name)
		env := []string{"CGO_ENABLED=0"}
		var flags []string
		if RaceEnabled() {
			env, flags = []string{"CGO_ENABLED=1"}, []string{"-race"}
		}
		built.err = build(built.path, env, flags)
	})
	return built.path, built.err
}

// Build builds the daemon into a new directory of tb with more
// environment (KEY=VALUE) and go build flags: for a test that needs
// another build than Path's (a cgo one, one of another version).
func Build(tb testing.TB, env []string, flags ...string) string {
	tb.Helper()
	p := filepath.Join(tb.TempDir(), name)
	if err := build(p, env, flags); err != nil {
		tb.Fatal(err)
	}
	return p
}

func build(out string, env, flags []string) error {
	args := append(append([]string{"build", "-o", out}, flags...), pkg)
	cmd := exec.Command("go", args...)
	cmd.Env = append(os.Environ(), env...)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build the supervisor daemon: go %v: %v\n%s", args, err, b)
	}
	return nil
}

// RaceEnabled reports whether this test binary was built with -race (what
// it builds is then built with -race too).
func RaceEnabled() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" && s.Value == "true" {
			return true
		}
	}
	return false
}

// Command is the daemon run with args.
func Command(tb testing.TB, args ...string) *exec.Cmd {
	tb.Helper()
	return exec.Command(Path(tb), args...)
}

// Socket is the name of Listen's socket in its directory.
const Socket = "sock"

// Listen starts the daemon serving Socket in a new directory, as a docker
// container's or a Pod's does, and returns the directory once it accepts
// connections; the daemon is killed when tb ends.
func Listen(tb testing.TB) string {
	tb.Helper()
	return ListenArgs(tb)
}

// dialUnix connects to the socket p, whatever the length of its path: a
// unix socket's path is at most 108 bytes, a path through /proc/self/fd
// to its open directory is short.
func dialUnix(p string) (net.Conn, error) {
	if len(p) < 100 {
		return net.Dial("unix", p)
	}
	d, err := os.Open(filepath.Dir(p))
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return net.Dial("unix", fmt.Sprintf("/proc/self/fd/%d/%s", d.Fd(), filepath.Base(p)))
}
