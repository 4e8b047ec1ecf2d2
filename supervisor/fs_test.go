//go:build linux

package supervisor

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox/sandboxtest"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor/supervisortest"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor/wire"
)

// listen starts the daemon serving a socket in a new directory, as a
// docker container's or a Pod's does, and returns a dialer of channels to
// it: each Link dialing with it is one server replica.
func listen(tb testing.TB) Dialer {
	tb.Helper()
	dir := supervisortest.Listen(tb)
	return func(ctx context.Context) (*Conn, error) {
		s, err := DialSocket(dir, supervisortest.Socket)
		if err != nil {
			return nil, err
		}
		return NewConn(ctx, s, s, s)
	}
}

// replica is one server's FS over its own channel to the supervisor.
func replica(tb testing.TB, dial Dialer) (*FS, *Link) {
	l := NewLink(dial)
	tb.Cleanup(l.Close)
	return NewFS(l, nil), l
}

// The sandbox contract, against a bwrap sandbox whose files are served
// by its supervisor (as a Pod's are) and whose commands run through it.
func TestFSContract(t *testing.T) {
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Skip("no bwrap")
	}
	exe := supervisortest.Path(t)
	sandboxtest.Run(t, sandboxtest.Options{ReadOnlyEnforced: true}, func(t *testing.T) sandbox.Sandbox {
		host := t.TempDir()
		ud, skills := filepath.Join(host, "user-data"), filepath.Join(host, "skills")
		for _, d := range []string{"workspace", "uploads", "outputs"} {
			if err := os.MkdirAll(filepath.Join(ud, d), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		os.MkdirAll(skills, 0o755)
		os.WriteFile(filepath.Join(skills, "skill.md"), []byte("skill\n"), 0o644)
		l := NewLink(func(ctx context.Context) (*Conn, error) {
			cmd := exec.Command("bwrap", "--die-with-parent", "--unshare-pid",
				"--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/mnt", "--dir", "/mnt/tmp", "--setenv", "TMPDIR", "/mnt/tmp",
				"--bind", ud, sandbox.UserDataDir, "--ro-bind", skills, sandbox.SkillsDir,
				"--chdir", sandbox.WorkspaceDir, exe, "supervise")
			return StartProcess(ctx, cmd, false)
		})
		t.Cleanup(l.Close)
		return &fsSandbox{
			link:   l,
			fs:     NewFS(l, func(p string) bool { return sandbox.Within(p, sandbox.SkillsDir) }),
			mounts: []sandbox.Mount{{Virtual: sandbox.UserDataDir, Host: ud}, {Virtual: sandbox.SkillsDir, Host: skills, ReadOnly: true}},
		}
	})
}

// fsSandbox is a Sandbox made of a Link: its FS and its commands.
type fsSandbox struct {
	link   *Link
	fs     *FS
	mounts []sandbox.Mount
}

func (s *fsSandbox) Thread() string          { return "t" }
func (s *fsSandbox) Mounts() []sandbox.Mount { return s.mounts }
func (s *fsSandbox) FS() sandbox.FS          { return s.fs }

func (s *fsSandbox) Exec(ctx context.Context, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
	c, err := s.link.Conn(ctx)
	if err != nil {
		return sandbox.ExecResult{}, err
	}
	res, err := s.link.Exec(ctx, ExecRequest{Argv: []string{c.Hello().Shell, "-c", req.Command}, Dir: sandbox.WorkspaceDir, Timeout: req.Timeout, Output: req.Output, Shell: req.Shell, ResetState: req.ResetState, Env: req.Env})
	return sandbox.ExecResult{ExitCode: res.ExitCode, TimedOut: res.TimedOut}, err
}

// Two replicas, each with its own channel and its own in-process locks,
// increment one counter concurrently: the supervisor's compare-and-swap
// loses no update.
func TestFSEditAcrossReplicas(t *testing.T) {
	dial := listen(t)
	a, _ := replica(t, dial)
	b, _ := replica(t, dial)
	name := filepath.Join(t.TempDir(), "sub", "count")
	const each = 50
	var wg sync.WaitGroup
	errs := make(chan error, 2*each)
	for _, f := range []*FS{a, b} {
		for range each {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- f.Edit(t.Context(), name, func(old []byte, exists bool) ([]byte, error) {
					time.Sleep(time.Millisecond) // the other replica's edit lands meanwhile
					n := 0
					if exists {
						var err error
						if n, err = strconv.Atoi(string(old)); err != nil {
							return nil, err
						}
					}
					return []byte(strconv.Itoa(n + 1)), nil
				})
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	got, _ := os.ReadFile(name)
	if string(got) != strconv.Itoa(2*each) {
		t.Fatalf("count %q, want %d", got, 2*each)
	}
	noTemps(t, filepath.Dir(name))
}

// A precondition that does not hold replaces nothing.
func TestFSConditionalWrite(t *testing.T) {
	f, _ := replica(t, listen(t))
	name := filepath.Join(t.TempDir(), "f")
	os.WriteFile(name, []byte("now"), 0o640)
	for _, req := range []wire.FSRequest{
		{Op: wire.OpWrite, Path: name, IfAbsent: true},
		{Op: wire.OpWrite, Path: name, IfSHA256: strings.Repeat("0", 64)},
	} {
		if err := f.write(t.Context(), req, []byte("new")); !errors.Is(err, errConflict) {
			t.Fatalf("%+v: err %v", req, err)
		}
	}
	if b, _ := os.ReadFile(name); string(b) != "now" {
		t.Fatalf("content %q", b)
	}
	// An edit keeps the file's mode.
	if err := f.Edit(t.Context(), name, func(old []byte, _ bool) ([]byte, error) { return append(old, '!'), nil }); err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(name)
	if b, _ := os.ReadFile(name); string(b) != "now!" || fi.Mode().Perm() != 0o640 {
		t.Fatalf("content %q mode %v", b, fi.Mode())
	}
	noTemps(t, filepath.Dir(name))
}

// A write whose stream is cut short — the channel ends, or the bytes are
// not what the commit says — replaces nothing and leaves no temporary file.
func TestFSWriteCutShort(t *testing.T) {
	dial := listen(t)
	dir := t.TempDir()
	name := filepath.Join(dir, "f")
	os.WriteFile(name, []byte("old"), 0o644)

	c, err := dial(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	w, err := c.create(t.Context(), wire.FSRequest{Op: wire.OpWrite, Path: name})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(bytes.Repeat([]byte("x"), 100000)); err != nil {
		t.Fatal(err)
	}
	if temps(t, dir) != 1 {
		t.Fatal("no temporary file while writing")
	}
	c.Close()
	waitNoTemps(t, dir)

	c, err = dial(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	w, err = c.create(t.Context(), wire.FSRequest{Op: wire.OpWrite, Path: name})
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte("new content"))
	w.size-- // the commit says one byte less than was sent
	if err := w.Close(); err == nil || !strings.Contains(err.Error(), "incomplete") {
		t.Fatalf("err %v", err)
	}
	if b, _ := os.ReadFile(name); string(b) != "old" {
		t.Fatalf("content %q", b)
	}
	noTemps(t, dir)
	// The channel still works.
	if _, _, err := c.do(t.Context(), wire.FSRequest{Op: wire.OpStat, Path: name}); err != nil {
		t.Fatal(err)
	}
}

func temps(t *testing.T, dir string) int {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(dir, ".sandbox-mcp-*"))
	return len(m)
}

func noTemps(t *testing.T, dir string) {
	t.Helper()
	if n := temps(t, dir); n != 0 {
		t.Fatalf("%d temporary files left in %s", n, dir)
	}
}

// waitNoTemps waits for the supervisor to clean up after a channel ended
// (that happens after the client saw the end).
func waitNoTemps(t *testing.T, dir string) {
	t.Helper()
	for range 500 {
		if temps(t, dir) == 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	noTemps(t, dir)
}

func TestFSRoundTripLarge(t *testing.T) {
	f, _ := replica(t, listen(t))
	name := filepath.Join(t.TempDir(), "a", "b", "big")
	data := make([]byte, 10<<20+12345)
	rand.Read(data)
	w, err := f.Create(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	for p := data; len(p) > 0; {
		n := min(len(p), 77777)
		if _, err := w.Write(p[:n]); err != nil {
			t.Fatal(err)
		}
		p = p[n:]
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if onDisk, _ := os.ReadFile(name); !bytes.Equal(onDisk, data) {
		t.Fatal("the file on disk differs")
	}
	r, err := f.Open(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got, err := io.ReadAll(r)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read %d bytes, err %v", len(got), err)
	}
	fi, _ := r.Stat()
	if fi.Size() != int64(len(data)) || fi.Name() != "big" || !fi.Mode().IsRegular() {
		t.Fatalf("stat %v %v %v", fi.Name(), fi.Size(), fi.Mode())
	}
}

// Operations and their errors, as the sandbox package's sentinels.
func TestFSOperations(t *testing.T) {
	l := NewLink(listen(t))
	t.Cleanup(l.Close)
	dir := t.TempDir()
	f := NewFS(l, func(p string) bool { return sandbox.Within(p, dir+"/ro") })
	ctx := t.Context()
	os.WriteFile(dir+"/file", []byte("hello"), 0o600)
	os.Mkdir(dir+"/d", 0o755)
	os.WriteFile(dir+"/d/x", nil, 0o644)
	os.Symlink("file", dir+"/link")
	syscall.Mkfifo(dir+"/fifo", 0o644)

	fi, err := f.Stat(ctx, dir+"/link") // followed
	if err != nil || fi.Size() != 5 || !fi.Mode().IsRegular() || fi.Name() != "link" {
		t.Fatalf("stat link: %v %v", fi, err)
	}
	ents, err := f.ReadDir(ctx, dir)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name()+":"+e.Type().String())
	}
	if err != nil || strings.Join(names, " ") != "d:d--------- fifo:p--------- file:---------- link:L---------" {
		t.Fatalf("readdir %v %v", names, err)
	}
	// A write through a symlink replaces its target.
	if err := f.Edit(ctx, dir+"/link", func(old []byte, _ bool) ([]byte, error) { return append(old, '!'), nil }); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(dir + "/file"); string(b) != "hello!" {
		t.Fatalf("target %q", b)
	}
	if fi, _ := os.Lstat(dir + "/link"); fi.Mode()&fs.ModeSymlink == 0 {
		t.Fatal("the symlink was replaced")
	}
	d, err := f.Open(ctx, dir+"/d")
	if err != nil {
		t.Fatal(err)
	}
	if fi, _ := d.Stat(); !fi.IsDir() {
		t.Fatal("dir open: not a dir")
	}
	if _, err := d.Read(make([]byte, 1)); !errors.Is(err, sandbox.ErrIsDir) {
		t.Fatalf("read dir: %v", err)
	}
	d.Close()

	notFound := func(err error) bool { return errors.Is(err, sandbox.ErrNotFound) }
	for _, c := range []struct {
		what string
		err  error
		want func(error) bool
	}{
		{"stat missing", second(f.Stat(ctx, dir+"/nope")), notFound},
		{"open missing", second(f.Open(ctx, dir+"/nope")), notFound},
		{"readdir file", second(f.ReadDir(ctx, dir+"/file")), is(sandbox.ErrNotDir)},
		{"open fifo", second(f.Open(ctx, dir+"/fifo")), is(sandbox.ErrNotRegular)},
		{"readdir fifo", second(f.ReadDir(ctx, dir+"/fifo")), is(sandbox.ErrNotDir)},
		{"edit fifo", f.Edit(ctx, dir+"/fifo", nil), is(sandbox.ErrNotRegular)},
		{"remove non-empty", f.Remove(ctx, dir+"/d"), is(syscall.ENOTEMPTY)},
		{"remove missing", f.Remove(ctx, dir+"/nope"), notFound},
		{"create under a file", second(f.Create(ctx, dir+"/file/x")), is(sandbox.ErrNotDir)},
		{"create a dir", second(f.Create(ctx, dir+"/d")), is(sandbox.ErrIsDir)},
		{"edit read-only", f.Edit(ctx, dir+"/ro/x", nil), is(sandbox.ErrReadOnly)},
		{"create read-only", second(f.Create(ctx, dir+"/ro/x")), is(sandbox.ErrReadOnly)},
		{"remove read-only", f.Remove(ctx, dir+"/ro"), is(sandbox.ErrReadOnly)},
		{"relative", second(f.Stat(ctx, "file")), is(sandbox.ErrOutsideRoot)},
		{"unclean", second(f.Stat(ctx, dir+"/d/../file")), is(sandbox.ErrOutsideRoot)},
	} {
		var pe *sandbox.PathError
		if !c.want(c.err) || !errors.As(c.err, &pe) || strings.Contains(c.err.Error(), "\n") {
			t.Errorf("%s: %v", c.what, c.err)
		}
	}
	if err := f.Remove(ctx, dir+"/d/x"); err != nil {
		t.Fatal(err)
	}
	if err := f.Remove(ctx, dir+"/d"); err != nil {
		t.Fatal(err)
	}
	// A channel that died is replaced for the next operation.
	c, _ := l.Conn(ctx)
	c.Close()
	if _, err := f.Stat(ctx, dir+"/file"); err != nil {
		t.Fatal(err)
	}
	noTemps(t, dir)
}

func second[T any](_ T, err error) error { return err }

func is(target error) func(error) bool { return func(err error) bool { return errors.Is(err, target) } }

func BenchmarkFSReadSmall(b *testing.B) {
	f, _ := replica(b, listen(b))
	name := filepath.Join(b.TempDir(), "small")
	os.WriteFile(name, bytes.Repeat([]byte("x"), 1024), 0o644)
	for b.Loop() {
		r, err := f.Open(context.Background(), name)
		if err != nil {
			b.Fatal(err)
		}
		data, err := io.ReadAll(r)
		r.Close()
		if err != nil || len(data) != 1024 {
			b.Fatal(len(data), err)
		}
	}
}

func BenchmarkFSStat(b *testing.B) {
	f, _ := replica(b, listen(b))
	name := b.TempDir()
	for b.Loop() {
		if _, err := f.Stat(context.Background(), name); err != nil {
			b.Fatal(err)
		}
	}
}

// An operation on a channel that was gone before it began (a sandbox
// ended behind the server's back) runs once on a new one — writes too.
func TestFSRetriesNotStarted(t *testing.T) {
	dial := listen(t)
	dials := 0
	l := NewLink(func(ctx context.Context) (*Conn, error) {
		c, err := dial(ctx)
		if dials++; dials == 1 && err == nil {
			c.Close() // dead before its first use
		}
		return c, err
	})
	t.Cleanup(l.Close)
	f := NewFS(l, nil)
	name := filepath.Join(t.TempDir(), "f")
	os.WriteFile(name, nil, 0o644)
	if err := f.Remove(t.Context(), name); err != nil || dials != 2 {
		t.Fatalf("err %v after %d dials", err, dials)
	}
	if _, err := os.Stat(name); !errors.Is(err, fs.ErrNotExist) {
		t.Fatal("not removed")
	}
}
