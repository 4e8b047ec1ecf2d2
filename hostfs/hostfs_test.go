package hostfs_test

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/filelock"
	"github.com/sandbox-mcp/sandbox-mcp/hostfs"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// fixture is a FS over a workspace, an outputs dir, a read-only skills
// dir and, beside them, a secret the agent must never reach.
type fixture struct {
	fs                       *hostfs.FS
	base, ws, skills, secret string
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	base := t.TempDir()
	f := &fixture{base: base, ws: filepath.Join(base, "ws"), skills: filepath.Join(base, "skills"), secret: filepath.Join(base, "secret")}
	for _, d := range []string{f.ws, f.skills, f.secret, filepath.Join(base, "out"), filepath.Join(base, "ws-x")} {
		must(t, os.MkdirAll(d, 0o755))
	}
	must(t, os.WriteFile(filepath.Join(f.secret, "key"), []byte("SECRET"), 0o600))
	must(t, os.WriteFile(filepath.Join(f.ws, "a.txt"), []byte("hello"), 0o644))
	must(t, os.WriteFile(filepath.Join(f.skills, "s.md"), []byte("skill"), 0o644))
	must(t, os.MkdirAll(filepath.Join(f.ws, "real"), 0o755))
	must(t, os.WriteFile(filepath.Join(f.ws, "real", "r.txt"), []byte("r"), 0o644))
	// Escapes by symlink: to /etc, to the secret (absolute and relative), a loop.
	must(t, os.Symlink("/etc", filepath.Join(f.ws, "etc")))
	must(t, os.Symlink(f.secret, filepath.Join(f.ws, "abs")))
	must(t, os.Symlink("../secret", filepath.Join(f.ws, "rel")))
	must(t, os.Symlink("../secret/key", filepath.Join(f.ws, "keylink")))
	must(t, os.Symlink("loop", filepath.Join(f.ws, "loop")))
	// Links that stay inside.
	must(t, os.Symlink("real", filepath.Join(f.ws, "alias")))
	must(t, os.Symlink("a.txt", filepath.Join(f.ws, "a-link")))
	hfs, err := hostfs.Open([]sandbox.Mount{
		{Virtual: sandbox.WorkspaceDir, Host: f.ws},
		{Virtual: sandbox.OutputsDir, Host: filepath.Join(base, "out")},
		{Virtual: sandbox.SkillsDir, Host: f.skills, ReadOnly: true},
	}, filelock.NewLocks())
	must(t, err)
	t.Cleanup(func() { hfs.Close() })
	f.fs = hfs
	return f
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestCleanAndEscapes(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	tests := []struct {
		arg     string
		wantErr error // nil: readable
	}{
		{"a.txt", nil},
		{"/mnt/user-data/workspace/a.txt", nil},
		{"./real/../a.txt", nil},
		{"alias/r.txt", nil},
		{"a-link", nil},
		{"/mnt/skills/s.md", nil},
		{"../../../etc/passwd", sandbox.ErrOutsideRoot},
		{"/mnt/user-data/workspace/../../../etc/passwd", sandbox.ErrOutsideRoot},
		{"/etc/passwd", sandbox.ErrOutsideRoot},
		{f.secret + "/key", sandbox.ErrOutsideRoot},
		{"/mnt/user-data-x/a.txt", sandbox.ErrOutsideRoot},
		{"/mnt/user-data/workspacex/a.txt", sandbox.ErrOutsideRoot},
		{"/mnt/skillsx/s.md", sandbox.ErrOutsideRoot},
		{"etc/passwd", sandbox.ErrOutsideRoot},
		{"abs/key", sandbox.ErrOutsideRoot},
		{"rel/key", sandbox.ErrOutsideRoot},
		{"keylink", sandbox.ErrOutsideRoot},
		{"loop", sandbox.ErrOutsideRoot},
		{"a.txt\x00.png", sandbox.ErrOutsideRoot},
		{"\x00", sandbox.ErrOutsideRoot},
		{"../ws-x/a.txt", sandbox.ErrOutsideRoot},
		{"/mnt/user-data/workspace/\u2025/\u2025/etc/passwd", sandbox.ErrNotFound}, // two-dot leader is not ".."
		{"/mnt/user-data/workspace/%2e%2e/%2e%2e/etc/passwd", sandbox.ErrNotFound},
		{"nothing-here", sandbox.ErrNotFound},
	}
	for _, tt := range tests {
		name, err := sandbox.Clean(tt.arg)
		if err == nil {
			var r io.ReadCloser
			r, err = f.fs.Open(ctx, name)
			if err == nil {
				b, _ := io.ReadAll(r)
				r.Close()
				if strings.Contains(string(b), "SECRET") || strings.Contains(string(b), "root:") {
					t.Errorf("%q: read a file outside the sandbox", tt.arg)
				}
			}
		}
		if !errors.Is(err, tt.wantErr) && !(tt.wantErr == nil && err == nil) {
			t.Errorf("open %q: err = %v, want %v", tt.arg, err, tt.wantErr)
		}
		if err != nil {
			if strings.Contains(err.Error(), f.base) && !strings.HasPrefix(tt.arg, f.base) {
				t.Errorf("open %q: error names a host path: %v", tt.arg, err)
			}
			if !strings.HasPrefix(err.Error(), tt.wantErr.Error()+": ") {
				t.Errorf("open %q: error %q does not name the virtual path", tt.arg, err)
			}
		}
	}
}

func TestEditRefusesEscapesAndReadOnly(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	write := func(arg string) error {
		name, err := sandbox.Clean(arg)
		if err != nil {
			return err
		}
		return f.fs.Edit(ctx, name, func([]byte, bool) ([]byte, error) { return []byte("pwned"), nil })
	}
	tests := []struct {
		arg  string
		want error
	}{
		{"etc/evil", sandbox.ErrOutsideRoot},             // symlinked dir to /etc
		{"abs/key", sandbox.ErrOutsideRoot},              // absolute symlink to the secret dir
		{"rel/new", sandbox.ErrOutsideRoot},              // relative symlink leaving the root
		{"keylink", sandbox.ErrOutsideRoot},              // last component links out
		{"../secret/key", sandbox.ErrOutsideRoot},        // ..
		{"/mnt/skills/s.md", sandbox.ErrReadOnly},        // read-only mount
		{"/mnt/skills/new/x.md", sandbox.ErrReadOnly},    // read-only mount, new file
		{"/mnt/user-data/x.txt", sandbox.ErrOutsideRoot}, // not inside any mapping
		{"/mnt/user-data/workspace", sandbox.ErrIsDir},
		{"real", sandbox.ErrIsDir},
		{"a.txt/child", sandbox.ErrNotDir},
		{"x\x00y", sandbox.ErrOutsideRoot},
	}
	for _, tt := range tests {
		if err := write(tt.arg); !errors.Is(err, tt.want) {
			t.Errorf("edit %q: err = %v, want %v", tt.arg, err, tt.want)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(f.secret, "key")); string(b) != "SECRET" {
		t.Fatalf("secret changed: %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(f.skills, "s.md")); string(b) != "skill" {
		t.Fatalf("read-only file changed: %q", b)
	}
	if _, err := os.Stat("/etc/evil"); err == nil {
		t.Fatal("wrote /etc/evil")
	}
}

func TestEditThroughInnerSymlinkEditsTarget(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	err := f.fs.Edit(ctx, sandbox.WorkspaceDir+"/a-link", func(old []byte, exists bool) ([]byte, error) {
		if !exists || string(old) != "hello" {
			t.Errorf("old = %q, %v", old, exists)
		}
		return []byte("changed"), nil
	})
	must(t, err)
	if b, _ := os.ReadFile(filepath.Join(f.ws, "a.txt")); string(b) != "changed" {
		t.Fatalf("target = %q", b)
	}
	if fi, err := os.Lstat(filepath.Join(f.ws, "a-link")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("the link was replaced: %v", err)
	}
}

func TestEditKeepsModeAndLeavesNoTemp(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	p := filepath.Join(f.ws, "run.sh")
	must(t, os.WriteFile(p, []byte("#!/bin/sh\n"), 0o750))
	must(t, os.Chmod(p, 0o750))
	must(t, f.fs.Edit(ctx, sandbox.WorkspaceDir+"/run.sh", func(old []byte, _ bool) ([]byte, error) { return append(old, "true\n"...), nil }))
	fi, err := os.Stat(p)
	must(t, err)
	if fi.Mode().Perm() != 0o750 {
		t.Fatalf("mode = %v, want 0750", fi.Mode().Perm())
	}
	// A failing edit changes nothing and leaves no temp file either.
	boom := errors.New("boom")
	if err := f.fs.Edit(ctx, sandbox.WorkspaceDir+"/run.sh", func([]byte, bool) ([]byte, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Fatalf("err = %v", err)
	}
	must(t, f.fs.Edit(ctx, sandbox.WorkspaceDir+"/deep/new/file.txt", func(_ []byte, exists bool) ([]byte, error) {
		if exists {
			t.Error("new file exists")
		}
		return []byte("x"), nil
	}))
	fi, err = os.Stat(filepath.Join(f.ws, "deep/new/file.txt"))
	must(t, err)
	if fi.Mode().Perm() != 0o644 {
		t.Errorf("new file mode = %v", fi.Mode().Perm())
	}
	filepath.Walk(f.base, func(p string, _ os.FileInfo, _ error) error {
		if strings.HasSuffix(p, ".tmp") {
			t.Errorf("temp file left: %s", p)
		}
		return nil
	})
}

func TestConcurrentEditsLoseNothing(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	locks := filelock.NewLocks()
	// Two FS over the same host directory share the lock table, as two
	// threads sharing a custom mount do.
	other, err := hostfs.Open([]sandbox.Mount{{Virtual: "/data", Host: f.ws}}, locks)
	must(t, err)
	defer other.Close()
	mine, err := hostfs.Open([]sandbox.Mount{{Virtual: "/data", Host: f.ws}}, locks)
	must(t, err)
	defer mine.Close()
	const n = 40
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fsys := mine
			name := "/data/counter.txt"
			if i%2 == 1 {
				fsys, name = other, "/data/alias/../counter.txt" // another spelling
			}
			err := fsys.Edit(t.Context(), name, func(old []byte, _ bool) ([]byte, error) {
				return append(old, 'x'), nil
			})
			if err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	b, err := os.ReadFile(filepath.Join(f.ws, "counter.txt"))
	must(t, err)
	if len(b) != n {
		t.Fatalf("got %d updates, want %d", len(b), n)
	}
	if locks.Len() != 0 {
		t.Fatalf("lock table keeps %d entries", locks.Len())
	}
}

func TestSyntheticDirs(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	for dir, want := range map[string]string{
		"/":              "mnt",
		"/mnt":           "skills user-data",
		"/mnt/user-data": "outputs workspace",
	} {
		es, err := f.fs.ReadDir(ctx, dir)
		must(t, err)
		var names []string
		for _, e := range es {
			if !e.IsDir() {
				t.Errorf("%s/%s is not a dir", dir, e.Name())
			}
			names = append(names, e.Name())
		}
		if got := strings.Join(names, " "); got != want {
			t.Errorf("ReadDir(%s) = %q, want %q", dir, got, want)
		}
	}
	if _, err := f.fs.Stat(ctx, "/mnt/other"); !errors.Is(err, sandbox.ErrOutsideRoot) {
		t.Errorf("stat /mnt/other: %v", err)
	}
}

func TestValidThreadID(t *testing.T) {
	t.Parallel()
	good := []string{"default", "a", "A.b_c-d", strings.Repeat("x", 128), "0"}
	bad := []string{"", ".", "..", "../x", "a/b", "-a", ".hidden", "_a", "a b", "a\x00", strings.Repeat("x", 129), "é", "a\n"}
	for _, id := range good {
		if err := sandbox.ValidThreadID(id); err != nil {
			t.Errorf("%q refused: %v", id, err)
		}
	}
	for _, id := range bad {
		if err := sandbox.ValidThreadID(id); err == nil {
			t.Errorf("%q accepted", id)
		}
	}
}

// FuzzResolve: whatever the path, an operation either stays inside the
// mappings or fails with a path error naming no host path.
func FuzzResolve(f *testing.F) {
	for _, s := range []string{"a.txt", "../x", "/etc/passwd", "etc/passwd", "abs/key", "rel/key", "alias/r.txt", "/mnt/user-data-x", "\x00", "/mnt/skills/../user-data/workspace/a.txt", "keylink", "loop/x"} {
		f.Add(s)
	}
	fx := newFixture(f)
	f.Fuzz(func(t *testing.T, arg string) {
		name, err := sandbox.Clean(arg)
		if err != nil {
			if !errors.Is(err, sandbox.ErrOutsideRoot) {
				t.Fatalf("Clean(%q): %v", arg, err)
			}
			return
		}
		if again, _ := sandbox.Clean(name); again != name {
			t.Fatalf("Clean not idempotent: %q -> %q -> %q", arg, name, again)
		}
		if err := fx.fs.Edit(t.Context(), name, func(old []byte, _ bool) ([]byte, error) { return append(old, 'F'), nil }); err == nil {
			if ents, _ := os.ReadDir(fx.secret); len(ents) != 1 {
				t.Fatalf("%q wrote into the secret dir", arg)
			}
		}
		if b, _ := os.ReadFile(filepath.Join(fx.secret, "key")); string(b) != "SECRET" {
			t.Fatalf("%q changed the secret", arg)
		}
		r, err := fx.fs.Open(t.Context(), name)
		if err != nil {
			if strings.Contains(err.Error(), fx.base) && !strings.Contains(arg, fx.base) {
				t.Fatalf("error names a host path: %v", err)
			}
			return
		}
		defer r.Close()
		b, _ := io.ReadAll(io.LimitReader(r, 1<<20))
		if strings.Contains(string(b), "SECRET") {
			t.Fatalf("%q reached the secret", arg)
		}
	})
}

// One host file reached through two mappings whose host roots are spelt
// differently — a directory and, through a symlink, its subdirectory — by
// two lock tables on one lock dir, as two server processes are: the lock is
// keyed by the resolved host path, so no update is lost (issue 13.8).
func TestEditLockKeyedByResolvedHostPath(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	data := filepath.Join(base, "data")
	must(t, os.MkdirAll(filepath.Join(data, "sub"), 0o755))
	must(t, os.Symlink(data, filepath.Join(base, "link")))
	lockDir := filepath.Join(base, "locks")
	open := func(m sandbox.Mount) *hostfs.FS {
		locks, err := filelock.NewFileLocks(lockDir)
		must(t, err)
		h, err := hostfs.Open([]sandbox.Mount{m}, locks)
		must(t, err)
		t.Cleanup(func() { h.Close() })
		return h
	}
	whole := open(sandbox.Mount{Virtual: "/mnt/whole", Host: data})
	sub := open(sandbox.Mount{Virtual: "/mnt/sub", Host: filepath.Join(base, "link", "sub")})
	const n = 60
	var wg sync.WaitGroup
	for i := range n {
		fsys, name := whole, "/mnt/whole/sub/counter.txt"
		if i%2 == 1 {
			fsys, name = sub, "/mnt/sub/counter.txt"
		}
		wg.Go(func() {
			must := func(err error) {
				if err != nil {
					t.Error(err)
				}
			}
			must(fsys.Edit(t.Context(), name, func(old []byte, _ bool) ([]byte, error) {
				return append(old, 'x'), nil
			}))
		})
	}
	wg.Wait()
	b, err := os.ReadFile(filepath.Join(data, "sub", "counter.txt"))
	must(t, err)
	if len(b) != n {
		t.Fatalf("got %d updates, want %d", len(b), n)
	}
}

// tempFiles lists the temporary files of atomic writes under dir.
func tempFiles(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.Walk(dir, func(p string, _ os.FileInfo, _ error) error {
		if strings.HasPrefix(filepath.Base(p), ".sandbox-mcp-") {
			out = append(out, p)
		}
		return nil
	})
	return out
}

// A write whose directory is moved, or replaced by a symlink, while it is
// written (bash running beside the file tools) still renames its temporary
// file into that directory and never leaves it behind (issue 13.12).
func TestAtomicWriteParentMovedLeavesNoTemp(t *testing.T) {
	t.Parallel()
	for _, swap := range []string{"moved", "replaced by a symlink"} {
		t.Run(swap, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			w, err := f.fs.Create(t.Context(), sandbox.WorkspaceDir+"/sub/f.txt")
			must(t, err)
			if _, err := w.Write([]byte("new")); err != nil {
				t.Fatal(err)
			}
			must(t, os.Rename(filepath.Join(f.ws, "sub"), filepath.Join(f.ws, "sub2")))
			if swap != "moved" {
				must(t, os.Symlink("real", filepath.Join(f.ws, "sub")))
			}
			if err := w.Close(); err != nil {
				t.Logf("close: %v", err)
			}
			if left := tempFiles(t, f.base); len(left) > 0 {
				t.Errorf("temporary files left: %v", left)
			}
			if b, err := os.ReadFile(filepath.Join(f.ws, "sub2", "f.txt")); err != nil || string(b) != "new" {
				t.Errorf("the write did not land in its directory: %q %v", b, err)
			}
			if _, err := os.Stat(filepath.Join(f.ws, "real", "f.txt")); err == nil {
				t.Errorf("the write followed the symlink that replaced its directory")
			}
		})
	}
}

// Temporary files left by a write that never finished (a server killed
// mid-write) are removed when their directory is next written, once they
// are old and no writer holds them; a live one is kept (issue 13.12).
func TestStaleTempFilesSwept(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	old := time.Now().Add(-time.Hour)
	plant := func(name string) string {
		p := filepath.Join(f.ws, name)
		must(t, os.WriteFile(p, []byte("partial"), 0o600))
		must(t, os.Chtimes(p, old, old))
		return p
	}
	stale := plant(".sandbox-mcp-0123456789abcdef.tmp")
	held := plant(".sandbox-mcp-fedcba9876543210.tmp")
	fresh := filepath.Join(f.ws, ".sandbox-mcp-00112233445566ff.tmp")
	must(t, os.WriteFile(fresh, []byte("partial"), 0o600))
	other := plant(".sandbox-mcp-notes.tmp") // not a name the writer makes
	lf, err := os.Open(held)
	must(t, err)
	defer lf.Close()
	must(t, filelock.Lock(lf)) // a live writer elsewhere
	must(t, f.fs.Edit(t.Context(), sandbox.WorkspaceDir+"/a.txt", func(b []byte, _ bool) ([]byte, error) { return append(b, '!'), nil }))
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale temp file kept: %v", err)
	}
	for _, p := range []string{held, fresh, other} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s removed: %v", filepath.Base(p), err)
		}
	}
}
