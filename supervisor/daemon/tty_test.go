//go:build linux

package daemon

import (
	"errors"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	client "github.com/sandbox-mcp/sandbox-mcp/supervisor"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor/internal/procstat"
)

// startTTY starts script as a terminal job of size sz.
func startTTY(t *testing.T, l *client.Link, script string, sz sandbox.TermSize) sandbox.JobInfo {
	t.Helper()
	j, err := l.StartJob(t.Context(), bash(script, ""), sandbox.JobRequest{Command: script, TTY: &sz})
	if err != nil {
		t.Fatal(err)
	}
	if j.TTY == nil || *j.TTY != sz {
		t.Fatalf("job %+v: no terminal of %v", j, sz)
	}
	return j
}

// waitMatch reads a job's output from its start until re matches it.
func waitMatch(t *testing.T, l *client.Link, id string, re *regexp.Regexp) []string {
	t.Helper()
	var out strings.Builder
	var offset int64
	for range 200 {
		o, err := l.JobOutput(t.Context(), id, offset, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		out.Write(o.Data)
		offset = o.NextOffset
		if m := re.FindStringSubmatch(out.String()); m != nil {
			return m
		}
		if o.Job.State != sandbox.JobRunning && len(o.Data) == 0 {
			break
		}
	}
	t.Fatalf("job %s: %q, no match of %s", id, out.String(), re)
	return nil
}

// A terminal job's command has the terminal as stdin, stdout and stderr
// and as its controlling terminal, of the size asked, TERM=xterm-256color;
// what is typed reaches it (echoed by the terminal, a CR read as a line's
// end); a resize changes what stty sees and the job's state.
func TestJobTTY(t *testing.T) {
	l := jobLink(t, listen(t))
	j := startTTY(t, l, `for fd in 0 1 2; do [ -t $fd ] && printf 'tty%s ' $fd; done; echo; `+
		`[ "$(ps -o tty= -p $$)" != "?" ] && echo ctty; [ $$ = "$(ps -o sid= -p $$ | tr -d ' ')" ] && echo leader; `+
		`echo "TERM=$TERM"; stty size; while read -r line; do echo "got:$line"; stty size; done; echo eof`, sandbox.TermSize{Cols: 80, Rows: 24})
	out, _ := waitFor(t, l, j.ID, 0, "24 80\r\n")
	for _, want := range []string{"tty0 tty1 tty2 \r\n", "ctty\r\n", "leader\r\n", "TERM=xterm-256color\r\n", "24 80\r\n"} {
		if !strings.Contains(out, want) {
			t.Fatalf("%q: no %q", out, want)
		}
	}
	info, err := l.ResizeJob(t.Context(), j.ID, sandbox.TermSize{Cols: 100, Rows: 30})
	if err != nil || info.TTY == nil || *info.TTY != (sandbox.TermSize{Cols: 100, Rows: 30}) {
		t.Fatalf("resize: %+v %v", info, err)
	}
	if _, err := l.JobInput(t.Context(), j.ID, []byte("hello\r"), false); err != nil {
		t.Fatal(err)
	}
	// The terminal echoes the line, then the command answers.
	if out, _ := waitFor(t, l, j.ID, sandbox.Unshown, "30 100\r\n"); !strings.Contains(out, "hello\r\ngot:hello\r\n") {
		t.Fatalf("after input: %q", out)
	}
	jobs, err := l.Jobs(t.Context())
	if err != nil || len(jobs) != 1 || jobs[0].TTY == nil || jobs[0].TTY.Cols != 100 {
		t.Fatalf("list: %+v %v", jobs, err)
	}
	// close types ^D: read sees the end of input; the terminal stays.
	if _, err := l.JobInput(t.Context(), j.ID, nil, true); err != nil {
		t.Fatal(err)
	}
	out, o := waitFor(t, l, j.ID, sandbox.Unshown, "")
	if !strings.Contains(out, "eof\r\n") || o.Job.State != sandbox.JobExited || o.Job.Code != 0 || o.Job.TTY == nil {
		t.Fatalf("after ^D: %q %+v", out, o.Job)
	}
	if _, err := l.ResizeJob(t.Context(), j.ID, sandbox.TermSize{Cols: 80, Rows: 24}); !errors.Is(err, sandbox.ErrJobEnded) {
		t.Fatalf("resize of an ended job: %v", err)
	}
}

// A job without a terminal refuses a resize; a size out of bounds is
// refused before anything starts.
func TestJobTTYRefused(t *testing.T) {
	l := jobLink(t, listen(t))
	k := startJob(t, l, "exec sleep 300", true)
	if k.TTY != nil {
		t.Fatalf("a pipe job with a terminal: %+v", k)
	}
	if _, err := l.ResizeJob(t.Context(), k.ID, sandbox.TermSize{Cols: 80, Rows: 24}); !errors.Is(err, sandbox.ErrJobNoTTY) {
		t.Fatalf("resize of a pipe job: %v", err)
	}
	l.KillJob(t.Context(), k.ID, "KILL")
	for _, sz := range []sandbox.TermSize{{Cols: 9, Rows: 24}, {Cols: 501, Rows: 24}, {Cols: 80, Rows: 4}, {Cols: 80, Rows: 201}} {
		if _, err := l.StartJob(t.Context(), bash("true", ""), sandbox.JobRequest{Command: "true", TTY: &sz}); err == nil || !strings.Contains(err.Error(), "10 to 500 columns") {
			t.Fatalf("%v: %v", sz, err)
		}
	}
	if jobs, _ := l.Jobs(t.Context()); len(jobs) != 1 {
		t.Fatalf("refused starts left jobs: %+v", jobs)
	}
}

// Killing a terminal job ends every process group of its session: an
// interactive shell's job control puts a background command in a group
// of its own, which a group kill alone would leave running.
func TestJobTTYKillSession(t *testing.T) {
	l := jobLink(t, listen(t))
	j := startTTY(t, l, "exec bash --norc --noprofile -i", sandbox.TermSize{Cols: 80, Rows: 24})
	if _, err := l.JobInput(t.Context(), j.ID, []byte("sleep 300 & echo bg:$!\r"), false); err != nil {
		t.Fatal(err)
	}
	m := waitMatch(t, l, j.ID, regexp.MustCompile(`\r\nbg:(\d+)\r\n`))
	bg, _ := strconv.Atoi(m[1])
	st := procstat.Fields(bg)
	if len(st) < 4 || st[2] == strconv.Itoa(j.PID) || st[3] != strconv.Itoa(j.PID) {
		t.Fatalf("the background command (pid %d, stat %v) is not in a group of its own in the job's session %d", bg, st, j.PID)
	}
	// TERM reaches every group: the sleep ends, the interactive shell
	// (which ignores TERM) lives on.
	if _, err := l.KillJob(t.Context(), j.ID, "TERM"); err != nil {
		t.Fatal(err)
	}
	for i := 0; syscall.Kill(bg, 0) == nil; i++ {
		if i == 500 {
			t.Fatalf("the background command %d lives", bg)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if o, err := l.JobOutput(t.Context(), j.ID, sandbox.Unshown, 0); err != nil || o.Job.State != sandbox.JobRunning {
		t.Fatalf("the shell: %+v %v", o.Job, err)
	}
	if _, err := l.KillJob(t.Context(), j.ID, "KILL"); err != nil {
		t.Fatal(err)
	}
	if _, o := waitFor(t, l, j.ID, sandbox.Unshown, ""); o.Job.State != sandbox.JobKilled || o.Job.Signal != "KILL" {
		t.Fatalf("%+v", o.Job)
	}
}

// A terminal job that runs a full-screen program: its output is the raw
// escape sequences (the alternate screen of vim, here), a resize reaches
// the program as SIGWINCH.
func TestJobTTYWinch(t *testing.T) {
	l := jobLink(t, listen(t))
	j := startTTY(t, l, `trap 'echo "winch $(stty size)"' WINCH; printf '\033[?1049h'; echo ready; while :; do sleep 0.05; done`, sandbox.TermSize{Cols: 80, Rows: 24})
	out, _ := waitFor(t, l, j.ID, 0, "ready")
	if !strings.HasPrefix(out, "\x1b[?1049h") {
		t.Fatalf("%q", out)
	}
	if _, err := l.ResizeJob(t.Context(), j.ID, sandbox.TermSize{Cols: 120, Rows: 40}); err != nil {
		t.Fatal(err)
	}
	if out, _ := waitFor(t, l, j.ID, sandbox.Unshown, "winch 40 120"); !strings.Contains(out, "winch 40 120") {
		t.Fatalf("%q", out)
	}
	l.KillJob(t.Context(), j.ID, "KILL")
}
