//go:build linux

package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	client "github.com/sandbox-mcp/sandbox-mcp/supervisor"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor/supervisortest"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor/wire"
)

func TestExecOutputAndExitCode(t *testing.T) {
	c := start(t)
	if c.Hello().Shell == "" || c.Hello().Protocol != wire.Protocol {
		t.Fatalf("hello %+v", c.Hello())
	}
	out, res, err := sh(c, context.Background(), "echo out; echo err >&2; exit 3", 0)
	if err != nil || res.ExitCode != 3 || out != "out\nerr\n" {
		t.Fatalf("out %q res %+v err %v", out, res, err)
	}
	// Large output passes through the credit wire.Window intact.
	out, res, err = sh(c, context.Background(), "head -c 5000000 /dev/zero | tr '\\0' x", 0)
	if err != nil || res.ExitCode != 0 || len(out) != 5000000 || strings.Trim(out, "x") != "" {
		t.Fatalf("len %d res %+v err %v", len(out), res, err)
	}
	// A program that cannot start says so.
	_, err = c.Exec(context.Background(), client.ExecRequest{Argv: []string{"/nonexistent"}, Dir: "/"})
	if err == nil || !strings.Contains(err.Error(), "start command") {
		t.Fatalf("err %v", err)
	}
}

func TestTimeoutKillsGroupAndBackground(t *testing.T) {
	c := start(t)
	dir := t.TempDir()
	script := fmt.Sprintf("(sleep 30; touch %s/bg) & echo $! > %s/pid; sleep 30", dir, dir)
	_, res, err := sh(c, context.Background(), script, 300*time.Millisecond)
	if err != nil || !res.TimedOut {
		t.Fatalf("res %+v err %v", res, err)
	}
	b, _ := os.ReadFile(dir + "/pid")
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if pid <= 0 {
		t.Fatalf("no pid %q", b)
	}
	waitGone(t, pid)
}

// waitGone waits for pid to be gone (or a zombie).
func waitGone(t *testing.T, pid int) {
	t.Helper()
	for range 200 {
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil || strings.Contains(string(stat), ") Z ") {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("process %d still runs", pid)
}

func TestCancelKills(t *testing.T) {
	c := start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, _, err := sh(c, ctx, "sleep 30", 0)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v", err)
	}
	// The channel still works.
	out, _, err := sh(c, context.Background(), "echo ok", 0)
	if err != nil || out != "ok\n" {
		t.Fatalf("out %q err %v", out, err)
	}
}

// A setsid child that leaves the group is killed once no command runs.
func TestOrphansSweptWhenIdle(t *testing.T) {
	c := start(t)
	dir := t.TempDir()
	_, _, err := sh(c, context.Background(), fmt.Sprintf("setsid sh -c 'echo $$ > %s/pid; exec sleep 30' </dev/null >/dev/null 2>&1 & sleep 0.2", dir), 0)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(dir + "/pid")
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if pid <= 0 {
		t.Fatalf("no pid %q", b)
	}
	waitGone(t, pid)
}

// The supervisor killed mid-call: the call errors cleanly, and a new
// channel works.
func TestSupervisorKilledMidCall(t *testing.T) {
	c := start(t)
	done := make(chan error, 1)
	go func() {
		_, _, err := sh(c, context.Background(), "sleep 30", 0)
		done <- err
	}()
	time.Sleep(100 * time.Millisecond)
	syscall.Kill(c.Hello().PID, syscall.SIGKILL)
	select {
	case err := <-done:
		var ce *client.ChannelError
		if !errors.As(err, &ce) {
			t.Fatalf("err %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the call hangs")
	}
	c2 := start(t)
	if out, _, err := sh(c2, context.Background(), "echo again", 0); err != nil || out != "again\n" {
		t.Fatalf("out %q err %v", out, err)
	}
}

func TestConcurrentCalls(t *testing.T) {
	c := start(t)
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, res, err := sh(c, context.Background(), fmt.Sprintf("head -c 100000 /dev/zero | tr '\\0' a; echo %d; exit %d", i, i%7), 0)
			want := strings.Repeat("a", 100000) + strconv.Itoa(i) + "\n"
			if err != nil || out != want || res.ExitCode != i%7 {
				errs <- fmt.Errorf("call %d: len %d res %+v err %v", i, len(out), res, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// The server killed while a command writes: the supervisor's next write
// to its stdout finds no reader. It must not die of SIGPIPE there (Go
// kills a program for a broken pipe on fd 1 unless it asks for SIGPIPE)
// but see the channel end and kill what the commands left, setsid
// children too — not leave them running under init (a CI flake of
// TestE2EHostBashSetsidChildrenReaped/server_killed). Its commands still
// start with SIGPIPE at its default.
func TestServerGoneMidOutputKillsOrphans(t *testing.T) {
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := supervisortest.Command(t, "supervise")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	inR.Close()
	outW.Close()
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-exited })
	c, err := client.NewConn(context.Background(), outR, inW, closerFunc(func() error { return nil }))
	if err != nil {
		t.Fatal(err)
	}
	out, _, err := sh(c, context.Background(), "grep SigIgn /proc/self/status", 0)
	if err != nil {
		t.Fatal(err)
	}
	var ign uint64
	fmt.Sscanf(strings.TrimSpace(strings.TrimPrefix(out, "SigIgn:")), "%x", &ign)
	if ign&(1<<(uint(syscall.SIGPIPE)-1)) != 0 {
		t.Fatalf("commands start with SIGPIPE ignored: %q", out)
	}
	dir := t.TempDir()
	go sh(c, context.Background(), fmt.Sprintf("setsid sh -c 'echo $$ > %s/pid; exec sleep 300' </dev/null >/dev/null 2>&1 & while :; do echo xxxxxxxxxxxxxxxx; done", dir), 0)
	var pid int
	for range 500 {
		b, _ := os.ReadFile(dir + "/pid")
		if pid, _ = strconv.Atoi(strings.TrimSpace(string(b))); pid > 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if pid <= 0 {
		t.Fatal("the setsid child never started")
	}
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
	// The server dies: both ends of its pipes close at once.
	outR.Close()
	inW.Close()
	select {
	case <-exited:
		var ee *exec.ExitError
		if errors.As(waitErr, &ee) {
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				t.Fatalf("the supervisor died of %v, leaving its commands behind", ws.Signal())
			}
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the supervisor still runs 10 s after its channel ended")
	}
	waitGone(t, pid)
}

type closerFunc func() error

func (f closerFunc) Close() error { return f() }
