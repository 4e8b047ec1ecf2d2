//go:build unix

package local

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor"
)

func newSandbox(t *testing.T, allow bool) (*Sandbox, string) {
	t.Helper()
	state := t.TempDir()
	p, err := New(Config{StateDir: state, AllowHostBash: allow})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	sb, err := p.Acquire(t.Context(), "t1")
	if err != nil {
		t.Fatal(err)
	}
	return sb.(*Sandbox), state
}

func execOut(t *testing.T, sb *Sandbox, ctx context.Context, cmd string, timeout time.Duration) (string, sandbox.ExecResult, error) {
	t.Helper()
	c := sandbox.NewCapture(1<<20, 1<<20)
	res, err := sb.Exec(ctx, sandbox.ExecRequest{Command: cmd, Timeout: timeout, Output: c})
	h, tl, _ := c.Result()
	return string(h) + string(tl), res, err
}

func TestAcquireCreatesThreadDirsAndRefusesBadIDs(t *testing.T) {
	t.Parallel()
	state := t.TempDir()
	p, err := New(Config{StateDir: state})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.Acquire(t.Context(), "t-1"); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"workspace", "uploads", "outputs"} {
		if fi, err := os.Stat(filepath.Join(ThreadDir(state, "t-1"), d)); err != nil || !fi.IsDir() {
			t.Errorf("%s not created: %v", d, err)
		}
	}
	for _, bad := range []string{"../x", "", "a/b", ".."} {
		if _, err := p.Acquire(t.Context(), bad); err == nil {
			t.Errorf("thread %q accepted", bad)
		}
	}
	if ents, _ := os.ReadDir(filepath.Join(state, "threads")); len(ents) != 1 {
		t.Errorf("threads dir holds %d entries", len(ents))
	}
}

func TestExecDisabledWithoutAllowHostBash(t *testing.T) {
	t.Parallel()
	sb, _ := newSandbox(t, false)
	_, _, err := execOut(t, sb, t.Context(), "echo hi", time.Minute)
	if !errors.Is(err, sandbox.ErrBashDisabled) || !strings.Contains(err.Error(), "--allow-host-bash") {
		t.Fatalf("err = %v", err)
	}
}

func TestExecBasics(t *testing.T) {
	t.Parallel()
	sb, state := newSandbox(t, true)
	ws := filepath.Join(ThreadDir(state, "t1"), "workspace")
	out, res, err := execOut(t, sb, t.Context(), "pwd; echo out; echo err >&2; echo hi > /mnt/user-data/outputs/f.txt; exit 7", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 7 || res.TimedOut {
		t.Errorf("res = %+v", res)
	}
	if want := ws + "\nout\nerr\n"; out != want {
		t.Errorf("out = %q, want %q", out, want)
	}
	if b, _ := os.ReadFile(filepath.Join(ThreadDir(state, "t1"), "outputs", "f.txt")); string(b) != "hi\n" {
		t.Errorf("virtual path not rewritten: %q", b)
	}
}

func TestExecScrubsEnvironment(t *testing.T) {
	t.Setenv("SANDBOX_MCP_TEST_SECRET", "hunter2")
	sb, _ := newSandbox(t, true)
	out, _, err := execOut(t, sb, t.Context(), "env", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "hunter2") {
		t.Fatalf("secret leaked: %s", out)
	}
	for _, k := range []string{"PATH=", "HOME=", "LANG=", "TERM=", "TMPDIR="} {
		if !strings.Contains(out, k) {
			t.Errorf("%s missing", k)
		}
	}
	p, _ := New(Config{StateDir: t.TempDir(), AllowHostBash: true, EnvInherit: []string{"SANDBOX_MCP_TEST_SECRET"}})
	defer p.Close()
	sb2, _ := p.Acquire(t.Context(), "x")
	out, _, _ = execOut(t, sb2.(*Sandbox), t.Context(), "echo $SANDBOX_MCP_TEST_SECRET", time.Minute)
	if out != "hunter2\n" {
		t.Errorf("env_inherit: got %q", out)
	}
}

// A background child holding the pipe open must not keep the call
// waiting, and must not survive it.
func TestExecTimeoutKillsGroupWithPipeHolder(t *testing.T) {
	t.Parallel()
	sb, state := newSandbox(t, true)
	pidfile := filepath.Join(ThreadDir(state, "t1"), "workspace", "pid")
	start := time.Now()
	out, res, err := execOut(t, sb, t.Context(), "sleep 300 & echo $! > pid; echo started; sleep 300", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !res.TimedOut || !strings.Contains(out, "started") {
		t.Fatalf("res = %+v out = %q", res, out)
	}
	if d := time.Since(start); d > 60*time.Second {
		t.Fatalf("took %v", d)
	}
	assertDead(t, pidfile)
}

func TestExecExitKillsBackgroundChildren(t *testing.T) {
	t.Parallel()
	sb, state := newSandbox(t, true)
	pidfile := filepath.Join(ThreadDir(state, "t1"), "workspace", "pid")
	_, res, err := execOut(t, sb, t.Context(), "sleep 300 & echo $! > pid; echo done", time.Minute)
	if err != nil || res.ExitCode != 0 || res.TimedOut {
		t.Fatalf("res = %+v err = %v", res, err)
	}
	assertDead(t, pidfile)
}

func TestExecCancelKillsGroup(t *testing.T) {
	t.Parallel()
	sb, state := newSandbox(t, true)
	pidfile := filepath.Join(ThreadDir(state, "t1"), "workspace", "pid")
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		for range 500 {
			// Its pid written, not only the file made (echo's redirection
			// makes the file before echo writes).
			if b, err := os.ReadFile(pidfile); err == nil && strings.HasSuffix(string(b), "\n") {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		cancel()
	}()
	_, _, err := execOut(t, sb, ctx, "(sleep 300; echo never) & echo $! > pid; wait", time.Minute)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
	assertDead(t, pidfile)
}

func assertDead(t *testing.T, pidfile string) {
	t.Helper()
	b, err := os.ReadFile(pidfile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		// A zombie counts as dead: it is no longer running.
		st, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil || strings.Contains(string(st), ") Z ") {
			return
		}
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("process %d survived the command", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestExecHugeOutputBoundedMemory prints 1 GB through a bash command: the
// server allocates a bounded amount whatever the command prints.
func TestExecHugeOutputBoundedMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("prints 1 GB; skipped with -short")
	}
	sb, _ := newSandbox(t, true)
	c := sandbox.NewCapture(10000, 10000)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	res, err := sb.Exec(t.Context(), sandbox.ExecRequest{
		Command: "head -c 1000000000 /dev/zero | tr '\\0' x; echo; echo END",
		Timeout: 5 * time.Minute,
		Output:  c,
	})
	runtime.ReadMemStats(&after)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("res = %+v err = %v", res, err)
	}
	_, tail, total := c.Result()
	if total < 1_000_000_000 || !strings.HasSuffix(string(tail), "END\n") {
		t.Fatalf("total = %d tail ends %q", total, tail[max(0, len(tail)-10):])
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 64<<20 {
		t.Fatalf("allocated %d MB for 1 GB of output", alloc>>20)
	}
}

func TestRewrite(t *testing.T) {
	t.Parallel()
	mounts := []sandbox.Mount{
		{Virtual: "/mnt/user-data/workspace", Host: "/h/ws"},
		{Virtual: "/mnt/user-data/outputs", Host: "/h/out"},
		{Virtual: "/mnt/skills", Host: "/h/skills"},
	}
	tests := []struct{ in, want string }{
		{"cat /mnt/user-data/workspace/a", "cat /h/ws/a"},
		{"cd /mnt/user-data/workspace && ls /mnt/skills", "cd /h/ws && ls /h/skills"},
		{"cp x /mnt/user-data/outputs/", "cp x /h/out/"},
		{"echo '/mnt/user-data/workspace'", "echo '/h/ws'"},
		{"ls /mnt/user-data/workspace-x", "ls /mnt/user-data/workspace-x"},
		{"ls /mnt/skillset", "ls /mnt/skillset"},
		{"ls foo/mnt/skills", "ls foo/mnt/skills"},
		{"X=/mnt/skills:/mnt/user-data/workspace", "X=/h/skills:/h/ws"},
		{"no paths", "no paths"},
	}
	for _, tt := range tests {
		if got := rewrite(tt.in, mounts); got != tt.want {
			t.Errorf("rewrite(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// Children that leave the command's process group and session (setsid, a
// double fork into a new session) die with the call on the host too: when
// the shell exits, on a timeout and on a cancellation (issue 13.12).
func TestExecSetsidChildrenDie(t *testing.T) {
	t.Parallel()
	const escape = "setsid sleep 300 </dev/null >/dev/null 2>&1 & echo $! > pid; (setsid sh -c 'echo $$ > pid2; exec sleep 300' </dev/null >/dev/null 2>&1 &); while [ ! -s pid2 ]; do sleep 0.05; done; "
	for _, tc := range []struct {
		name, cmd string
		timeout   time.Duration
		cancel    bool
	}{
		{"exit", escape + "echo done", time.Minute, false},
		{"timeout", escape + "sleep 300", time.Second, false},
		{"cancel", escape + "touch go; sleep 300", time.Minute, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sb, state := newSandbox(t, true)
			ws := filepath.Join(ThreadDir(state, "t1"), "workspace")
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			if tc.cancel {
				go func() {
					for range 1000 {
						if _, err := os.Stat(filepath.Join(ws, "go")); err == nil {
							break
						}
						time.Sleep(10 * time.Millisecond)
					}
					cancel()
				}()
			}
			out, res, err := execOut(t, sb, ctx, tc.cmd, tc.timeout)
			if tc.cancel != errors.Is(err, context.Canceled) || (tc.name == "timeout") != res.TimedOut {
				t.Fatalf("res = %+v err = %v out = %q", res, err, out)
			}
			assertDead(t, filepath.Join(ws, "pid"))
			assertDead(t, filepath.Join(ws, "pid2"))
		})
	}
}

// Orphans re-parented to the supervisor (a child subreaper) are reaped as
// they exit, not left as zombies until the call ends.
func TestExecSupervisorReapsOrphans(t *testing.T) {
	t.Parallel()
	sb, _ := newSandbox(t, true)
	out, res, err := execOut(t, sb, t.Context(),
		`for i in $(seq 200); do (true &); done; sleep 1; n=0; for f in /proc/[0-9]*/stat; do s=$(cat $f 2>/dev/null) || continue; s=${s##*) }; set -- $s; [ "$1 $2" = "Z $PPID" ] && n=$((n+1)); done; echo "zombies=$n"`, time.Minute)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("res = %+v err = %v out = %q", res, err, out)
	}
	n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(out), "zombies=")))
	if err != nil {
		t.Fatalf("out = %q", out)
	}
	if n > 20 { // promptly reaped: a few may be in flight
		t.Fatalf("%d zombies under the supervisor", n)
	}
}

// A command can signal its supervisor on the host (same uid). Killed, the
// call fails with a clear error and the command's children (its group,
// and a setsid one re-parented away) do not outlive it; stopped, the
// call's timeout still ends it — the server gives up on the supervisor,
// resumes it and closes its channel, and it kills what is left. The next
// call gets a new supervisor.
func TestExecSupervisorKilledOrStopped(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, cmd string
		timeout   time.Duration
	}{
		{"killed", "sleep 300 </dev/null >/dev/null 2>&1 & echo $! > pid; kill -9 $PPID; sleep 300", time.Minute},
		{"stopped", "setsid sleep 300 </dev/null >/dev/null 2>&1 & echo $! > pid; kill -STOP $PPID; echo done", time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sb, state := newSandbox(t, true)
			out, res, err := execOut(t, sb, t.Context(), tc.cmd, tc.timeout)
			var ce *supervisor.ChannelError
			if err == nil || (tc.name == "killed") != errors.As(err, &ce) || (tc.name == "stopped") != errors.Is(err, supervisor.ErrUnresponsive) {
				t.Fatalf("res = %+v err = %v out = %q", res, err, out)
			}
			assertDead(t, filepath.Join(ThreadDir(state, "t1"), "workspace", "pid"))
			out, res, err = execOut(t, sb, t.Context(), "echo again", time.Minute)
			if err != nil || out != "again\n" {
				t.Fatalf("next call: res = %+v err = %v out = %q", res, err, out)
			}
		})
	}
}

// Asked whether its jobs run with no supervisor (none started yet, or it
// ended), a thread's sandbox says it does not run rather than starting one
// (sandbox.IfRunning); with its supervisor up, it lists them.
func TestJobsIfRunningStartsNoSupervisor(t *testing.T) {
	t.Parallel()
	sb, _ := newSandbox(t, true)
	ctx := sandbox.IfRunning(t.Context())
	if _, err := sb.Jobs(ctx); !errors.Is(err, sandbox.ErrNotRunning) {
		t.Fatalf("jobs with no supervisor: %v, want ErrNotRunning", err)
	}
	if sb.Link().Connected() {
		t.Fatal("asking for jobs started the supervisor")
	}
	if out, _, err := execOut(t, sb, t.Context(), "echo up", 10*time.Second); err != nil || out != "up\n" {
		t.Fatalf("%q %v", out, err)
	}
	if list, err := sb.Jobs(ctx); err != nil || len(list) != 0 {
		t.Fatalf("jobs with the supervisor up: %+v %v", list, err)
	}
}
