package sandboxtest

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// Jobs runs the contract of sandbox.Jobs against sandboxes from
// newSandbox (each a fresh thread), which must implement it.
func Jobs(t *testing.T, newSandbox func(t *testing.T) sandbox.Sandbox) {
	jobsOf := func(t *testing.T) (sandbox.Sandbox, sandbox.Jobs) {
		sb := newSandbox(t)
		js, ok := sb.(sandbox.Jobs)
		if !ok {
			t.Fatalf("%T does not implement sandbox.Jobs", sb)
		}
		return sb, js
	}
	t.Run("Background", func(t *testing.T) {
		t.Parallel()
		sb, js := jobsOf(t)
		j, err := js.StartJob(t.Context(), sandbox.JobRequest{Command: "echo start; pwd; sleep 1; echo done; exit 3"})
		if err != nil || j.ID == "" || j.State != sandbox.JobRunning || j.PID <= 0 {
			t.Fatalf("%+v %v", j, err)
		}
		raw, info := WaitJob(t, js, j.ID, 0)
		out := mask(sb, raw)
		if out != "start\n"+sandbox.WorkspaceDir+"\ndone\n" || info.State != sandbox.JobExited || info.Code != 3 || info.EndedAt.IsZero() {
			t.Fatalf("%q %+v", out, info)
		}
		if got := read(t, sb, sandbox.JobLogDir+"/"+j.ID+".log"); got != raw {
			t.Fatalf("log %q", got)
		}
		list, err := js.Jobs(t.Context())
		if err != nil || len(list) != 1 || list[0].ID != j.ID || list[0].State != sandbox.JobExited || !strings.Contains(list[0].Command, "echo start") {
			t.Fatalf("%+v %v", list, err)
		}
		if _, err := js.JobOutput(t.Context(), "j999", 0, 0); !errors.Is(err, sandbox.ErrNoJob) {
			t.Fatalf("unknown job: %v", err)
		}
		if _, err := js.JobInput(t.Context(), j.ID, []byte("x"), false); !errors.Is(err, sandbox.ErrJobEnded) {
			t.Fatalf("input to an ended job: %v", err)
		}
	})
	t.Run("ShellState", func(t *testing.T) {
		t.Parallel()
		sb, js := jobsOf(t)
		const probe = `pwd; echo "$FOO"`
		kept := sandbox.OutputsDir + "\nbar\n"
		runReq(t, sb, sandbox.ExecRequest{Command: "cd /mnt/user-data/outputs && export FOO=bar", Timeout: time.Minute, Shell: true})
		// A Shell job starts from the state and changes none of it.
		j, err := js.StartJob(t.Context(), sandbox.JobRequest{Command: probe + "; cd /; export FOO=job", Shell: true})
		if err != nil {
			t.Fatal(err)
		}
		if raw, _ := WaitJob(t, js, j.ID, 0); mask(sb, raw) != kept {
			t.Fatalf("a Shell job: %q, want %q", mask(sb, raw), kept)
		}
		if out, _ := runReq(t, sb, sandbox.ExecRequest{Command: probe, Timeout: time.Minute, Shell: true}); out != kept {
			t.Fatalf("after a Shell job: %q, want %q", out, kept)
		}
		j, err = js.StartJob(t.Context(), sandbox.JobRequest{Command: probe})
		if err != nil {
			t.Fatal(err)
		}
		if raw, _ := WaitJob(t, js, j.ID, 0); mask(sb, raw) != sandbox.WorkspaceDir+"\n\n" {
			t.Fatalf("a job without Shell: %q", mask(sb, raw))
		}
	})
	t.Run("KillTakesChildren", func(t *testing.T) {
		t.Parallel()
		sb, js := jobsOf(t)
		j, err := js.StartJob(t.Context(), sandbox.JobRequest{Command: "sleep 300 & echo child $!; wait"})
		if err != nil {
			t.Fatal(err)
		}
		out := waitOutput(t, js, j.ID, "child ")
		pid, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(out, "child ")))
		if err != nil {
			t.Fatalf("%q", out)
		}
		if o, _ := run(t, sb, "kill -0 "+strconv.Itoa(pid)+" && echo alive", time.Minute); o != "alive\n" {
			t.Fatalf("the child before the kill: %q", o)
		}
		if _, err := js.KillJob(t.Context(), j.ID, "TERM"); err != nil {
			t.Fatal(err)
		}
		if _, info := WaitJob(t, js, j.ID, 0); info.State != sandbox.JobKilled || info.Signal != "TERM" || info.Code != 128+15 {
			t.Fatalf("%+v", info)
		}
		// Gone, and reaped (the supervisor is the sandbox's subreaper).
		script := "for i in $(seq 50); do kill -0 " + strconv.Itoa(pid) + " 2>/dev/null || { echo gone; exit; }; sleep 0.1; done; echo alive"
		if o, _ := run(t, sb, script, time.Minute); o != "gone\n" {
			t.Fatalf("the child after the kill: %q", o)
		}
	})
	t.Run("Input", func(t *testing.T) {
		t.Parallel()
		_, js := jobsOf(t)
		j, err := js.StartJob(t.Context(), sandbox.JobRequest{Command: `printf 'name? '; read n; echo "hi $n"`, Stdin: true})
		if err != nil {
			t.Fatal(err)
		}
		waitOutput(t, js, j.ID, "name? ")
		if _, err := js.JobInput(t.Context(), j.ID, []byte("bob\n"), false); err != nil {
			t.Fatal(err)
		}
		if out, info := WaitJob(t, js, j.ID, 0); out != "name? hi bob\n" || info.State != sandbox.JobExited || info.Code != 0 {
			t.Fatalf("%q %+v", out, info)
		}
		k, err := js.StartJob(t.Context(), sandbox.JobRequest{Command: "sleep 300"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.JobInput(t.Context(), k.ID, []byte("x\n"), false); !errors.Is(err, sandbox.ErrJobNoInput) {
			t.Fatalf("input to a job without stdin: %v", err)
		}
		js.KillJob(t.Context(), k.ID, "KILL")
	})
	t.Run("Terminal", func(t *testing.T) {
		t.Parallel()
		_, js := jobsOf(t)
		// On a terminal: stdin and stdout are one, of the size asked; a
		// resize shows; what is typed is echoed, a CR ends a line.
		script := `[ -t 0 ] && [ -t 1 ] && echo "tty $TERM"; stty size; read l; echo "got $l"; stty size`
		j, err := js.StartJob(t.Context(), sandbox.JobRequest{Command: script, TTY: &sandbox.TermSize{Cols: 80, Rows: 24}})
		if err != nil {
			t.Fatal(err)
		}
		if j.TTY == nil || *j.TTY != (sandbox.TermSize{Cols: 80, Rows: 24}) {
			t.Fatalf("%+v", j)
		}
		if out := waitOutput(t, js, j.ID, "24 80\r\n"); out != "tty xterm-256color\r\n24 80\r\n" {
			t.Fatalf("%q", out)
		}
		if info, err := js.ResizeJob(t.Context(), j.ID, sandbox.TermSize{Cols: 100, Rows: 30}); err != nil || info.TTY == nil || info.TTY.Cols != 100 {
			t.Fatalf("resize: %+v %v", info, err)
		}
		if _, err := js.JobInput(t.Context(), j.ID, []byte("hi\r"), false); err != nil {
			t.Fatal(err)
		}
		out, info := WaitJob(t, js, j.ID, 0)
		if !strings.HasSuffix(out, "24 80\r\nhi\r\ngot hi\r\n30 100\r\n") || info.State != sandbox.JobExited || info.Code != 0 || info.TTY == nil || info.TTY.Rows != 30 {
			t.Fatalf("%q %+v", out, info)
		}
		if _, err := js.ResizeJob(t.Context(), j.ID, sandbox.TermSize{Cols: 80, Rows: 24}); !errors.Is(err, sandbox.ErrJobEnded) {
			t.Fatalf("resize of an ended job: %v", err)
		}
		k, err := js.StartJob(t.Context(), sandbox.JobRequest{Command: "sleep 300"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.ResizeJob(t.Context(), k.ID, sandbox.TermSize{Cols: 80, Rows: 24}); !errors.Is(err, sandbox.ErrJobNoTTY) {
			t.Fatalf("resize of a job without a terminal: %v", err)
		}
		js.KillJob(t.Context(), k.ID, "KILL")
	})
	t.Run("Limit", func(t *testing.T) {
		t.Parallel()
		_, js := jobsOf(t)
		req := sandbox.JobRequest{Command: "sleep 300", JobLimits: sandbox.JobLimits{MaxJobs: 2}}
		var ids []string
		for range 2 {
			j, err := js.StartJob(t.Context(), req)
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, j.ID)
		}
		_, err := js.StartJob(t.Context(), req)
		if !errors.Is(err, sandbox.ErrJobLimit) || !strings.Contains(err.Error(), "2 running, at most 2") {
			t.Fatalf("third job: %v", err)
		}
		if _, err := js.KillJob(t.Context(), ids[0], "KILL"); err != nil {
			t.Fatal(err)
		}
		WaitJob(t, js, ids[0], 0)
		j, err := js.StartJob(t.Context(), req)
		if err != nil {
			t.Fatalf("after one ended: %v", err)
		}
		for _, id := range []string{ids[1], j.ID} {
			js.KillJob(t.Context(), id, "KILL")
		}
	})
	t.Run("YieldAfter", func(t *testing.T) {
		t.Parallel()
		sb, js := jobsOf(t)
		c := sandbox.NewCapture(1<<20, 1<<20)
		res, err := sb.Exec(t.Context(), sandbox.ExecRequest{Command: "echo start; sleep 2; echo done", Timeout: time.Minute, Output: c, YieldAfter: 500 * time.Millisecond})
		h, tl, _ := c.Result()
		if err != nil || res.Job == "" || string(h)+string(tl) != "start\n" {
			t.Fatalf("%+v %q %v", res, string(h)+string(tl), err)
		}
		if out, info := WaitJob(t, js, res.Job, 0); out != "start\ndone\n" || info.State != sandbox.JobExited || info.Code != 0 {
			t.Fatalf("%q %+v", out, info)
		}
		if got := read(t, sb, sandbox.JobLogDir+"/"+res.Job+".log"); got != "start\ndone\n" {
			t.Fatalf("log %q", got)
		}
		// One that ends first is an ordinary command.
		out, res := run(t, sb, "echo quick", time.Minute)
		if out != "quick\n" || res.Job != "" {
			t.Fatalf("%q %+v", out, res)
		}
	})
	// A command with Stdin reads a pipe held open: it waits for input,
	// and the job it becomes takes it. A peek moves no cursor; a kill
	// request is told apart from a signal the command gave itself.
	t.Run("YieldWithStdin", func(t *testing.T) {
		t.Parallel()
		sb, js := jobsOf(t)
		c := sandbox.NewCapture(1<<20, 1<<20)
		res, err := sb.Exec(t.Context(), sandbox.ExecRequest{Command: "echo ask; read x; echo got $x; read y; echo then $y", Timeout: time.Minute, Output: c, YieldAfter: 500 * time.Millisecond, Stdin: true, Jobs: sandbox.JobLimits{}})
		if err != nil || res.Job == "" {
			t.Fatalf("%+v %v", res, err)
		}
		if _, err := js.JobInput(t.Context(), res.Job, []byte("one\n"), false); err != nil {
			t.Fatal(err)
		}
		waitOutput(t, js, res.Job, "got one")
		p, err := js.PeekJobOutput(t.Context(), res.Job, 0, 0)
		if err != nil || string(p.Data) != "ask\ngot one\n" || p.Job.State != sandbox.JobRunning {
			t.Fatalf("peek: %q %+v %v", p.Data, p.Job, err)
		}
		// waitOutput read from offset 0 (and showed all); the peek changed
		// nothing of that: nothing is unshown.
		if o, err := js.JobOutput(t.Context(), res.Job, sandbox.Unshown, 0); err != nil || len(o.Data) != 0 {
			t.Fatalf("after a peek: %q %v", o.Data, err)
		}
		if _, err := js.JobInput(t.Context(), res.Job, nil, true); err != nil {
			t.Fatal(err)
		}
		out, info := WaitJob(t, js, res.Job, 0)
		if out != "ask\ngot one\nthen\n" || info.State != sandbox.JobExited || info.KillRequested {
			t.Fatalf("%q %+v", out, info)
		}
		// Output not yet shown stays unshown after a peek.
		j, err := js.StartJob(t.Context(), sandbox.JobRequest{Command: "echo a; sleep 30"})
		if err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(time.Minute); ; {
			p, err := js.PeekJobOutput(t.Context(), j.ID, 0, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if string(p.Data) == "a\n" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("peek: %q", p.Data)
			}
		}
		if o, err := js.JobOutput(t.Context(), j.ID, sandbox.Unshown, 0); err != nil || string(o.Data) != "a\n" {
			t.Fatalf("unshown after a peek: %q %v", o.Data, err)
		}
		if _, err := js.KillJob(t.Context(), j.ID, "TERM"); err != nil {
			t.Fatal(err)
		}
		if _, info := WaitJob(t, js, j.ID, 0); info.State != sandbox.JobKilled || !info.KillRequested {
			t.Fatalf("killed on request: %+v", info)
		}
		// A command that kills itself was not killed on request.
		j, err = js.StartJob(t.Context(), sandbox.JobRequest{Command: "sleep 0.2; kill -9 $$"})
		if err != nil {
			t.Fatal(err)
		}
		if _, info := WaitJob(t, js, j.ID, 0); info.State != sandbox.JobKilled || info.KillRequested {
			t.Fatalf("killed itself: %+v", info)
		}
		// Without Stdin the command's stdin is empty, as ever.
		if out, _ := run(t, sb, "read x; echo rc=$?", time.Minute); out != "rc=1\n" {
			t.Fatalf("no stdin: %q", out)
		}
		// One that cannot become a job (the cap) stays in the foreground,
		// where its stdin ends.
		busy, err := js.StartJob(t.Context(), sandbox.JobRequest{Command: "sleep 60"})
		if err != nil {
			t.Fatal(err)
		}
		c = sandbox.NewCapture(1<<20, 1<<20)
		res, err = sb.Exec(t.Context(), sandbox.ExecRequest{Command: "sleep 1; read x; echo rc=$?", Timeout: time.Minute, Output: c, YieldAfter: 300 * time.Millisecond, Stdin: true, Jobs: sandbox.JobLimits{MaxJobs: 1}})
		if h, tl, _ := c.Result(); err != nil || res.Job != "" || string(h)+string(tl) != "rc=1\n" {
			t.Fatalf("at the cap: %+v %q %v", res, string(h)+string(tl), err)
		}
		js.KillJob(t.Context(), busy.ID, "KILL")
	})
}

// WaitJob reads job id's output from offset until it ended (within a
// minute), and returns the output and the job's last state.
func WaitJob(t *testing.T, js sandbox.Jobs, id string, offset int64) (string, sandbox.JobInfo) {
	t.Helper()
	var b strings.Builder
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		o, err := js.JobOutput(t.Context(), id, offset, 5*time.Second)
		if err != nil {
			t.Fatalf("output of %s: %v", id, err)
		}
		b.Write(o.Data)
		offset = o.NextOffset
		if o.Job.State != sandbox.JobRunning && len(o.Data) == 0 {
			return b.String(), o.Job
		}
	}
	t.Fatalf("job %s still runs after a minute: %q", id, b.String())
	return "", sandbox.JobInfo{}
}

// waitOutput reads job id's output from its start until it holds want
// and a newline after it, or it is want (a prompt), and returns it.
func waitOutput(t *testing.T, js sandbox.Jobs, id, want string) string {
	t.Helper()
	var b strings.Builder
	var offset int64
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		o, err := js.JobOutput(t.Context(), id, offset, 5*time.Second)
		if err != nil {
			t.Fatalf("output of %s: %v", id, err)
		}
		b.Write(o.Data)
		offset = o.NextOffset
		s := b.String()
		if s == want || strings.Contains(s, want) && strings.HasSuffix(s, "\n") {
			return s
		}
		if o.Job.State != sandbox.JobRunning {
			t.Fatalf("job %s ended (%+v) without %q: %q", id, o.Job, want, s)
		}
	}
	t.Fatalf("job %s: no %q after a minute: %q", id, want, b.String())
	return ""
}
