//go:build linux

package local

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/providers/internal/cgroups"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// newLimited is a bwrap provider whose threads are bounded by lim, and
// two of its threads; it skips, saying why, where cgroups cannot bound
// them here (not root, and no delegated cgroup v2 subtree), unless CI
// asked for them (SANDBOX_MCP_REQUIRE_CGROUPS=1).
func newLimited(t *testing.T, lim Limits) (p *Provider, a, b *Sandbox) {
	t.Helper()
	requireBwrap(t)
	state := t.TempDir()
	p, err := New(Config{StateDir: state, Isolation: IsolationBwrap, Limits: lim})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	if r := p.Limits(); len(r.Missing) > 0 {
		if os.Getenv("SANDBOX_MCP_REQUIRE_CGROUPS") == "1" {
			t.Fatalf("cgroups required but %s do not hold: %s", strings.Join(r.Missing, ", "), r.Reason)
		}
		t.Skipf("SKIPPED: %s do not hold here (%s); run as root, or under a delegated cgroup v2 subtree", strings.Join(r.Missing, ", "), r.Reason)
	}
	sa, err := p.Acquire(t.Context(), "thread-a")
	if err != nil {
		t.Fatal(err)
	}
	sb, err := p.Acquire(t.Context(), "thread-b")
	if err != nil {
		t.Fatal(err)
	}
	return p, sa.(*Sandbox), sb.(*Sandbox)
}

// cgroupFile reads the first of files that the sandbox's cgroups have,
// from whichever hierarchy has it (a v1 name, then the v2 one), and says
// which it read.
func cgroupFile(t *testing.T, s *Sandbox, files ...string) (value, file string) {
	t.Helper()
	s.cgMu.Lock()
	g := s.cg
	s.cgMu.Unlock()
	if g == nil {
		t.Fatalf("thread %s has no cgroup", s.thread)
	}
	for _, f := range files {
		for _, d := range g.Dirs() {
			if b, err := os.ReadFile(filepath.Join(d, f)); err == nil {
				return strings.TrimSpace(string(b)), f
			}
		}
	}
	t.Fatalf("no cgroup of thread %s has %v (dirs %v)", s.thread, files, g.Dirs())
	return "", ""
}

// cgroupValue is cgroupFile's value.
func cgroupValue(t *testing.T, s *Sandbox, files ...string) string {
	t.Helper()
	v, _ := cgroupFile(t, s, files...)
	return v
}

// wantMemoryLimit checks that the thread's memory is bounded by n bytes,
// swap included.
func wantMemoryLimit(t *testing.T, s *Sandbox, n int64) {
	t.Helper()
	want := strconv.FormatInt(n, 10)
	v, f := cgroupFile(t, s, "memory.limit_in_bytes", "memory.max")
	if v != want {
		t.Errorf("%s = %s, want %s", f, v, want)
	}
	if f == "memory.max" {
		if v, f := cgroupFile(t, s, "memory.swap.max", "memory.max"); f == "memory.swap.max" && v != "0" {
			t.Errorf("memory.swap.max = %s, want 0 (no swap beyond the limit)", v)
		}
	} else if v, f := cgroupFile(t, s, "memory.memsw.limit_in_bytes", "memory.limit_in_bytes"); v != want {
		t.Errorf("%s = %s, want %s (no swap beyond the limit)", f, v, want)
	}
}

// wantCPULimit checks that the thread gets quota µs of CPU time per
// 100 ms.
func wantCPULimit(t *testing.T, s *Sandbox, quota int) {
	t.Helper()
	v, f := cgroupFile(t, s, "cpu.cfs_quota_us", "cpu.max")
	if f == "cpu.max" {
		if want := fmt.Sprintf("%d 100000", quota); v != want {
			t.Errorf("cpu.max = %q, want %q", v, want)
		}
		return
	}
	if p := cgroupValue(t, s, "cpu.cfs_period_us"); v != strconv.Itoa(quota) || p != "100000" {
		t.Errorf("cpu.cfs_quota_us %s per cpu.cfs_period_us %s, want %d per 100000", v, p, quota)
	}
}

func mustRun(t *testing.T, s *Sandbox, cmd string) string {
	t.Helper()
	out, res, err := execOut(t, s, t.Context(), cmd, time.Minute)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("thread %s: %s: exit %d, %v: %q", s.thread, cmd, res.ExitCode, err, out)
	}
	return out
}

// A fork storm in one thread meets its pids limit (EAGAIN); another
// thread's commands and the server's own forks go on working meanwhile.
func TestLimitsForkStorm(t *testing.T) {
	t.Parallel()
	_, a, b := newLimited(t, Limits{Pids: 64})
	mustRun(t, a, "true")
	mustRun(t, b, "true") // b's supervisor is up before the storm
	type result struct {
		out  string
		code int
		err  error
	}
	done := make(chan result, 1)
	go func() {
		// dash says "Cannot fork" and stops at the first EAGAIN; bash
		// then waits on a FIFO (a builtin: no fork), so that the storm's
		// sleeps hold the thread's pids while the test looks.
		storm := `mkfifo /tmp/f; sh -c 'i=0; while [ $i -lt 1000 ]; do sleep 60 & i=$((i+1)); done; echo "forked $i"' 2>&1; read -t 6 <> /tmp/f; echo end`
		out, res, err := execOut(t, a, t.Context(), storm, time.Minute)
		done <- result{out, res.ExitCode, err}
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if n, _ := strconv.Atoi(cgroupValue(t, a, "pids.current")); n >= 60 {
			break // the storm is at the limit
		}
		if time.Now().After(deadline) {
			r := <-done
			t.Fatalf("thread a's storm never reached its limit (pids.current %s): %q", cgroupValue(t, a, "pids.current"), r.out)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := cgroupValue(t, a, "pids.max"); got != "64" {
		t.Errorf("pids.max = %q, want 64", got)
	}
	start := time.Now()
	if out := mustRun(t, b, "echo ok"); out != "ok\n" {
		t.Errorf("thread b during a's storm: %q", out)
	}
	if err := exec.Command("/bin/true").Run(); err != nil {
		t.Errorf("the server cannot fork during a's storm: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("thread b and the server took %v during a's storm", d)
	}
	r := <-done
	if r.err != nil || !strings.Contains(r.out, "Cannot fork") || strings.Contains(r.out, "forked 1000") || !strings.HasSuffix(r.out, "end\n") {
		t.Fatalf("the storm: exit %d, %v, %q; want dash's Cannot fork", r.code, r.err, r.out)
	}
	// The storm's processes went with its command; the thread works.
	if out := mustRun(t, a, "echo ok"); out != "ok\n" {
		t.Errorf("thread a after its storm: %q", out)
	}
}

// A command that takes more memory than the limit is killed by the kernel
// (exit 137); the thread's supervisor and the other thread live on.
func TestLimitsMemoryHog(t *testing.T) {
	t.Parallel()
	_, a, b := newLimited(t, Limits{Memory: "64m"})
	mustRun(t, a, "true")
	before, err := a.Link().Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	// dd fills (touches) a 256 MiB buffer.
	out := mustRun(t, a, "dd if=/dev/zero of=/dev/null bs=256M count=1 2>/dev/null; echo exit $?")
	if !strings.HasSuffix(out, "exit 137\n") {
		t.Errorf("a 256 MiB hog under memory 64m: %q, want exit 137 (killed)", out)
	}
	wantMemoryLimit(t, a, 64<<20)
	after, err := a.Link().Conn(t.Context())
	if err != nil || after != before {
		t.Errorf("thread a's supervisor did not survive its command's OOM kill (channel %p, then %p, %v)", before, after, err)
	}
	if out := mustRun(t, a, "echo ok"); out != "ok\n" {
		t.Errorf("thread a after the OOM kill: %q", out)
	}
	if out := mustRun(t, b, "echo ok"); out != "ok\n" {
		t.Errorf("thread b: %q", out)
	}
	// /tmp (a tmpfs) counts too: filling it cannot take the host's
	// memory. What it holds no kill frees, so the kernel kills the
	// largest process, which may be the supervisor: the sandbox starts
	// again, with an empty /tmp; the other thread never notices.
	execOut(t, a, t.Context(), "head -c 100m /dev/zero > /tmp/fill; echo exit $?", time.Minute)
	if out := mustRun(t, a, "ls /tmp/fill 2>/dev/null | wc -l; head -c 10m /dev/zero > /tmp/small && echo ok"); !strings.HasSuffix(out, "ok\n") {
		t.Errorf("thread a after filling /tmp: %q", out)
	}
	if out := mustRun(t, b, "echo ok"); out != "ok\n" {
		t.Errorf("thread b after a filled its /tmp: %q", out)
	}
}

// cpu: a thread gets the CPUs' worth of time it is given, and the
// cgroup's files say so.
func TestLimitsCPU(t *testing.T) {
	t.Parallel()
	_, a, _ := newLimited(t, Limits{CPU: 0.25})
	mustRun(t, a, "timeout 1 sh -c 'while :; do :; done'; true")
	wantCPULimit(t, a, 25000)
	if st := cgroupValue(t, a, "cpu.stat") + "\n"; !strings.Contains(st, "nr_throttled ") || strings.Contains(st, "nr_throttled 0\n") {
		t.Errorf("a busy loop under cpu 0.25 was never throttled: %q", st)
	}
}

// The defaults hold without any setting: pids 1024, memory 4g, the
// host's CPUs.
func TestLimitsDefaults(t *testing.T) {
	t.Parallel()
	p, a, _ := newLimited(t, Limits{})
	mustRun(t, a, "true")
	if got := cgroupValue(t, a, "pids.max"); got != "1024" {
		t.Errorf("pids.max = %s, want 1024", got)
	}
	wantMemoryLimit(t, a, 4<<30)
	wantCPULimit(t, a, 100000*runtime.NumCPU())
	r := p.Limits()
	if r.Cgroup == "" || !slices.Contains(r.Holding, "pids 1024") || !slices.Contains(r.Holding, "memory 4g") {
		t.Errorf("report %+v", r)
	}
}

// A thread's cgroups go with its sandbox, the instance's with the
// provider: nothing is left behind.
func TestLimitsRemoved(t *testing.T) {
	t.Parallel()
	p, a, _ := newLimited(t, Limits{})
	mustRun(t, a, "sleep 100 & true")
	a.cgMu.Lock()
	dirs := a.cg.Dirs()
	a.cgMu.Unlock()
	p.Release("thread-a")
	for _, d := range dirs {
		if _, err := os.Stat(d); err == nil {
			t.Errorf("thread a's cgroup %s is left after its release", d)
		}
	}
	inst := p.Limits().Dirs
	p.Close()
	for _, d := range inst {
		if _, err := os.Stat(d); err == nil {
			t.Errorf("the provider's cgroup %s is left after Close", d)
		}
	}
}

// Two providers on one state dir have their own cgroups; the next start
// removes what a killed server left (its cgroups and what runs there),
// never a live server's.
func TestLimitsStaleInstanceRemoved(t *testing.T) {
	t.Parallel()
	requireBwrap(t)
	state := t.TempDir()
	live, err := New(Config{StateDir: state, Isolation: IsolationBwrap})
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	if r := live.Limits(); len(r.Missing) > 0 {
		t.Skipf("SKIPPED: %s do not hold here (%s)", strings.Join(r.Missing, ", "), r.Reason)
	}
	// A server that is killed: this test binary, serving one thread.
	cmd := exec.Command(os.Args[0], "-test.run=^TestLimitsHelperServer$", "-test.v")
	cmd.Env = append(os.Environ(), "SANDBOX_MCP_LIMITS_HELPER="+state)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	var dirs []string
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "CGROUP "); ok {
			dirs = append(dirs, d)
		}
		if sc.Text() == "READY" {
			break
		}
	}
	if len(dirs) == 0 {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatal("the helper server said no cgroup")
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	for _, d := range dirs {
		if _, err := os.Stat(d); err != nil {
			t.Fatalf("the killed server's cgroup %s is gone by itself: the test proves nothing", d)
		}
	}
	if m := cpuacctMount(t); m != "" && !slices.ContainsFunc(dirs, func(d string) bool { return strings.HasPrefix(d, m+"/") }) {
		t.Errorf("the killed server had no cgroup in %s (cpuacct, v1): %v", m, dirs)
	}
	next, err := New(Config{StateDir: state, Isolation: IsolationBwrap})
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close()
	for _, d := range dirs {
		if _, err := os.Stat(d); err == nil {
			t.Errorf("the killed server's cgroup %s is left after the next start", d)
		}
	}
	for _, d := range live.Limits().Dirs {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("the live server's cgroup %s went: %v", d, err)
		}
	}
	ents, _ := os.ReadDir(filepath.Join(state, "instances"))
	if len(ents) != 2 {
		t.Errorf("%d instances recorded in the state dir, want 2 (the live ones)", len(ents))
	}
}

// cpuacctMount is where a cgroup v1 hierarchy with cpuacct is mounted
// here (alone, or with cpu); "" where none is.
func cpuacctMount(t *testing.T) string {
	t.Helper()
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(mi), "\n") {
		pre, post, _ := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if len(f) >= 5 && len(g) >= 3 && g[0] == "cgroup" && slices.Contains(strings.Split(g[2], ","), "cpuacct") {
			return f[4]
		}
	}
	return ""
}

// TestLimitsHelperServer is the server TestLimitsStaleInstanceRemoved
// kills: it serves a thread, says its cgroups, and waits.
func TestLimitsHelperServer(t *testing.T) {
	state := os.Getenv("SANDBOX_MCP_LIMITS_HELPER")
	if state == "" {
		t.Skip("a helper process of TestLimitsStaleInstanceRemoved")
	}
	p, err := New(Config{StateDir: state, Isolation: IsolationBwrap})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := p.Acquire(t.Context(), "doomed")
	if err != nil {
		t.Fatal(err)
	}
	s := sb.(*Sandbox)
	mustRun(t, s, "true")
	for _, d := range s.cg.Dirs() {
		fmt.Println("CGROUP " + d)
	}
	for _, d := range p.Limits().Dirs {
		fmt.Println("CGROUP " + d)
	}
	fmt.Println("READY")
	time.Sleep(time.Minute)
}

// A thread id is never a path: two threads whose ids differ only where a
// path would be cleaned, or that try to climb, get cgroups of their own
// under the instance's.
func TestLimitsThreadNames(t *testing.T) {
	t.Parallel()
	p, _, _ := newLimited(t, Limits{})
	var all []string
	for _, id := range []string{"x", "x.", "..", "a..b", strings.Repeat("z", 128)} {
		sb, err := p.Acquire(t.Context(), id)
		if err != nil {
			continue // refused ids make no cgroup either
		}
		s := sb.(*Sandbox)
		mustRun(t, s, "true")
		for _, d := range s.cg.Dirs() {
			if slices.Contains(all, d) {
				t.Errorf("thread %q shares cgroup %s", id, d)
			}
			all = append(all, d)
			inside := false
			for _, inst := range p.Limits().Dirs {
				inside = inside || filepath.Dir(d) == inst
			}
			if !inside || strings.Contains(filepath.Base(d), id) {
				t.Errorf("thread %q has cgroup %s, want a hash under %v", id, d, p.Limits().Dirs)
			}
		}
	}
	if len(all) == 0 {
		t.Fatal("no thread made a cgroup")
	}
}

// Unisolated (--allow-host-bash), the supervisor and its commands are in
// the thread's cgroups too.
func TestLimitsHostBash(t *testing.T) {
	t.Parallel()
	p, err := New(Config{StateDir: t.TempDir(), Isolation: IsolationNone, AllowHostBash: true, Limits: Limits{Pids: 100}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if r := p.Limits(); len(r.Missing) > 0 {
		t.Skipf("SKIPPED: %s do not hold here (%s)", strings.Join(r.Missing, ", "), r.Reason)
	}
	sb, err := p.Acquire(t.Context(), "host")
	if err != nil {
		t.Fatal(err)
	}
	s := sb.(*Sandbox)
	out := mustRun(t, s, "cat /proc/self/cgroup; cat /proc/$PPID/cgroup")
	for _, d := range p.Limits().Dirs {
		if n := strings.Count(out, "/"+filepath.Base(d)+"/"); n < 2 {
			t.Errorf("the command and its supervisor are not both in a cgroup of %s:\n%s", d, out)
		}
	}
	if got := cgroupValue(t, s, "pids.max"); got != "100" {
		t.Errorf("pids.max = %s, want 100", got)
	}
}

// BenchmarkThreadStart is a thread's first command and its end —
// bubblewrap, the supervisor, `true` — with the thread's cgroups, and
// without (what the cgroups cost).
func BenchmarkThreadStart(b *testing.B) {
	if ProbeBwrap(b.Context()) != nil {
		b.Skip("SKIPPED: bubblewrap unavailable")
	}
	for _, withCgroups := range []bool{true, false} {
		b.Run(map[bool]string{true: "cgroups", false: "none"}[withCgroups], func(b *testing.B) {
			p, err := New(Config{StateDir: b.TempDir(), Isolation: IsolationBwrap})
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close()
			if withCgroups && len(p.Limits().Missing) > 0 {
				b.Skipf("SKIPPED: %s", p.Limits().Reason)
			}
			if !withCgroups {
				p.inst.cg.Close()
				p.inst.cg = new(cgroups.Tree) // none holds
			}
			i := 0
			for b.Loop() {
				i++
				thread := "bench-" + strconv.Itoa(i)
				sb, err := p.Acquire(b.Context(), thread)
				if err != nil {
					b.Fatal(err)
				}
				if res, err := sb.Exec(b.Context(), sandbox.ExecRequest{Command: "true", Timeout: time.Minute, Output: io.Discard}); err != nil || res.ExitCode != 0 {
					b.Fatal(res, err)
				}
				p.Release(thread)
			}
		})
	}
}

// BenchmarkLimitsOpen is what a server's start-up pays to make and prove
// its cgroups (and its Close to remove them).
func BenchmarkLimitsOpen(b *testing.B) {
	for b.Loop() {
		if _, err := ProbeLimits(Limits{}); err != nil {
			b.Fatal(err)
		}
	}
}

// sandbox_info's CPU time (Usage) counts what the thread's commands burn,
// in bubblewrap and unisolated: on cgroup v1 the thread has a cgroup in
// the cpuacct hierarchy too, wherever that is mounted (its own, or one
// with cpu), and every process of the sandbox is in it.
func TestLimitsUsageCPUTime(t *testing.T) {
	t.Parallel()
	for _, iso := range []string{IsolationBwrap, IsolationNone} {
		t.Run(iso, func(t *testing.T) {
			t.Parallel()
			if iso == IsolationBwrap {
				requireBwrap(t)
			}
			p, err := New(Config{StateDir: t.TempDir(), Isolation: iso, AllowHostBash: iso == IsolationNone})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			if r := p.Limits(); len(r.Missing) > 0 {
				if os.Getenv("SANDBOX_MCP_REQUIRE_CGROUPS") == "1" {
					t.Fatalf("cgroups required but %s do not hold: %s", strings.Join(r.Missing, ", "), r.Reason)
				}
				t.Skipf("SKIPPED: %s do not hold here (%s)", strings.Join(r.Missing, ", "), r.Reason)
			}
			sb, err := p.Acquire(t.Context(), "cpu")
			if err != nil {
				t.Fatal(err)
			}
			s := sb.(*Sandbox)
			cpu := func() float64 {
				t.Helper()
				u, err := s.Usage(t.Context())
				if err != nil {
					t.Fatal(err)
				}
				if u.CPUUserSec == nil || u.CPUSystemSec == nil {
					t.Fatalf("no CPU time (cgroup %q; thread's cgroups %v)", u.Cgroup, s.cg.Dirs())
				}
				return *u.CPUUserSec + *u.CPUSystemSec
			}
			before := cpu()
			if before > 2 {
				// The host's, or the server's, cgroup: not the thread's.
				t.Errorf("a new thread has used %.2f s of CPU already", before)
			}
			// bash busy until it has used a second of CPU (utime + stime,
			// in ticks of 1/100 s): a second whatever else the machine runs.
			mustRun(t, s, `while read -r -a f </proc/$BASHPID/stat; [ $((f[13] + f[14])) -lt 100 ]; do :; done`)
			after := cpu()
			t.Logf("CPU time %.2f s, then %.2f s", before, after)
			if after-before < 0.5 {
				t.Errorf("CPU time grew by %.2f s over a command that used a second of it, want at least 0.5 s", after-before)
			}
		})
	}
}
