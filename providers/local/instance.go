package local

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/filelock"
	"github.com/sandbox-mcp/sandbox-mcp/providers/internal/cgroups"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor"
)

// instance is what one provider keeps on the host while it serves: the
// cgroups that bound its threads (package cgroups), and the supervisor
// daemon its sandboxes run, found at start (supervisor.FindBinary) and,
// for bubblewrap, linked or copied into the state dir. It is recorded in
// <state>/instances/<id>/lock, which the provider holds locked until
// Close, so that a start on the state dir finds what a killed server left
// (the lock is free) and removes it. Two servers on one host never share
// a cgroup: each instance has a random id, and its cgroups' name also
// carries a hash of the state dir.
type instance struct {
	dir  string   // <state>/instances/<id>
	lock *os.File // held while the instance lives
	cg   *cgroups.Tree
	seq  atomic.Uint64 // numbers the sandboxes' cgroups
	log  *slog.Logger

	daemon    *supervisor.Binary // the supervisor daemon, as found
	src       *os.File           // it, open since it was found: what is linked or copied
	bin       string             // <state>/bin/sandbox-mcp-<version>: its link or copy
	binMu     sync.Mutex
	binWarned bool
}

// The record of an instance, one "key value" a line.
const (
	recCgroups = "cgroups" // the cgroups' name
	recCgroup  = "cgroup"  // one of its cgroups, a directory
	recBinary  = "binary"  // the name of its binary in <state>/bin
)

var (
	// instanceName is the cgroups' name of instance id on a state dir.
	instanceName = regexp.MustCompile(`^sandbox-mcp-[0-9a-f]{16}-([0-9a-f]{16})$`)
	// binaryName is a binary's name in <state>/bin.
	binaryName = regexp.MustCompile(`^sandbox-mcp-[0-9a-f]{16}$`)
)

// newInstance removes what earlier instances on stateDir left and makes
// this one, with cgroups bounding its threads by lim.
func newInstance(stateDir string, lim cgroups.Limits, log *slog.Logger) (*instance, error) {
	parent := filepath.Join(stateDir, "instances")
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return nil, err
	}
	binDir := filepath.Join(stateDir, "bin")
	if err := os.MkdirAll(binDir, 0o700); err != nil {
		return nil, err
	}
	daemon, err := supervisor.FindBinary(supervisor.Locate{GOOS: runtime.GOOS, Log: log})
	if err != nil {
		return nil, err
	}
	src, err := os.Open(daemon.Path)
	if err != nil {
		return nil, fmt.Errorf("the supervisor daemon: %w", err)
	}
	bin := "sandbox-mcp-" + binaryVersion(src)
	removeStale(parent, binDir, bin, log)
	var b [8]byte
	rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	in := &instance{dir: filepath.Join(parent, id), daemon: daemon, src: src, bin: filepath.Join(binDir, bin), log: log}
	if err := os.Mkdir(in.dir, 0o700); err != nil {
		src.Close()
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(in.dir, "lock"), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err == nil {
		if err = filelock.TryLock(f); err != nil {
			f.Close()
		}
	}
	if err != nil {
		src.Close()
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
	// The record a later start reads if this server is killed: its binary
	// first (kept while this server lives), the cgroups once made.
	record := fmt.Sprintf("%s %s\n%s %s\n", recBinary, bin, recCgroups, name)
	if _, err := f.WriteString(record); err != nil {
		f.Close()
		src.Close()
		os.RemoveAll(in.dir)
		return nil, err
	}
	in.cg = cgroups.Open(name, lim)
	record = ""
	for _, d := range in.cg.Report().Dirs {
		record += recCgroup + " " + d + "\n"
	}
	if _, err := f.WriteString(record); err != nil {
		in.close()
		return nil, err
	}
	return in, nil
}

// binaryVersion names the daemon's version: a hash of its file's path,
// size and modification time.
func binaryVersion(f *os.File) string {
	key := "unknown"
	if fi, err := f.Stat(); err == nil {
		key = fmt.Sprint(f.Name(), "\x00", fi.Size(), "\x00", fi.ModTime().UnixNano())
	}
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:8])
}

// readRecord reads an instance's record.
func readRecord(r io.Reader) (rec map[string][]string) {
	rec = map[string][]string{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), " "); ok {
			rec[k] = append(rec[k], v)
		}
	}
	return rec
}

// removeStale removes the instances under parent whose lock no server
// holds — their cgroups (killing what still runs there) and their
// directory — and the binaries in binDir that no live server uses but
// keep. An instance whose cgroups cannot go is kept for the next start.
func removeStale(parent, binDir, keep string, log *slog.Logger) {
	used := map[string]bool{keep: true}
	ents, _ := os.ReadDir(parent)
	for _, e := range ents {
		dir := filepath.Join(parent, e.Name())
		f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDWR, 0)
		if err != nil {
			continue // being made, or not ours
		}
		live := filelock.TryLock(f) != nil
		rec := readRecord(f)
		if live {
			for _, b := range rec[recBinary] {
				used[b] = true
			}
			f.Close()
			continue
		}
		err = nil
		if names := rec[recCgroups]; len(names) == 1 {
			if m := instanceName.FindStringSubmatch(names[0]); m != nil && m[1] == e.Name() {
				err = cgroups.RemoveStale(names[0], rec[recCgroup])
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
	bins, _ := os.ReadDir(binDir)
	for _, e := range bins {
		n := e.Name()
		old := false
		if fi, err := e.Info(); err == nil {
			old = time.Since(fi.ModTime()) > time.Hour
		}
		// A copy being made is <name>.tmp-*: another server's, unless old.
		if binaryName.MatchString(n) && !used[n] || strings.Contains(n, ".tmp-") && old {
			os.Remove(filepath.Join(binDir, n))
		}
	}
}

// supervisorBinary is the binary supervisors run from inside bubblewrap:
// the daemon, hard-linked — or, on another file system or where a link is
// refused, copied — into the state dir's bin/, one file per version of
// it, shared by the servers on the state dir. A sandbox's
// /proc/self/mountinfo so names the bind mount's source by a path under
// the state dir (which the server masks, as it masks every thread mount's
// source) and never by where the daemon lives on the host (a home
// directory, a user name). Where neither can be made (no room for a copy)
// it is the daemon where it is, with a warning, once: bash works, its
// mount table shows the daemon's path.
func (in *instance) supervisorBinary() string {
	if _, err := os.Stat(in.bin); err == nil {
		return in.bin
	}
	in.binMu.Lock()
	defer in.binMu.Unlock()
	if _, err := os.Stat(in.bin); err == nil {
		return in.bin
	}
	// A link only to the daemon as it was found: the file at its path may
	// have been replaced (an upgrade) since.
	err := errors.New("not the daemon found")
	if sameFile(in.daemon.Path, in.src) {
		err = os.Link(in.daemon.Path, in.bin)
	}
	if err == nil || errors.Is(err, fs.ErrExist) {
		return in.bin
	}
	if err = copyExecutable(in.src, in.bin); err == nil || errors.Is(err, fs.ErrExist) {
		return in.bin
	}
	if !in.binWarned {
		in.binWarned = true
		in.log.Warn("the supervisor daemon cannot be linked or copied into the state dir: sandboxes' /proc/self/mountinfo shows where it lives on the host; put the state dir on its file system, or give it room for a copy",
			"err", err.Error())
	}
	return in.daemon.Path
}

// start starts cmd, which runs the daemon (directly or in bubblewrap),
// and returns the channel to it; a daemon of another version is refused,
// naming where it was found.
func (in *instance) start(ctx context.Context, cmd *exec.Cmd, session bool) (*supervisor.Conn, error) {
	c, err := supervisor.StartProcess(ctx, cmd, session)
	return c, in.daemon.Refusal(err)
}

// sameFile: the file at p is f.
func sameFile(p string, f *os.File) bool {
	fa, err := os.Stat(p)
	if err != nil {
		return false
	}
	fb, err := f.Stat()
	return err == nil && os.SameFile(fa, fb)
}

// copyExecutable copies src to dst (0755: whoever commands run as in
// bubblewrap must run it), whole or not at all.
func copyExecutable(src *os.File, dst string) error {
	f, err := os.CreateTemp(filepath.Dir(dst), filepath.Base(dst)+".tmp-*")
	if err != nil {
		return err
	}
	_, err = io.Copy(f, io.NewSectionReader(src, 0, 1<<62))
	if err == nil {
		err = f.Chmod(0o755)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), dst)
	}
	if err != nil {
		os.Remove(f.Name())
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

// close removes the instance: its cgroups (with anything left in them)
// and its record. A record whose cgroups could not go stays for the next
// start to clean. The binary stays for the next server of its version.
func (in *instance) close() error {
	in.src.Close()
	err := in.cg.Close()
	if err == nil {
		err = os.RemoveAll(in.dir)
	}
	in.lock.Close()
	return err
}
