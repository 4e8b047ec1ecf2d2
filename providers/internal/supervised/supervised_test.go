//go:build unix

package supervised

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/filelock"
	"github.com/sandbox-mcp/sandbox-mcp/hostfs"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/search"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor/supervisortest"
)

// The boxes run the real daemon, built for this test process.
func TestMain(m *testing.M) {
	os.Exit(supervisortest.Run(m, func(p string) { daemonPath = p }))
}

// daemonPath is the daemon the boxes run.
var daemonPath string

// hostBox is a box whose supervisor runs on the host, in dir (its "box"
// is the host: a path outside the mounts is the host's own), and which
// counts what the Sandbox asks of it.
type hostBox struct {
	dir string

	mu           sync.Mutex
	refuse       error // Enter's answer, when set
	entered      int   // Enter calls that succeeded
	inside       int   // entered and not done
	dials        int
	unresponsive []int // inside, at each Unresponsive
	jobsStarted  int
}

func (b *hostBox) Dial(ctx context.Context) (*supervisor.Conn, error) {
	b.mu.Lock()
	b.dials++
	b.mu.Unlock()
	cmd := exec.Command(daemonPath, "supervise")
	cmd.Dir = b.dir
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + b.dir}
	return supervisor.StartProcess(ctx, cmd, true)
}

func (b *hostBox) Enter(context.Context) (func(), error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.refuse != nil {
		return nil, b.refuse
	}
	b.entered++
	b.inside++
	var once sync.Once
	return func() {
		once.Do(func() {
			b.mu.Lock()
			b.inside--
			b.mu.Unlock()
		})
	}, nil
}

func (b *hostBox) Unresponsive() {
	b.mu.Lock()
	b.unresponsive = append(b.unresponsive, b.inside)
	b.mu.Unlock()
}

// counts is (entered, inside, dials).
func (b *hostBox) counts() (int, int, int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.entered, b.inside, b.dials
}

// newSandbox is a sandbox over a hostBox: the workspace a host directory
// served on the host (host true) or by the supervisor (host false), and
// ro, a host directory mounted read-only at its own path.
func newSandbox(t *testing.T, host bool) (s *Sandbox, b *hostBox, ws, ro string) {
	t.Helper()
	ws, ro = t.TempDir(), t.TempDir()
	b = &hostBox{dir: ws}
	mounts := []sandbox.Mount{{Virtual: sandbox.WorkspaceDir, Host: ws}, {Virtual: ro, Host: ro, ReadOnly: true}}
	cfg := Config{Thread: "t1", Mounts: mounts,
		Command: func(command string) (supervisor.Command, error) {
			return supervisor.Command{Argv: []string{"/bin/sh", "-c", command}, Dir: ws, LogDir: filepath.Join(ws, "jobs")}, nil
		},
		JobStarted: func() { b.mu.Lock(); b.jobsStarted++; b.mu.Unlock() },
	}
	if host {
		h, err := hostfs.Open(mounts[:1], filelock.NewLocks())
		if err != nil {
			t.Fatal(err)
		}
		cfg.Host = h
	}
	s = New(b, cfg)
	t.Cleanup(s.Close)
	return s, b, ws, ro
}

// The thread's directories are served on the host — no supervisor is
// dialed, the box is not entered — and every other path by the box's
// supervisor, each operation inside Enter and its done (a file opened
// holds the box only while it opens).
func TestFilesWhereTheyAre(t *testing.T) {
	t.Parallel()
	s, b, ws, _ := newSandbox(t, true)
	ctx := t.Context()
	fsys := s.FS()
	if err := fsys.Edit(ctx, sandbox.WorkspaceDir+"/a.txt", func([]byte, bool) ([]byte, error) { return []byte("needle\n"), nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := fsys.Stat(ctx, sandbox.WorkspaceDir+"/a.txt"); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(ws, "a.txt")); string(got) != "needle\n" {
		t.Fatalf("the workspace's file on the host: %q", got)
	}
	if n, err := fsys.(interface {
		Glob(context.Context, search.GlobRequest, func(search.Hit) error) (int, error)
	}).Glob(ctx, search.GlobRequest{Root: sandbox.WorkspaceDir, Pattern: "*.txt"}, func(search.Hit) error { return nil }); err != nil || n != 1 {
		t.Fatalf("glob in the workspace: %d, %v", n, err)
	}
	if entered, _, dials := b.counts(); entered != 0 || dials != 0 {
		t.Fatalf("host paths entered the box %d times, dialed %d times", entered, dials)
	}

	other := filepath.Join(t.TempDir(), "b.txt") // the box's own path
	w, err := fsys.Create(ctx, other)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(w, "needle\n")
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := fsys.Open(ctx, other)
	if err != nil {
		t.Fatal(err)
	}
	if _, inside, _ := b.counts(); inside != 0 {
		t.Errorf("an open file of the box holds it (%d inside)", inside)
	}
	got, _ := io.ReadAll(f)
	f.Close()
	if string(got) != "needle\n" {
		t.Fatalf("read back %q", got)
	}
	files := 0
	err = fsys.(interface {
		Grep(context.Context, search.GrepRequest, func(search.FileMatch) error) error
	}).Grep(ctx, search.GrepRequest{Root: filepath.Dir(other), Pattern: "needle", Mode: search.ModeCount}, func(search.FileMatch) error { files++; return nil })
	if err != nil || files != 1 {
		t.Fatalf("grep in the box: %d files, %v", files, err)
	}
	if _, err := fsys.ReadDir(ctx, filepath.Dir(other)); err != nil {
		t.Fatal(err)
	}
	if err := fsys.Remove(ctx, other); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(other); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("removed in the box, still on disk: %v", err)
	}
	if entered, inside, dials := b.counts(); entered != 5 || inside != 0 || dials != 1 {
		t.Fatalf("five operations in the box: entered %d, still inside %d, dialed %d", entered, inside, dials)
	}
}

// A box path is digested in the box; a path Host serves is not (read it
// there): errors.ErrUnsupported, without entering the box.
func TestFilesDigest(t *testing.T) {
	t.Parallel()
	s, b, ws, _ := newSandbox(t, true)
	os.WriteFile(filepath.Join(ws, "a.txt"), []byte("a\nb"), 0o644)
	dg := s.FS().(sandbox.Digester)
	if _, err := dg.Digest(t.Context(), sandbox.WorkspaceDir+"/a.txt", 100); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("a host path: %v, want ErrUnsupported", err)
	}
	if entered, _, dials := b.counts(); entered != 0 || dials != 0 {
		t.Errorf("a host path entered the box %d times, dialed %d times", entered, dials)
	}
	other := filepath.Join(t.TempDir(), "b.txt") // the box's own path
	os.WriteFile(other, []byte("a\nb"), 0o644)
	if d, err := dg.Digest(t.Context(), other, 100); err != nil || !d.Computed || d.Lines != 2 || d.Size != 3 {
		t.Errorf("a box path: %+v, %v", d, err)
	}
	if entered, inside, _ := b.counts(); entered != 1 || inside != 0 {
		t.Errorf("a digest in the box: entered %d, still inside %d", entered, inside)
	}
}

// Without Host the box serves every path, and refuses a write to a
// read-only mount before any I/O.
func TestBoxFilesReadOnlyMount(t *testing.T) {
	t.Parallel()
	s, b, _, ro := newSandbox(t, false)
	err := s.FS().Edit(t.Context(), ro+"/x", func([]byte, bool) ([]byte, error) { return []byte("x"), nil })
	if !errors.Is(err, sandbox.ErrReadOnly) {
		t.Fatalf("a write to a read-only mount: %v", err)
	}
	if _, err := os.Stat(filepath.Join(ro, "x")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the read-only mount was written: %v", err)
	}
	// A thread path is the box's too (here the host's own path, whatever
	// is there): it enters the box.
	s.FS().Stat(t.Context(), sandbox.WorkspaceDir)
	if entered, inside, _ := b.counts(); entered != 2 || inside != 0 {
		t.Fatalf("entered %d, inside %d; want 2, 0", entered, inside)
	}
}

// Exec runs inside Enter; a supervisor that does not end a command (it
// is stopped) gets the box's remedy while the call still holds the box,
// and the next call dials a new one.
func TestExecUnresponsive(t *testing.T) {
	t.Parallel()
	s, b, _, _ := newSandbox(t, true)
	var out bytes.Buffer
	res, err := s.Exec(t.Context(), sandbox.ExecRequest{Command: "echo hi; exit 3", Timeout: time.Minute, Output: &out})
	if err != nil || res.ExitCode != 3 || out.String() != "hi\n" {
		t.Fatalf("%+v %v %q", res, err, out.String())
	}
	_, err = s.Exec(t.Context(), sandbox.ExecRequest{Command: "kill -STOP $PPID; echo done", Timeout: time.Second, Output: &out})
	if !errors.Is(err, supervisor.ErrUnresponsive) {
		t.Fatalf("a stopped supervisor: %v", err)
	}
	out.Reset()
	if _, err := s.Exec(t.Context(), sandbox.ExecRequest{Command: "echo again", Timeout: time.Minute, Output: &out}); err != nil || out.String() != "again\n" {
		t.Fatalf("the next call: %v %q", err, out.String())
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.unresponsive) != 1 || b.unresponsive[0] != 1 || b.inside != 0 || b.entered != 3 || b.dials != 2 {
		t.Fatalf("remedies %v (inside at each), inside %d, entered %d, dials %d; want [1], 0, 3, 2", b.unresponsive, b.inside, b.entered, b.dials)
	}
}

// Jobs go through Enter too; JobStarted hears of every command that may
// have become a job.
func TestJobs(t *testing.T) {
	t.Parallel()
	s, b, ws, _ := newSandbox(t, true)
	ctx := t.Context()
	j, err := s.StartJob(ctx, sandbox.JobRequest{Command: "echo job"})
	if err != nil {
		t.Fatal(err)
	}
	calls := 1
	o, err := s.JobOutput(ctx, j.ID, 0, 10*time.Second)
	for calls++; err == nil && o.Job.State == sandbox.JobRunning; calls++ {
		o, err = s.JobOutput(ctx, j.ID, 0, 10*time.Second)
	}
	if err != nil || string(o.Data) != "job\n" {
		t.Fatalf("%q %v", o.Data, err)
	}
	if _, err := os.Stat(filepath.Join(ws, "jobs", j.ID+".log")); err != nil {
		t.Errorf("the job's log is not in Command's LogDir: %v", err)
	}
	var out bytes.Buffer
	res, err := s.Exec(ctx, sandbox.ExecRequest{Command: "sleep 30", Timeout: time.Minute, YieldAfter: 100 * time.Millisecond, Output: &out})
	if err != nil || res.Job == "" {
		t.Fatalf("a yielded command: %+v %v", res, err)
	}
	if _, err := s.KillJob(ctx, res.Job, "KILL"); err != nil {
		t.Fatal(err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if calls += 2; b.jobsStarted != 2 || b.inside != 0 || b.entered != calls {
		t.Fatalf("jobs started %d, inside %d, entered %d; want 2, 0, %d", b.jobsStarted, b.inside, b.entered, calls)
	}
}

// A box that refuses calls (local: bash is off) refuses commands and
// jobs with its own error, never the thread's files on the host.
func TestEnterRefused(t *testing.T) {
	t.Parallel()
	s, b, _, _ := newSandbox(t, true)
	refused := errors.New("no calls here")
	b.refuse = refused
	ctx := t.Context()
	if _, err := s.Exec(ctx, sandbox.ExecRequest{Command: "true", Timeout: time.Minute, Output: io.Discard}); !errors.Is(err, refused) {
		t.Errorf("Exec: %v", err)
	}
	if _, err := s.StartJob(ctx, sandbox.JobRequest{Command: "true"}); !errors.Is(err, refused) {
		t.Errorf("StartJob: %v", err)
	}
	if _, err := s.Jobs(ctx); !errors.Is(err, refused) {
		t.Errorf("Jobs: %v", err)
	}
	if _, err := s.FS().Stat(ctx, "/etc"); !errors.Is(err, refused) {
		t.Errorf("a box path: %v", err)
	}
	if _, err := s.FS().Stat(ctx, sandbox.WorkspaceDir); err != nil {
		t.Errorf("the workspace, on the host: %v", err)
	}
	if _, _, dials := b.counts(); dials != 0 {
		t.Errorf("%d dials", dials)
	}
}
