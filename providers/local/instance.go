package local

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/sandbox-mcp/sandbox-mcp/filelock"
	"github.com/sandbox-mcp/sandbox-mcp/providers/internal/cgroups"
)

// instance is what one provider keeps on the host while it serves: the
// cgroups that bound its threads (package cgroups) and the binary its
// supervisors run from inside bubblewrap. It is recorded in
// <state>/instances/<id>/, whose lock the provider holds until Close, so
// that a start on the state dir finds what a killed server left (the lock
// is free) and removes it. Two servers on one host never share a name:
// each instance has a random id, and its cgroups' name also carries a hash
// of the state dir.
type instance struct {
	dir  string   // <state>/instances/<id>
	lock *os.File // held while the instance lives
	cg   *cgroups.Tree
	seq  atomic.Uint64 // numbers the sandboxes' cgroups

	exeMu sync.Mutex
	exe   string // the binary, linked or copied into dir; "" until made
}

// instanceName is the cgroups' name of instance id on a state dir.
var instanceName = regexp.MustCompile(`^sandbox-mcp-[0-9a-f]{16}-([0-9a-f]{16})$`)

// newInstance removes what earlier instances on stateDir left and makes
// this one, with cgroups bounding its threads by lim.
func newInstance(stateDir string, lim cgroups.Limits, log *slog.Logger) (*instance, error) {
	parent := filepath.Join(stateDir, "instances")
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return nil, err
	}
	removeStaleInstances(parent, log)
	var b [8]byte
	rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	in := &instance{dir: filepath.Join(parent, id)}
	if err := os.Mkdir(in.dir, 0o700); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(in.dir, "lock"), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err == nil {
		if err = filelock.TryLock(f); err != nil {
			f.Close()
		}
	}
	if err != nil {
		os.RemoveAll(in.dir)
		return nil, err
	}
	in.lock = f
	abs, err := filepath.Abs(stateDir)
	if err == nil {
		if r, err := filepath.EvalSymlinks(abs); err == nil {
			abs = r
		}
	}
	sum := sha256.Sum256([]byte(abs))
	name := "sandbox-mcp-" + hex.EncodeToString(sum[:8]) + "-" + id
	in.cg = cgroups.Open(name, lim)
	// The record a later start reads if this server is killed: the name,
	// then the cgroups.
	record := strings.Join(append([]string{name}, in.cg.Report().Dirs...), "\n") + "\n"
	if _, err := f.WriteString(record); err != nil {
		in.close()
		return nil, err
	}
	return in, nil
}

// removeStaleInstances removes the instances under parent whose lock no
// server holds: their cgroups (killing what still runs there) and their
// directory. One whose cgroups cannot go is kept for the next start.
func removeStaleInstances(parent string, log *slog.Logger) {
	ents, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	for _, e := range ents {
		dir := filepath.Join(parent, e.Name())
		f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDWR, 0)
		if err != nil {
			continue // being made, or not ours
		}
		if filelock.TryLock(f) != nil {
			f.Close()
			continue // a live server's
		}
		b, _ := io.ReadAll(f)
		lines := strings.Fields(string(b))
		err = nil
		if len(lines) > 0 {
			if m := instanceName.FindStringSubmatch(lines[0]); m != nil && m[1] == e.Name() {
				err = cgroups.RemoveStale(lines[0], lines[1:])
			}
		}
		if err == nil {
			err = os.RemoveAll(dir)
		}
		f.Close()
		if err != nil {
			log.Warn("a stale server instance on the state dir cannot be removed", "instance", e.Name(), "err", err.Error())
		}
	}
}

// supervisorBinary is the binary supervisors run from inside bubblewrap:
// this one, hard-linked — or, on another file system or where the link is
// refused, copied — into the instance's directory, so that the sandbox's
// /proc/self/mountinfo names the bind mount's source by a path under the
// state dir (which the server masks) and never by where the binary lives
// on the host (a home directory, a user name).
func (in *instance) supervisorBinary(exe string) (string, error) {
	in.exeMu.Lock()
	defer in.exeMu.Unlock()
	if in.exe != "" {
		return in.exe, nil
	}
	dst := filepath.Join(in.dir, "sandbox-mcp")
	if !sameFile(exe, "/proc/self/exe") || os.Link(exe, dst) != nil {
		// Replaced since it started (an upgrade), or not linkable: copy
		// the binary that runs.
		if err := copyExecutable(dst); err != nil {
			return "", fmt.Errorf("copy the supervisor's binary into the state dir: %w", err)
		}
	}
	in.exe = dst
	return dst, nil
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

// copyExecutable copies the running binary to dst (0755: whoever commands
// run as in bubblewrap must run it), whole or not at all.
func copyExecutable(dst string) error {
	src, err := os.Open("/proc/self/exe")
	if err != nil {
		if src, err = os.Open(os.Args[0]); err != nil {
			return err
		}
	}
	defer src.Close()
	tmp := dst + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, src)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, dst)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// group makes the cgroups of one sandbox of thread: nil when no limit
// holds. Each sandbox has its own (a thread released and acquired again
// may have two for a moment), named by a hash of the thread id, never
// the id itself.
func (in *instance) group(thread string) (*cgroups.Group, error) {
	sum := sha256.Sum256([]byte(thread))
	return in.cg.Group(fmt.Sprintf("%s.%d", hex.EncodeToString(sum[:16]), in.seq.Add(1)))
}

// close removes the instance: its cgroups (with anything left in them),
// its binary and its record. A record whose cgroups could not go stays
// for the next start to clean.
func (in *instance) close() error {
	err := in.cg.Close()
	if err == nil {
		err = os.RemoveAll(in.dir)
	}
	in.lock.Close()
	return err
}
