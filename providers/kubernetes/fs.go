package kubernetes

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor"
)

// Sandbox is one thread's Pod-backed sandbox.
type Sandbox struct {
	p      *Provider
	key    string // thread key
	name   string // Pod name
	mounts []sandbox.Mount
	// link is the channel to the Pod's supervisor, which runs bash (and,
	// later, the file operations).
	link *supervisor.Link

	mu     sync.Mutex
	dialed struct { // the link's last channel, and the Pod it reaches
		c   *supervisor.Conn
		uid types.UID
	}
}

var _ sandbox.Sandbox = (*Sandbox)(nil)

// Thread is the thread key.
func (s *Sandbox) Thread() string { return s.key }

// Mounts lists the virtual directories mounted into the Pod; Host is the
// node directory behind one (empty for a claim).
func (s *Sandbox) Mounts() []sandbox.Mount { return s.mounts }

// PodName is the name of the thread's Pod.
func (s *Sandbox) PodName() string { return s.name }

// FS is the Pod's file system, reached through exec: the virtual paths are
// the Pod's real mount points, and any other absolute path is the Pod's
// own file system (the agent owns its sandbox).
func (s *Sandbox) FS() sandbox.FS { return &podFS{s} }

// fsScript does one file operation inside the Pod; $1 names it. Every
// path it gets is clean and absolute, so none can pass for an option.
//
//	stat P         mode size mtime of P, symlinks followed
//	ls D           the names in D, NUL-terminated, an empty name, then
//	               "mode size mtime" of each (not followed), a line each
//	read P         "F mode size mtime\n" then the bytes; their sha256 on
//	               stderr (tee'd from the same stream); "D ..." for a dir
//	write P N SUM MODE   stdin to a temporary file beside P (P's target
//	               when P is a symlink), checked against N bytes and SUM,
//	               chmod MODE, renamed over P; "OK" or "SHORT <n>"
//	rm P           a file, or an empty directory
//	lock P SECS    P's lock (P symlink-resolved) for as long as stdin
//	               stays open (at most SECS); "L" once held. An flock
//	               where the image has flock(1); else a lock directory
//	               holding the holder's pid, taken over when that process
//	               is gone (killed with SIGKILL, it cannot clean up)
//
// The write keeps the shell between cat and the exec's stdout: with
// `cat > f` as the last command, sh would exec cat, stdout would reach EOF
// at once, and containerd would cut stdin short.
const fsScript = `op=$1; shift
st() { stat -L -c '%f %s %Y' "$1"; }
case $op in
stat) st "$1" ;;
ls)
  if [ ! -d "$1" ]; then st "$1" >/dev/null || exit 1; echo "Not a directory" >&2; exit 1; fi
  cd "$1" 2>/dev/null || { echo "Permission denied" >&2; exit 1; }
  set --
  for f in * .[!.]* ..?*; do if [ -e "$f" ] || [ -L "$f" ]; then set -- "$@" "$f"; fi; done
  [ $# -eq 0 ] && exit 0
  printf '%s\000' "$@"; printf '\000'
  stat -c '%f %s %Y' "$@" ;;
read)
  if [ -d "$1" ]; then printf 'D '; st "$1"; exit; fi
  if [ ! -e "$1" ]; then st "$1" >/dev/null; exit 1; fi
  if [ ! -f "$1" ]; then echo "Not a regular file" >&2; exit 1; fi
  if [ ! -r "$1" ]; then echo "Permission denied" >&2; exit 1; fi
  m=$(st "$1") || exit 1
  printf 'F %s\n' "$m"
  cat "$1" | { tee /dev/fd/3 | sha256sum >&2; } 3>&1 ;;
write)
  f=$1
  if [ -L "$f" ]; then t=$(readlink -f "$f") && f=$t; fi
  if [ -d "$f" ]; then echo "Is a directory" >&2; exit 1; fi
  d=${f%/*}; [ -n "$d" ] || d=/
  mkdir -p "$d" || exit 1
  tmp="$d/.sandbox-mcp-$$.tmp"
  cat > "$tmp" || { rm -f "$tmp"; exit 1; }
  n=$(wc -c < "$tmp"); n=$((n+0)); h=$(sha256sum < "$tmp"); h=${h%% *}
  if [ "$n" != "$2" ] || [ "$h" != "$3" ]; then rm -f "$tmp"; echo "SHORT $n"; exit 0; fi
  chmod "$4" "$tmp" && mv -f "$tmp" "$f" || { rm -f "$tmp"; exit 1; }
  echo OK ;;
rm)
  if [ -d "$1" ] && [ ! -L "$1" ]; then exec rmdir "$1"; fi
  if [ ! -e "$1" ] && [ ! -L "$1" ]; then echo "No such file or directory" >&2; exit 1; fi
  exec rm -f "$1" ;;
lock)
  k=$(readlink -f "$1" 2>/dev/null); [ -n "$k" ] || k=$1
  h=$(printf '%s' "$k" | sha256sum); h=${h%% *}
  d=/tmp/.sandbox-mcp-locks; mkdir -p "$d" 2>/dev/null
  if command -v flock >/dev/null 2>&1; then
    exec 9>"$d/$h" || exit 1
    flock 9 || exit 1
  else
    l="$d/$h.d"
    until mkdir "$l" 2>/dev/null; do
      o=$(cat "$l/pid" 2>/dev/null)
      if [ -n "$o" ] && ! kill -0 "$o" 2>/dev/null; then rm -rf "$l"; continue; fi
      sleep 0.02 2>/dev/null || sleep 1
    done
    echo $$ > "$l/pid"
    trap 'rm -rf "$l"' EXIT; trap 'exit 1' TERM INT HUP
  fi
  echo L
  if command -v timeout >/dev/null 2>&1; then timeout "$2" cat >/dev/null; else cat >/dev/null; fi
  exit 0 ;;
esac`

// lockMax is the longest an edit may hold a file's lock.
const lockMax = 10 * time.Minute

type podFS struct{ s *Sandbox }

// do runs one fsScript operation in the Pod, making the Pod first and
// again once if it went away behind the server's back.
func (f *podFS) do(ctx context.Context, stdin []byte, args ...string) (stdout, stderr []byte, code int, err error) {
	for attempt := 0; ; attempt++ {
		done, err := f.s.p.ensure(ctx, f.s)
		if err != nil {
			return nil, nil, -1, err
		}
		var in io.Reader
		if stdin != nil {
			in = bytes.NewReader(stdin)
		}
		stdout, stderr, code, err = f.s.run(ctx, append([]string{"sh", "-c", fsScript, "sandbox-mcp-fs"}, args...), in)
		done()
		if err != nil && ctx.Err() == nil && attempt == 0 && f.s.p.gone(f.s.name) {
			f.s.p.forget(f.s.name)
			continue
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil, nil, -1, ctx.Err()
			}
			return nil, nil, -1, apiError(err)
		}
		return stdout, stderr, code, nil
	}
}

// readOnly reports whether name lies in a read-only mount.
func (f *podFS) readOnly(name string) bool {
	var best *sandbox.Mount
	for i, m := range f.s.mounts {
		if sandbox.Within(name, m.Virtual) && (best == nil || len(m.Virtual) > len(best.Virtual)) {
			best = &f.s.mounts[i]
		}
	}
	return best != nil && best.ReadOnly
}

func (f *podFS) Stat(ctx context.Context, name string) (fs.FileInfo, error) {
	stdout, stderr, code, err := f.do(ctx, nil, "stat", name)
	if err != nil {
		return nil, err
	}
	if code != 0 {
		return nil, podError(name, stderr)
	}
	return parseInfo(path.Base(name), strings.TrimSpace(string(stdout)), name)
}

func (f *podFS) ReadDir(ctx context.Context, name string) ([]fs.DirEntry, error) {
	for attempt := 0; ; attempt++ {
		out, err := f.readDir(ctx, name)
		if errors.Is(err, errRace) && attempt < 2 {
			continue
		}
		if errors.Is(err, errRace) {
			return nil, &sandbox.PathError{Path: name, Err: errors.New("directory changing too fast to list")}
		}
		return out, err
	}
}

// errRace: an entry went away between a listing and its stat.
var errRace = errors.New("listing raced")

func (f *podFS) readDir(ctx context.Context, name string) ([]fs.DirEntry, error) {
	stdout, stderr, code, err := f.do(ctx, nil, "ls", name)
	if err != nil {
		return nil, err
	}
	if code != 0 {
		return nil, podError(name, stderr)
	}
	if len(stdout) == 0 {
		return nil, nil
	}
	names, rest, ok := bytes.Cut(stdout, []byte{0, 0})
	if !ok {
		return nil, &sandbox.PathError{Path: name, Err: errors.New("unreadable listing from the sandbox")}
	}
	list := strings.Split(string(names), "\x00")
	infos := strings.Split(strings.TrimSuffix(string(rest), "\n"), "\n")
	out := make([]fs.DirEntry, 0, len(list))
	if len(infos) != len(list) {
		return nil, errRace
	}
	for i, n := range list {
		fi, err := parseInfo(n, infos[i], path.Join(name, n))
		if err != nil {
			return nil, err
		}
		out = append(out, fs.FileInfoToDirEntry(fi))
	}
	slices.SortFunc(out, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return out, nil
}

// Open streams a file out of the Pod through exec's stdout; at its end the
// bytes are checked against the sha256 the Pod computed of the same
// stream. A directory opens for Stat only.
func (f *podFS) Open(ctx context.Context, name string) (fs.File, error) {
	for attempt := 0; ; attempt++ {
		file, err := f.open(ctx, name)
		if errors.Is(err, errGone) && attempt == 0 {
			continue
		}
		return file, err
	}
}

func (f *podFS) open(ctx context.Context, name string) (fs.File, error) {
	done, err := f.s.p.ensure(ctx, f.s)
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(ctx)
	pr, pw := io.Pipe()
	pf := &podFile{cancel: cancel, pr: pr, ended: make(chan struct{}), sum: sha256.New(), name: name}
	go func() {
		err := f.s.p.stream(sctx, f.s.name, []string{"sh", "-c", fsScript, "sandbox-mcp-fs", "read", name}, nil, pw, &limitWriter{w: &pf.stderr, n: 64 << 10})
		pf.err = err
		close(pf.ended)
		pw.Close()
		done()
	}()
	pf.r = bufio.NewReaderSize(pr, 64<<10)
	head, rerr := pf.r.ReadString('\n')
	if rerr != nil {
		pf.Close()
		<-pf.ended
		if code, ok := exitCode(pf.err); ok && code != 0 {
			return nil, podError(name, pf.stderr.Bytes())
		}
		if pf.err != nil && ctx.Err() == nil && f.s.p.gone(f.s.name) {
			f.s.p.forget(f.s.name)
			return nil, errGone
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, apiError(fmt.Errorf("read %s: %v", name, pf.err))
	}
	kind, meta, _ := strings.Cut(strings.TrimSuffix(head, "\n"), " ")
	fi, err := parseInfo(path.Base(name), meta, name)
	if err != nil {
		pf.Close()
		return nil, err
	}
	pf.fi = fi
	if kind == "D" {
		pf.Close()
		return &dirFile{fi: fi}, nil
	}
	return pf, nil
}

// podFile is a file streamed out of the Pod.
type podFile struct {
	cancel context.CancelFunc
	pr     *io.PipeReader
	r      *bufio.Reader
	fi     fs.FileInfo
	name   string
	sum    interface {
		io.Writer
		Sum([]byte) []byte
	}
	ended  chan struct{}
	err    error // the stream's, once ended
	stderr bytes.Buffer
	closed sync.Once
}

func (p *podFile) Stat() (fs.FileInfo, error) { return p.fi, nil }

// Read returns the file's bytes; at the end, an error instead of io.EOF
// when they are not what the Pod sent.
func (p *podFile) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.sum.Write(b[:n])
	if err != io.EOF {
		return n, err
	}
	<-p.ended
	if code, ok := exitCode(p.err); !ok || code != 0 {
		return n, &sandbox.PathError{Path: p.name, Err: fmt.Errorf("read from the sandbox failed: %s", oneLine(errText(p.err, p.stderr.Bytes())))}
	}
	want, _, _ := strings.Cut(strings.TrimSpace(p.stderr.String()), " ")
	if got := hex.EncodeToString(p.sum.Sum(nil)); got != want {
		return n, &sandbox.PathError{Path: p.name, Err: errors.New("transfer from the sandbox incomplete (sha256 mismatch)")}
	}
	return n, io.EOF
}

func (p *podFile) Close() error {
	p.closed.Do(func() {
		p.cancel()
		p.pr.Close()
	})
	return nil
}

func errText(err error, stderr []byte) string {
	if len(bytes.TrimSpace(stderr)) > 0 {
		return string(stderr)
	}
	if err != nil {
		return err.Error()
	}
	return "unknown error"
}

// dirFile is an opened directory (for Stat).
type dirFile struct{ fi fs.FileInfo }

func (d *dirFile) Read([]byte) (int, error) {
	return 0, &sandbox.PathError{Path: d.fi.Name(), Err: sandbox.ErrIsDir}
}
func (d *dirFile) Stat() (fs.FileInfo, error) { return d.fi, nil }
func (d *dirFile) Close() error               { return nil }

// Edit holds the file's lock — in this process, then an flock inside the
// Pod, which every server replica shares — across read, fn and write.
func (f *podFS) Edit(ctx context.Context, name string, fn sandbox.EditFunc) error {
	if f.readOnly(name) {
		return &sandbox.PathError{Path: name, Err: sandbox.ErrReadOnly}
	}
	unlock, err := f.s.p.locks.Lock(ctx, "edit\x00"+f.s.name+"\x00"+name)
	if err != nil {
		return err
	}
	defer unlock()
	done, err := f.s.p.ensure(ctx, f.s)
	if err != nil {
		return err
	}
	defer done()
	release, err := f.lock(ctx, name)
	if err != nil {
		return err
	}
	defer release()

	old, mode, exists, err := f.readAll(ctx, name)
	if err != nil {
		return err
	}
	data, err := fn(old, exists)
	if err != nil {
		return err
	}
	return f.write(ctx, name, data, mode)
}

// lock takes the file's flock inside the Pod. It holds while the exec's
// stdin stays open: release closes it, and a replica that dies takes its
// locks with it.
func (f *podFS) lock(ctx context.Context, name string) (release func(), err error) {
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	var stderr bytes.Buffer
	ended := make(chan error, 1)
	go func() {
		err := f.s.p.stream(sctx, f.s.name, []string{"sh", "-c", fsScript, "sandbox-mcp-fs", "lock", name, strconv.Itoa(int(lockMax / time.Second))}, inR, outW, &limitWriter{w: &stderr, n: 4 << 10})
		outW.CloseWithError(errors.New("lock stream ended"))
		ended <- err
	}()
	release = func() {
		inW.Close()
		select {
		case <-ended:
		case <-time.After(10 * time.Second):
		}
		cancel()
	}
	got := make(chan error, 1)
	go func() {
		b := make([]byte, 2)
		_, err := io.ReadFull(outR, b)
		if err == nil && string(b) != "L\n" {
			err = errors.New("unexpected answer")
		}
		got <- err
		io.Copy(io.Discard, outR)
	}()
	select {
	case err = <-got:
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err != nil {
		inW.Close()
		cancel()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &sandbox.PathError{Path: name, Err: fmt.Errorf("lock in the sandbox failed: %s", oneLine(errText(err, stderr.Bytes())))}
	}
	return release, nil
}

// readAll reads a file for an edit: its bytes (checked), its mode, and
// whether it exists.
func (f *podFS) readAll(ctx context.Context, name string) ([]byte, fs.FileMode, bool, error) {
	for attempt := 0; ; attempt++ {
		file, err := f.open(ctx, name)
		switch {
		case errors.Is(err, sandbox.ErrNotFound):
			return nil, 0o644, false, nil
		case err != nil:
			return nil, 0, false, err
		}
		fi, _ := file.Stat()
		if fi.IsDir() {
			file.Close()
			return nil, 0, false, &sandbox.PathError{Path: name, Err: sandbox.ErrIsDir}
		}
		if fi.Size() > sandbox.EditMaxBytes {
			file.Close()
			return nil, 0, false, &sandbox.PathError{Path: name, Err: sandbox.ErrTooLarge}
		}
		data, err := io.ReadAll(io.LimitReader(file, sandbox.EditMaxBytes+1))
		file.Close()
		if err != nil && attempt < 2 && strings.Contains(err.Error(), "sha256 mismatch") {
			continue
		}
		if err != nil {
			return nil, 0, false, err
		}
		if len(data) > sandbox.EditMaxBytes {
			return nil, 0, false, &sandbox.PathError{Path: name, Err: sandbox.ErrTooLarge}
		}
		return data, fi.Mode().Perm() | fi.Mode()&fs.ModeSticky, true, nil
	}
}

// write puts data at name through exec's stdin, to a temporary file that
// the Pod checks (size and sha256) before renaming it into place; a
// short transfer is sent again.
func (f *podFS) write(ctx context.Context, name string, data []byte, mode fs.FileMode) error {
	sum := sha256.Sum256(data)
	perm := uint32(mode.Perm())
	if mode&fs.ModeSticky != 0 {
		perm |= 0o1000
	}
	args := []string{"write", name, strconv.Itoa(len(data)), hex.EncodeToString(sum[:]), fmt.Sprintf("%o", perm)}
	for attempt := 0; ; attempt++ {
		stdout, stderr, code, err := f.do(ctx, data, args...)
		if err != nil {
			return err
		}
		if code != 0 {
			return podError(name, stderr)
		}
		switch out := strings.TrimSpace(string(stdout)); {
		case out == "OK":
			return nil
		case strings.HasPrefix(out, "SHORT") && attempt < 3:
			f.s.p.log.Warn("kubernetes provider: exec stdin arrived short; sending again", "pod", f.s.name, "sent", len(data), "got", strings.TrimPrefix(out, "SHORT "))
			continue
		default:
			return &sandbox.PathError{Path: name, Err: fmt.Errorf("transfer to the sandbox incomplete (%s of %d bytes arrived)", strings.TrimPrefix(out, "SHORT "), len(data))}
		}
	}
}

// Create keeps the bytes in memory (up to EditMaxBytes) and writes them on
// Close, under the file's lock.
func (f *podFS) Create(ctx context.Context, name string) (io.WriteCloser, error) {
	if f.readOnly(name) {
		return nil, &sandbox.PathError{Path: name, Err: sandbox.ErrReadOnly}
	}
	return sandbox.EditWriter(ctx, f, name), nil
}

func (f *podFS) Remove(ctx context.Context, name string) error {
	if f.readOnly(name) {
		return &sandbox.PathError{Path: name, Err: sandbox.ErrReadOnly}
	}
	_, stderr, code, err := f.do(ctx, nil, "rm", name)
	if err != nil {
		return err
	}
	if code != 0 {
		return podError(name, stderr)
	}
	return nil
}

// podError classifies what a failed operation printed on stderr. The text
// names Pod paths only — the agent's own view — never a host path.
func podError(name string, stderr []byte) error {
	msg := string(stderr)
	for _, c := range []struct {
		text string
		err  error
	}{
		{"No such file", sandbox.ErrNotFound},
		{"Permission denied", sandbox.ErrPermission},
		{"Not a directory", sandbox.ErrNotDir},
		{"Is a directory", sandbox.ErrIsDir},
		{"Read-only file system", sandbox.ErrReadOnly},
		{"Not a regular file", sandbox.ErrNotRegular},
		{"File exists", sandbox.ErrExists},
		{"Directory not empty", syscall.ENOTEMPTY},
		{"Too many levels of symbolic links", syscall.ELOOP},
		{"No space left", syscall.ENOSPC},
		{"Disk quota exceeded", syscall.EDQUOT},
	} {
		if strings.Contains(msg, c.text) {
			return &sandbox.PathError{Path: name, Err: c.err}
		}
	}
	return &sandbox.PathError{Path: name, Err: fmt.Errorf("failed in the sandbox: %s", oneLine(errText(nil, stderr)))}
}

// parseInfo reads "hexmode size mtime" (stat -c '%f %s %Y').
func parseInfo(name, s, vpath string) (fs.FileInfo, error) {
	fields := strings.Fields(s)
	bad := &sandbox.PathError{Path: vpath, Err: errors.New("unreadable stat from the sandbox")}
	if len(fields) != 3 {
		return nil, bad
	}
	raw, err1 := strconv.ParseUint(fields[0], 16, 32)
	size, err2 := strconv.ParseInt(fields[1], 10, 64)
	mtime, err3 := strconv.ParseInt(fields[2], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return nil, bad
	}
	return &fileInfo{name: name, size: size, mode: sandbox.UnixMode(uint32(raw)), mtime: time.Unix(mtime, 0)}, nil
}

// fileInfo is a Pod file's FileInfo.
type fileInfo struct {
	name  string
	size  int64
	mode  fs.FileMode
	mtime time.Time
}

func (i *fileInfo) Name() string       { return i.name }
func (i *fileInfo) Size() int64        { return i.size }
func (i *fileInfo) Mode() fs.FileMode  { return i.mode }
func (i *fileInfo) ModTime() time.Time { return i.mtime }
func (i *fileInfo) IsDir() bool        { return i.mode.IsDir() }
func (i *fileInfo) Sys() any           { return nil }
