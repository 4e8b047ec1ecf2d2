//go:build linux

package daemon

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	client "github.com/sandbox-mcp/sandbox-mcp/supervisor"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor/internal/procstat"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor/wire"
)

func startJob(t *testing.T, l *client.Link, script string, stdin bool) sandbox.JobInfo {
	t.Helper()
	j, err := l.StartJob(t.Context(), bash(script, ""), sandbox.JobRequest{Command: script, Stdin: stdin})
	if err != nil {
		t.Fatal(err)
	}
	if !wire.ValidJobID(j.ID) || j.PID <= 0 || j.State != sandbox.JobRunning || j.Command != script || j.StartedAt.IsZero() {
		t.Fatalf("job %+v", j)
	}
	return j
}

// bash is how a job runs script with bash, its log in logDir ("": none).
func bash(script, logDir string) client.Command {
	return client.Command{Argv: []string{"/bin/bash", "-c", script}, Dir: "/", LogDir: logDir}
}

// waitFor reads a job's output from offset until it holds want (or the
// job ended), and returns all it read.
func waitFor(t *testing.T, l *client.Link, id string, offset int64, want string) (string, sandbox.JobOutput) {
	t.Helper()
	var got strings.Builder
	for range 200 {
		o, err := l.JobOutput(t.Context(), id, offset, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		got.Write(o.Data)
		offset = o.NextOffset
		if (want != "" && strings.Contains(got.String(), want)) || (o.Job.State != sandbox.JobRunning && len(o.Data) == 0) {
			return got.String(), o
		}
	}
	t.Fatalf("job %s: %q, no %q", id, got.String(), want)
	return "", sandbox.JobOutput{}
}

func TestJobOutputWait(t *testing.T) {
	l := jobLink(t, listen(t))
	j := startJob(t, l, "echo a; sleep 0.3; printf 'h\\xc3\\xa9llo \\xe2\\x82\\xac\\n'; exit 3", false)
	out, o := waitFor(t, l, j.ID, 0, "")
	if out != "a\nhéllo €\n" || o.Job.State != sandbox.JobExited || o.Job.Code != 3 || o.Job.EndedAt.IsZero() {
		t.Fatalf("%q %+v", out, o)
	}
	// Offsets are characters.
	if o.NextOffset != int64(utf8.RuneCountInString(out)) {
		t.Fatalf("next offset %d for %q", o.NextOffset, out)
	}
	o, err := l.JobOutput(t.Context(), j.ID, 3, 0)
	if err != nil || string(o.Data) != "éllo €\n" || o.Offset != 3 || o.NextOffset != 10 || o.Dropped != 0 {
		t.Fatalf("from 3: %q %+v %v", o.Data, o, err)
	}
	jobs, err := l.Jobs(t.Context())
	if err != nil || len(jobs) != 1 || jobs[0].ID != j.ID || jobs[0].State != sandbox.JobExited || !strings.HasPrefix(jobs[0].Command, "echo a;") {
		t.Fatalf("%+v %v", jobs, err)
	}
	// Unknown and malformed ids.
	if _, err := l.JobOutput(t.Context(), "j999", 0, 0); !errors.Is(err, sandbox.ErrNoJob) {
		t.Fatalf("unknown: %v", err)
	}
	for _, id := range []string{"", "x1", "j01", "j", "j1/../", "j-1"} {
		if _, err := l.KillJob(t.Context(), id, "TERM"); !errors.Is(err, sandbox.ErrNoJob) {
			t.Fatalf("%q: %v", id, err)
		}
	}
}

// The shown cursor is the job's: a second replica is not shown again what
// the first was.
func TestJobShownShared(t *testing.T) {
	dial := listen(t)
	a, b := jobLink(t, dial), jobLink(t, dial)
	j := startJob(t, a, "echo one; read x; echo two; read y", true)
	if out, _ := waitFor(t, a, j.ID, sandbox.Unshown, "one\n"); out != "one\n" {
		t.Fatalf("a: %q", out)
	}
	if _, err := b.JobInput(t.Context(), j.ID, []byte("\n"), false); err != nil {
		t.Fatal(err)
	}
	if out, _ := waitFor(t, b, j.ID, sandbox.Unshown, "two\n"); out != "two\n" {
		t.Fatalf("b: %q", out)
	}
	o, err := a.JobOutput(t.Context(), j.ID, sandbox.Unshown, 100*time.Millisecond)
	if err != nil || len(o.Data) != 0 || o.NextOffset != 8 {
		t.Fatalf("a again: %q %+v %v", o.Data, o, err)
	}
	if _, err := a.JobInput(t.Context(), j.ID, nil, true); err != nil {
		t.Fatal(err)
	}
	if _, o := waitFor(t, a, j.ID, sandbox.Unshown, ""); o.Job.State != sandbox.JobExited {
		t.Fatalf("%+v", o)
	}
}

// A job outlives the channel that started it; another replica reads and
// kills it.
func TestJobSurvivesChannel(t *testing.T) {
	dial := listen(t)
	a := jobLink(t, dial)
	j := startJob(t, a, "echo started; exec sleep 300", false)
	waitFor(t, a, j.ID, 0, "started")
	a.Close()
	b := jobLink(t, dial)
	c, err := b.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if h := c.Hello(); h.Jobs != 1 || h.Busy != 1 {
		t.Fatalf("hello %+v", h)
	}
	jobs, err := b.Jobs(t.Context())
	if err != nil || len(jobs) != 1 || jobs[0].State != sandbox.JobRunning {
		t.Fatalf("%+v %v", jobs, err)
	}
	if out, _ := waitFor(t, b, j.ID, 0, "started"); out != "started\n" {
		t.Fatalf("%q", out)
	}
	if _, err := b.KillJob(t.Context(), j.ID, "HUP"); err == nil {
		t.Fatal("a signal not offered was sent")
	}
	if _, err := b.KillJob(t.Context(), j.ID, "TERM"); err != nil {
		t.Fatal(err)
	}
	_, o := waitFor(t, b, j.ID, sandbox.Unshown, "")
	if o.Job.State != sandbox.JobKilled || o.Job.Signal != "TERM" || o.Job.Code != 128+15 {
		t.Fatalf("%+v", o.Job)
	}
}

// TERM goes to the job's whole process group: a shell that traps it still
// ends, because its child got it too.
func TestJobKillGroup(t *testing.T) {
	l := jobLink(t, listen(t))
	j := startJob(t, l, "trap 'echo got-term' TERM; sleep 300 & echo child $!; wait; wait; echo after", false)
	out, _ := waitFor(t, l, j.ID, 0, "child ")
	f := strings.Fields(out)
	child, err := strconv.Atoi(f[len(f)-1])
	if err != nil {
		t.Fatalf("%q", out)
	}
	if _, err := l.KillJob(t.Context(), j.ID, "TERM"); err != nil {
		t.Fatal(err)
	}
	out, o := waitFor(t, l, j.ID, 0, "")
	if o.Job.State != sandbox.JobExited || !strings.Contains(out, "got-term") || !strings.Contains(out, "after") {
		t.Fatalf("%q %+v", out, o.Job)
	}
	for range 500 {
		if syscall.Kill(child, 0) != nil {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("child %d lives", child)
}

func TestJobInput(t *testing.T) {
	l := jobLink(t, listen(t))
	// bash's read -p prompts only on a terminal; a prompt on a pipe is printf's.
	j := startJob(t, l, `printf 'name? '; read n; echo "hello $n"`, true)
	waitFor(t, l, j.ID, sandbox.Unshown, "name? ")
	if _, err := l.JobInput(t.Context(), j.ID, []byte("bob\n"), false); err != nil {
		t.Fatal(err)
	}
	out, o := waitFor(t, l, j.ID, sandbox.Unshown, "")
	if out != "hello bob\n" || o.Job.State != sandbox.JobExited {
		t.Fatalf("%q %+v", out, o.Job)
	}
	if _, err := l.JobInput(t.Context(), j.ID, []byte("x"), false); !errors.Is(err, sandbox.ErrJobEnded) {
		t.Fatalf("after the end: %v", err)
	}
	k := startJob(t, l, "exec sleep 300", false)
	if _, err := l.JobInput(t.Context(), k.ID, []byte("x"), false); !errors.Is(err, sandbox.ErrJobNoInput) {
		t.Fatalf("no stdin: %v", err)
	}
	// A job that does not read: the write gives up, the channel goes on.
	s := startJob(t, l, "exec sleep 300", true)
	big := make([]byte, wire.MaxJobInput)
	var err error
	for range 4 {
		if _, err = l.JobInput(t.Context(), s.ID, big, false); err != nil {
			break
		}
	}
	if !errors.Is(err, sandbox.ErrJobBlocked) {
		t.Fatalf("blocked: %v", err)
	}
	if _, err := l.JobInput(t.Context(), s.ID, nil, true); err != nil {
		t.Fatal(err)
	}
	if _, err := l.JobInput(t.Context(), s.ID, []byte("x"), false); !errors.Is(err, sandbox.ErrJobNoInput) {
		t.Fatalf("closed: %v", err)
	}
	for _, id := range []string{k.ID, s.ID} {
		if _, err := l.KillJob(t.Context(), id, "KILL"); err != nil {
			t.Fatal(err)
		}
	}
}

func TestJobLimit(t *testing.T) {
	l := jobLink(t, listen(t))
	cmd := client.Command{Argv: []string{"sleep", "300"}, Dir: "/"}
	req := sandbox.JobRequest{Command: "sleep 300", JobLimits: sandbox.JobLimits{MaxJobs: 16}}
	var ids []string
	for range 16 {
		j, err := l.StartJob(t.Context(), cmd, req)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, j.ID)
	}
	_, err := l.StartJob(t.Context(), cmd, req)
	if !errors.Is(err, sandbox.ErrJobLimit) || err.Error() != "too many jobs running: 16 running, at most 16" {
		t.Fatalf("17th: %v", err)
	}
	if ids[15] != "j16" {
		t.Fatalf("ids %v", ids)
	}
	for _, id := range ids {
		if _, err := l.KillJob(t.Context(), id, "KILL"); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range ids {
		waitFor(t, l, id, sandbox.Unshown, "")
	}
	j, err := l.StartJob(t.Context(), cmd, req)
	if err != nil || j.ID != "j17" {
		t.Fatalf("after: %+v %v", j, err)
	}
	l.KillJob(t.Context(), j.ID, "KILL")
}

// The ring keeps the last MiB and says what it dropped; the log keeps
// the first LogMaxBytes and one line saying so.
func TestJobRingAndLog(t *testing.T) {
	l := jobLink(t, listen(t))
	logDir := filepath.Join(t.TempDir(), "a", "b")
	const n = 3_000_000
	j, err := l.StartJob(t.Context(), bash("head -c 3000000 /dev/zero | tr '\\0' x", logDir), sandbox.JobRequest{JobLimits: sandbox.JobLimits{LogMaxBytes: 1000}})
	if err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(logDir, j.ID+".log")
	_, o := waitFor(t, l, j.ID, sandbox.Unshown, "")
	if o.Job.State != sandbox.JobExited {
		t.Fatalf("%+v", o.Job)
	}
	o, err = l.JobOutput(t.Context(), j.ID, 0, 0)
	if err != nil || len(o.Data) != wire.JobRing || o.Dropped != n-wire.JobRing || o.Offset != n-wire.JobRing || o.NextOffset != n {
		t.Fatalf("%d bytes %+v %v", len(o.Data), o, err)
	}
	b, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	body, marker, ok := strings.Cut(string(b), "\n")
	if !ok || body != strings.Repeat("x", 1000) || !strings.Contains(marker, "truncated") || strings.Count(string(b), "\n") != 2 {
		t.Fatalf("log %d bytes: %q", len(b), wire.CapText(string(b[min(len(b), 990):]), 200))
	}
	if fi, _ := os.Stat(logPath); fi.Mode().Perm() != 0o444 { // ended: read-only, whatever the umask
		t.Fatalf("log mode %v", fi.Mode())
	}
	// A symlink planted under the next log's name is not written through:
	// the job takes the id after it.
	passwd, _ := os.ReadFile("/etc/passwd")
	os.Symlink("/etc/passwd", filepath.Join(logDir, "j2.log"))
	k, err := l.StartJob(t.Context(), bash("echo planted", logDir), sandbox.JobRequest{})
	if err != nil || k.ID != "j3" {
		t.Fatalf("planted log: %+v %v", k, err)
	}
	waitFor(t, l, k.ID, sandbox.Unshown, "")
	if b, _ := os.ReadFile("/etc/passwd"); string(b) != string(passwd) {
		t.Fatal("the job wrote through a planted symlink")
	}
	// A log that cannot be made refuses the job.
	notDir := filepath.Join(logDir, "file")
	os.WriteFile(notDir, nil, 0o644)
	if _, err := l.StartJob(t.Context(), bash("true", notDir), sandbox.JobRequest{}); err == nil || !strings.Contains(err.Error(), "job log") {
		t.Fatalf("a log dir that is a file: %v", err)
	}
}

// The orphan sweep after a command leaves a running job's processes
// alone, those outside its leader's children too.
func TestJobOrphanSweep(t *testing.T) {
	l := jobLink(t, listen(t))
	j := startJob(t, l, "(sleep 300 & echo orphan $!); echo ready; exec sleep 300", false)
	out, _ := waitFor(t, l, j.ID, 0, "ready")
	f := strings.Fields(out)
	orphan, err := strconv.Atoi(f[1])
	if err != nil {
		t.Fatalf("%q", out)
	}
	c, err := l.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	// A command's end sweeps (before its exit is sent).
	if _, res, err := sh(c, t.Context(), "true", 0); err != nil || res.ExitCode != 0 {
		t.Fatal(res, err)
	}
	if st := procstat.Fields(orphan); len(st) == 0 || st[0] == "Z" {
		t.Fatalf("the job's orphan %d was killed", orphan)
	}
	jobs, err := l.Jobs(t.Context())
	if err != nil || jobs[0].State != sandbox.JobRunning {
		t.Fatalf("%+v %v", jobs, err)
	}
	if _, err := l.KillJob(t.Context(), j.ID, "KILL"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, l, j.ID, sandbox.Unshown, "")
}

// A foreground command still running at YieldAfter goes on as a job.
func TestJobYieldAfter(t *testing.T) {
	l := jobLink(t, listen(t))
	c, err := l.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	logDir := t.TempDir()
	var out syncBuf
	res, err := c.Exec(t.Context(), client.ExecRequest{Argv: []string{"/bin/bash", "-c", "echo start; sleep 2; echo done"}, Dir: "/", Output: &out,
		YieldAfter: 300 * time.Millisecond, LogDir: logDir})
	if err != nil || res.Job == "" || out.String() != "start\n" {
		t.Fatalf("%+v %q %v", res, out.String(), err)
	}
	got, o := waitFor(t, l, res.Job, sandbox.Unshown, "")
	if got != "done\n" || o.Job.State != sandbox.JobExited || o.Job.Code != 0 {
		t.Fatalf("%q %+v", got, o.Job)
	}
	o, err = l.JobOutput(t.Context(), res.Job, 0, 0)
	if err != nil || string(o.Data) != "start\ndone\n" {
		t.Fatalf("%q %v", o.Data, err)
	}
	if b, err := os.ReadFile(filepath.Join(logDir, res.Job+".log")); err != nil || string(b) != "start\ndone\n" {
		t.Fatalf("log %q %v", b, err)
	}
	// A command that ends first, and one that finds MaxJobs running, end
	// in the foreground.
	out = syncBuf{}
	res, err = c.Exec(t.Context(), client.ExecRequest{Argv: []string{"/bin/bash", "-c", "echo quick"}, Dir: "/", Output: &out, YieldAfter: 10 * time.Second})
	if err != nil || res.Job != "" || out.String() != "quick\n" {
		t.Fatalf("%+v %q %v", res, out.String(), err)
	}
	j := startJob(t, l, "exec sleep 300", false)
	out = syncBuf{}
	res, err = c.Exec(t.Context(), client.ExecRequest{Argv: []string{"/bin/bash", "-c", "sleep 0.6; echo fg"}, Dir: "/", Output: &out,
		YieldAfter: 100 * time.Millisecond, Jobs: sandbox.JobLimits{MaxJobs: 1}})
	if err != nil || res.Job != "" || res.ExitCode != 0 || out.String() != "fg\n" {
		t.Fatalf("at the limit: %+v %q %v", res, out.String(), err)
	}
	l.KillJob(t.Context(), j.ID, "KILL")
}

// Ended jobs are kept, the last wire.MaxJobsEnded of them; ids go on.
// A start canceled while it was asked leaves no job running: the
// supervisor starts it all the same (a kill stops a request's wait, never
// a job), and nobody was told its id to stop it. The cancel lands at
// times from 0 to 2 ms, until three starts were canceled in flight.
func TestJobStartCanceledLeavesNoJobRunning(t *testing.T) {
	l := jobLink(t, listen(t))
	if _, err := l.Jobs(t.Context()); err != nil { // the channel, dialed
		t.Fatal(err)
	}
	canceled := 0
	for i := 0; canceled < 3; i++ {
		if i == 400 {
			t.Fatalf("in 400 starts, %d canceled in flight: the test cannot tell", canceled)
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Duration(i%40)*50*time.Microsecond)
		j, err := l.StartJob(ctx, client.Command{Argv: []string{"sleep", "300"}, Dir: "/"}, sandbox.JobRequest{})
		cancel()
		switch {
		case err == nil: // the answer came first: a job started, and named
			if _, err := l.KillJob(t.Context(), j.ID, "KILL"); err != nil {
				t.Fatal(err)
			}
		case !errors.Is(err, context.DeadlineExceeded):
			t.Fatal(err)
		case i%40 > 0:
			canceled++
		}
	}
	var running []string
	for deadline := time.Now().Add(10 * time.Second); ; {
		jobs, err := l.Jobs(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		running = running[:0]
		for _, j := range jobs {
			if j.State == sandbox.JobRunning {
				running = append(running, j.ID)
			}
		}
		if len(running) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("jobs %v of canceled starts still run after 10 s", running)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestJobsEndedKept(t *testing.T) {
	l := jobLink(t, listen(t))
	for range wire.MaxJobsEnded + 6 {
		if _, err := l.StartJob(t.Context(), client.Command{Argv: []string{"true"}, Dir: "/"}, sandbox.JobRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	var jobs []sandbox.JobInfo
	// Until every `true` has ended: seconds under -race on a busy machine
	// (5 s were once not enough in CI).
	for deadline := time.Now().Add(60 * time.Second); ; {
		var err error
		if jobs, err = l.Jobs(t.Context()); err != nil {
			t.Fatal(err)
		}
		running := 0
		for _, j := range jobs {
			if j.State == sandbox.JobRunning {
				running++
			}
		}
		// Never more ended jobs than are kept, at any moment: a job's end
		// and the trim it calls for are one step (they were two, and a
		// list between them showed one more).
		if ended := len(jobs) - running; ended > wire.MaxJobsEnded {
			t.Fatalf("a list showed %d ended jobs, more than the %d kept", ended, wire.MaxJobsEnded)
		}
		if running == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of the jobs still run after 60 s", running)
		}
		time.Sleep(time.Millisecond)
	}
	if len(jobs) != wire.MaxJobsEnded || jobs[len(jobs)-1].ID != "j70" {
		t.Fatalf("%d jobs, the last %s", len(jobs), jobs[len(jobs)-1].ID)
	}
	kept := map[string]bool{}
	for _, j := range jobs {
		kept[j.ID] = true
	}
	for n := range uint64(70) {
		if id := wire.JobID(n + 1); !kept[id] {
			if _, err := l.JobOutput(t.Context(), id, 0, 0); !errors.Is(err, sandbox.ErrNoJob) {
				t.Fatalf("dropped job %s: %v", id, err)
			}
		}
	}
}

// A cancelled wait ends the request, never the job, and shows nothing.
func TestJobOutputCancel(t *testing.T) {
	l := jobLink(t, listen(t))
	j := startJob(t, l, "echo early; read x; echo late", true)
	waitFor(t, l, j.ID, 0, "early")
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	if _, err := l.JobOutput(ctx, j.ID, sandbox.Unshown, 30*time.Second); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%v", err)
	}
	if _, err := l.JobInput(t.Context(), j.ID, []byte("\n"), false); err != nil {
		t.Fatal(err)
	}
	if out, o := waitFor(t, l, j.ID, sandbox.Unshown, ""); out != "late\n" || o.Job.State != sandbox.JobExited {
		t.Fatalf("%q %+v", out, o.Job)
	}
}

// LogDir names each job's log by its id, a started job's and a yielded
// command's alike.
func TestJobLogDir(t *testing.T) {
	l := jobLink(t, listen(t))
	dir := filepath.Join(t.TempDir(), "jobs")
	j, err := l.StartJob(t.Context(), bash("echo one", dir), sandbox.JobRequest{})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, l, j.ID, sandbox.Unshown, "")
	c, err := l.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Exec(t.Context(), client.ExecRequest{Argv: []string{"/bin/bash", "-c", "echo two; sleep 1"}, Dir: "/", Output: &syncBuf{},
		YieldAfter: 200 * time.Millisecond, LogDir: dir})
	if err != nil || res.Job == "" || res.Job == j.ID {
		t.Fatalf("%+v %v", res, err)
	}
	waitFor(t, l, res.Job, sandbox.Unshown, "")
	for id, want := range map[string]string{j.ID: "one\n", res.Job: "two\n"} {
		if b, err := os.ReadFile(filepath.Join(dir, id+".log")); err != nil || string(b) != want {
			t.Fatalf("log of %s: %q %v", id, b, err)
		}
	}
	// A log dir that is not clean refuses the job.
	if _, err := l.StartJob(t.Context(), client.Command{Argv: []string{"true"}, LogDir: "rel/dir"}, sandbox.JobRequest{}); err == nil || !strings.Contains(err.Error(), "job log") {
		t.Fatalf("relative log dir: %v", err)
	}
}
