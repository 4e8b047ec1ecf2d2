package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/supervisor/wire"
)

// DaemonName is the supervisor daemon's file name (cmd/sandbox-mcp-supervisor):
// beside the server, in the release's archives and images.
const DaemonName = "sandbox-mcp-supervisor"

// Locate says where FindBinary looks for the daemon.
type Locate struct {
	// GOOS is the sandboxes' system: runtime.GOOS for a supervisor on
	// this host (the local provider), "linux" for a container's.
	GOOS string
	// Configured is a path the operator set, Setting its name
	// (docker.supervisor_binary); "": none.
	Configured, Setting string
	// Log takes the fallback's warning; nil: none.
	Log *slog.Logger
}

var fallback struct {
	sync.Mutex
	path   string
	warned bool
}

// SetFallback names the binary that sandboxes run as their supervisor
// where none is configured and no daemon is beside this executable: the
// server's main names itself (it serves `sandbox-mcp supervise` as the
// daemon does, so that a server built alone still works), a test process
// the daemon it built (supervisortest).
func SetFallback(path string) {
	fallback.Lock()
	defer fallback.Unlock()
	fallback.path = path
}

// FindBinary finds the supervisor daemon that sandboxes run: l.Configured
// when set; else DaemonName beside this executable (symlinks resolved) —
// for sandboxes of another system than this host's (docker on macOS or
// Windows), the Linux build in linux/ or linux-ARCH/ beside it, where the
// release's archives and extension put it; else the fallback
// (SetFallback), with one warning when that is the whole server. A daemon
// that runs on this host says its version first: one of another release
// is refused, in a message naming where it was found. Its binary is not
// inspected: Inspect does that for a container's.
func FindBinary(l Locate) (*Binary, error) {
	exe, err := os.Executable()
	if err == nil {
		exe, err = filepath.EvalSymlinks(exe)
	}
	if err != nil {
		return nil, fmt.Errorf("find this binary, beside which the supervisor daemon is: %w", err)
	}
	return find(l, host{runtime.GOOS, runtime.GOARCH, exe, wire.Version()})
}

// host is what FindBinary asks of the server it runs in.
type host struct {
	goos, goarch string
	exe          string // the server's executable, symlinks resolved
	version      string // its version (wire.Version)
}

func find(l Locate, h host) (*Binary, error) {
	b, err := locate(l, h)
	if err != nil {
		return nil, err
	}
	if l.GOOS == h.goos && !b.server {
		if err := checkRelease(b, h.version); err != nil {
			return nil, err
		}
	}
	return b, nil
}

func locate(l Locate, h host) (*Binary, error) {
	if l.Configured != "" {
		if _, err := os.Stat(l.Configured); err != nil {
			return nil, err
		}
		return &Binary{Path: l.Configured, Where: l.Setting}, nil
	}
	dir := filepath.Dir(h.exe)
	var looked []string
	for _, sub := range besideDirs(l.GOOS, h) {
		p := filepath.Join(dir, sub, DaemonName)
		looked = append(looked, p)
		fi, err := os.Stat(p)
		if err != nil || fi.IsDir() {
			continue
		}
		if fi.Mode()&0o111 == 0 {
			// An unpacker that dropped the mode (an extension's zip).
			if err := os.Chmod(p, fi.Mode()|0o755); err != nil {
				return nil, fmt.Errorf("the supervisor daemon %s is not executable: %w", p, err)
			}
		}
		where := "the " + DaemonName + " beside the server"
		if sub != "" {
			where = "the " + DaemonName + " in " + sub + "/ beside the server"
		}
		return &Binary{Path: p, Where: where}, nil
	}
	fallback.Lock()
	defer fallback.Unlock()
	if fallback.path == "" || l.GOOS != h.goos {
		return nil, fmt.Errorf("no supervisor daemon for the sandboxes (%s): none at %s; put the release's %s for %s there (its archives have it; `go install github.com/sandbox-mcp/sandbox-mcp/cmd/...@VERSION` installs it beside the server)",
			l.GOOS, strings.Join(looked, " or "), DaemonName, l.GOOS)
	}
	if !sameFile(fallback.path, h.exe) {
		return &Binary{Path: fallback.path, Where: "the fallback daemon"}, nil
	}
	if !fallback.warned && l.Log != nil {
		fallback.warned = true
		l.Log.Warn("no "+DaemonName+" beside the server: every sandbox runs the whole server as its supervisor (`sandbox-mcp supervise`, more memory in each); put the release's "+DaemonName+" beside it, or build it there: go build -o "+filepath.Join(dir, DaemonName)+" ./cmd/sandbox-mcp-supervisor (CGO_ENABLED=0)",
			"server", h.exe)
	}
	return &Binary{Path: fallback.path, Where: "the server itself (no " + DaemonName + " beside it)", server: true}, nil
}

// besideDirs are where, beside the server, the daemon for goos is: the
// server's own directory, or the Linux build's.
func besideDirs(goos string, h host) []string {
	if goos == h.goos {
		return []string{""}
	}
	return []string{goos, goos + "-" + h.goarch}
}

// released caches checkRelease's answers, by the file's identity.
var released sync.Map // "path size mtime" -> release

// checkRelease runs b with --version and refuses it when it is of another
// release or protocol. A binary for another architecture (a configured
// one, for a remote engine) cannot say here: the hello checks it.
func checkRelease(b *Binary, mine string) error {
	fi, err := os.Stat(b.Path)
	if err != nil {
		return fmt.Errorf("the supervisor daemon (%s): %w", b.Where, err)
	}
	key := fmt.Sprint(b.Path, " ", fi.Size(), " ", fi.ModTime().UnixNano(), " ", mine)
	if r, ok := released.Load(key); ok {
		return r.(release).err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []byte
	out, err = exec.CommandContext(ctx, b.Path, "supervise", "--version").Output()
	var ee *exec.ExitError
	switch {
	case errors.Is(err, syscall.ENOEXEC):
		err = nil
	case errors.As(err, &ee):
		err = fmt.Errorf("the supervisor daemon %s (%s) does not say its version (exit %d): it is not this release's %s", b.Path, b.Where, ee.ExitCode(), DaemonName)
	case err != nil:
		err = fmt.Errorf("the supervisor daemon %s (%s) does not run: %w", b.Path, b.Where, err)
	default:
		err = checkVersionLine(b, string(out), mine)
	}
	released.Store(key, release{err})
	return err
}

// release is checkRelease's answer.
type release struct{ err error }

// checkVersionLine checks what `DAEMON --version` said: "NAME VERSION
// protocol N", VERSION "dev" for a development build.
func checkVersionLine(b *Binary, line, mine string) error {
	f := strings.Fields(line)
	if len(f) != 4 || f[2] != "protocol" {
		return fmt.Errorf("the supervisor daemon %s (%s) says %q for its version: it is not this release's %s", b.Path, b.Where, wire.CapText(line, 80), DaemonName)
	}
	v, proto := f[1], -1
	if v == "dev" {
		v = ""
	}
	if n, err := strconv.Atoi(f[3]); err == nil {
		proto = n
	}
	if proto == wire.Protocol && wire.SameRelease(v, mine) {
		return nil
	}
	return fmt.Errorf("the supervisor daemon %s (%s) is %s (protocol %d), this server %s (protocol %d): put this release's %s there (its archives have it; `go install github.com/sandbox-mcp/sandbox-mcp/cmd/...@VERSION` installs both)",
		b.Path, b.Where, wire.Describe(v), proto, wire.Describe(mine), wire.Protocol, DaemonName)
}

// Refusal adds where b was found to an error refusing a supervisor of
// another version (ErrVersion): the daemon to replace. Any other error is
// returned as it is.
func (b *Binary) Refusal(err error) error {
	if err == nil || !errors.Is(err, ErrVersion) {
		return err
	}
	return fmt.Errorf("%w; its binary is %s", err, b.Where)
}

// sameFile: a and b are one file (either may be a symlink to it).
func sameFile(a, b string) bool {
	fa, err := os.Stat(a)
	if err != nil {
		return false
	}
	fb, err := os.Stat(b)
	return err == nil && os.SameFile(fa, fb)
}
