//go:build linux

package daemon

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	client "github.com/sandbox-mcp/sandbox-mcp/supervisor"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor/wire"
)

// Two supervisors of one thread's files (two server processes on one
// state dir, each with its own supervisor: the local provider) hand out
// ids unique between them, and no job's log overwrites another's (#24
// item 6).
func TestJobIDsAcrossSupervisors(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "jobs")
	a, b := jobLink(t, listen(t)), jobLink(t, listen(t))
	start := func(l *client.Link, out string) sandbox.JobInfo {
		t.Helper()
		j, err := l.StartJob(t.Context(), bash("echo "+out+"; exec sleep 300", dir), sandbox.JobRequest{})
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, l, j.ID, 0, out)
		t.Cleanup(func() { l.KillJob(context.Background(), j.ID, "KILL") }) // t.Context() is canceled by then
		return j
	}
	logs := map[string]string{}
	var ids []string
	for i, l := range []*client.Link{a, b, a, b, b, a} {
		out := "out" + string(rune('0'+i))
		j := start(l, out)
		if slices.Contains(ids, j.ID) {
			t.Fatalf("job %d got %s again (ids so far %v)", i, j.ID, ids)
		}
		ids = append(ids, j.ID)
		logs[j.ID] = out + "\n"
	}
	for id, want := range logs {
		if b, err := os.ReadFile(filepath.Join(dir, id+".log")); err != nil || string(b) != want {
			t.Errorf("log of %s: %q %v, want %q", id, b, err, want)
		}
	}
	// A log no supervisor knows of (another's, planted) is never
	// overwritten: its id is skipped.
	next := wire.JobID(uint64(len(ids) + 1))
	planted := filepath.Join(dir, next+".log")
	if err := os.WriteFile(planted, []byte("mine\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if j := start(a, "after"); j.ID == next {
		t.Errorf("the planted %s.log's id was handed out", next)
	}
	if b, _ := os.ReadFile(planted); string(b) != "mine\n" {
		t.Errorf("the planted log was overwritten: %q", b)
	}
}

// Ended jobs' logs count in the bound of the thread's saved results, with
// the saved outputs beside them: past it the oldest go first — a stale
// log no supervisor writes, an old output, the logs of the jobs that
// ended first. A running job's log neither counts nor goes; an ended
// job's log is read-only (#24 item 7: six jobs' logs went past the
// bound).
func TestJobLogsBounded(t *testing.T) {
	results := t.TempDir()
	dir := filepath.Join(results, "jobs")
	os.Mkdir(dir, 0o755)
	old := time.Now().Add(-time.Hour)
	for name, size := range map[string]int{"old.txt": 100_000, "jobs/j50.log": 200_000} {
		p := filepath.Join(results, name)
		os.WriteFile(p, make([]byte, size), 0o644)
		os.Chtimes(p, old, old)
	}
	os.Chtimes(filepath.Join(dir, "j50.log"), old.Add(-time.Hour), old.Add(-time.Hour))
	const bound = 1 << 20
	lim := sandbox.JobLimits{SavedMaxBytes: bound, SavedMaxFiles: 20}
	l := jobLink(t, listen(t))
	run := func(script string) sandbox.JobInfo {
		t.Helper()
		j, err := l.StartJob(t.Context(), bash(script, dir), sandbox.JobRequest{JobLimits: lim})
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	r := run(`head -c 400000 /dev/zero | tr '\0' r; echo; exec sleep 300`)
	waitFor(t, l, r.ID, 400_000, "\n")
	var ended []string
	for range 5 {
		j := run(`head -c 300000 /dev/zero | tr '\0' x`)
		waitFor(t, l, j.ID, sandbox.Unshown, "")
		ended = append(ended, j.ID)
	}
	// Their end's pruning runs once the job is seen ended: wait for it.
	size := func() (n int, total int64, names []string) {
		for _, d := range []string{results, dir} {
			es, _ := os.ReadDir(d)
			for _, e := range es {
				if fi, err := e.Info(); err == nil && fi.Mode().IsRegular() && e.Name() != lastIDFile && e.Name() != r.ID+".log" {
					n++
					total += fi.Size()
					names = append(names, e.Name())
				}
			}
		}
		return
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, total, _ := size(); total > bound && time.Now().Before(deadline); _, total, _ = size() {
		time.Sleep(20 * time.Millisecond)
	}
	_, total, names := size()
	if total > bound {
		t.Errorf("saved results of %d bytes, over the bound of %d: %v", total, bound, names)
	}
	for _, n := range []string{ended[2] + ".log", ended[3] + ".log", ended[4] + ".log"} {
		if !slices.Contains(names, n) {
			t.Errorf("%s was removed (left: %v)", n, names)
		}
	}
	for _, n := range []string{"old.txt", "j50.log", ended[0] + ".log", ended[1] + ".log"} {
		if slices.Contains(names, n) {
			t.Errorf("%s was kept, not the newer ones (left: %v)", n, names)
		}
	}
	for _, id := range ended[3:] {
		if fi, err := os.Stat(filepath.Join(dir, id+".log")); err != nil || fi.Mode().Perm() != 0o444 {
			t.Errorf("the ended %s's log: %v %v, want read-only", id, fi, err)
		}
	}
	if fi, err := os.Stat(filepath.Join(dir, r.ID+".log")); err != nil || fi.Mode().Perm() != 0o644 || fi.Size() != 400_001 {
		t.Errorf("the running %s's log: %v %v", r.ID, fi, err)
	}

	// The file count too: a job that ends past it removes the oldest.
	lim.SavedMaxFiles = 3
	j := run(`echo small`)
	waitFor(t, l, j.ID, sandbox.Unshown, "")
	deadline = time.Now().Add(10 * time.Second)
	for n, _, _ := size(); n > 3 && time.Now().Before(deadline); n, _, _ = size() {
		time.Sleep(20 * time.Millisecond)
	}
	if n, _, names := size(); n != 3 || !slices.Contains(names, j.ID+".log") || !slices.Contains(names, ended[4]+".log") {
		t.Errorf("with at most 3 files: %v", names)
	}
	if _, err := os.Stat(filepath.Join(dir, r.ID+".log")); err != nil {
		t.Errorf("the running job's log: %v", err)
	}
	l.KillJob(t.Context(), r.ID, "KILL")
}

// A counter or a log planted at the top of the ids, or a counter that is
// not a file, stops no job.
func TestJobIDsPlanted(t *testing.T) {
	for name, plant := range map[string]func(dir string){
		"high": func(dir string) {
			os.WriteFile(filepath.Join(dir, lastIDFile), []byte("999999999\n"), 0o644)
			os.WriteFile(filepath.Join(dir, "j999999999.log"), nil, 0o644)
		},
		"garbage":   func(dir string) { os.WriteFile(filepath.Join(dir, lastIDFile), []byte("-1x\n\x00"), 0o644) },
		"directory": func(dir string) { os.Mkdir(filepath.Join(dir, lastIDFile), 0o755) },
		"symlink":   func(dir string) { os.Symlink("/etc/passwd", filepath.Join(dir, lastIDFile)) },
		"fifo":      func(dir string) { syscall.Mkfifo(filepath.Join(dir, lastIDFile), 0o644) },
	} {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "jobs")
			os.Mkdir(dir, 0o755)
			plant(dir)
			l := jobLink(t, listen(t))
			var ids []string
			for range 2 {
				j, err := l.StartJob(t.Context(), client.Command{Argv: []string{"true"}, Dir: "/", LogDir: dir}, sandbox.JobRequest{})
				if err != nil {
					t.Fatal(err)
				}
				if !wire.ValidJobID(j.ID) || len(j.ID) > 11 || slices.Contains(ids, j.ID) {
					t.Fatalf("id %q after %v", j.ID, ids)
				}
				ids = append(ids, j.ID)
			}
		})
	}
}
