package docker

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor"
)

// The supervisor killed mid-call from inside (kill -9, as any command may):
// the call fails with a clear error, never a hang, and the next call works
// in the container made to run again, with the thread's files intact.
func TestSupervisorKilledMidCall(t *testing.T) {
	t.Parallel()
	for _, channel := range []string{channelSocket, channelExec} {
		t.Run(channel, func(t *testing.T) {
			t.Parallel()
			supervisorKilledMidCall(t, newFixture(t, func(c *Config) { c.Channel = channel }))
		})
	}
}

func supervisorKilledMidCall(t *testing.T, f *fixture) {
	sb := f.acquire(t, "killed")
	execOut(t, sb, "echo kept > /mnt/user-data/workspace/f")
	done := make(chan error, 1)
	go func() {
		_, err := sb.Exec(t.Context(), sandbox.ExecRequest{Command: "sleep 0.2; kill -9 $PPID; sleep 60", Timeout: time.Minute, Output: io.Discard})
		done <- err
	}()
	select {
	case err := <-done:
		var ce *supervisor.ChannelError
		if !errors.As(err, &ce) {
			t.Fatalf("err = %v, want the channel's failure", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the call hangs")
	}
	if out, res := execOut(t, sb, "cat /mnt/user-data/workspace/f"); out != "kept\n" || res.ExitCode != 0 {
		t.Fatalf("next call: exit %d %q", res.ExitCode, out)
	}
}

// A command that takes the supervisor's socket over and answers garbage to
// whoever dials next (another server on this state dir) gives that server
// a clear error — no crash, no hang — and, once the command is gone, the
// container's supervisor is brought back by a restart.
func TestLyingSupervisorInsideTheContainer(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	sb := f.acquire(t, "liar")
	execOut(t, sb, "true")
	fake := `import os, socket
p = "` + runDir + `/` + socketName + `"
os.unlink(p)
s = socket.socket(socket.AF_UNIX)
s.bind(p)
s.listen(8)
open("/tmp/ready", "w").close()
while True:
    c, _ = s.accept()
    open("/tmp/dialed", "w").close()
    try:
        c.sendall(b"SM\x01\x00" + b"\x00" * 8 + b"\xff\xff\xff\xff" + b"garbage" * 1000)
    except OSError:
        pass
    c.close()
`
	liar := make(chan error, 1)
	go func() {
		_, err := sb.Exec(t.Context(), sandbox.ExecRequest{Command: "python3 -c '" + fake + "'", Timeout: 8 * time.Second, Output: io.Discard})
		liar <- err
	}()
	for i := 0; ; i++ {
		if out, _ := execOut(t, sb, "test -e /tmp/ready && echo ready"); out == "ready\n" {
			break
		}
		if i > 100 {
			t.Fatal("the fake supervisor did not start")
		}
		time.Sleep(50 * time.Millisecond)
	}
	p2, err := New(t.Context(), f.cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Close()
	sb2, err := p2.Acquire(t.Context(), "liar")
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Release("liar")
	start := time.Now()
	c := sandbox.NewCapture(1<<10, 1<<10)
	_, err = sb2.Exec(t.Context(), sandbox.ExecRequest{Command: "echo hi", Timeout: time.Minute, Output: c})
	h, tl, _ := c.Result()
	switch {
	case err == nil && string(h)+string(tl) != "hi\n":
		t.Fatalf("a call through the fake supervisor: %q", string(h)+string(tl))
	case err != nil && (!strings.Contains(err.Error(), "supervisor") || time.Since(start) > 45*time.Second):
		t.Fatalf("err = %v after %v", err, time.Since(start))
	}
	// (err nil: the server gave up on the fake and restarted the container,
	// which ended it; the call then ran for real.)
	<-liar
	if out, _ := execOut(t, sb2, "test -e /tmp/dialed && echo dialed"); out != "dialed\n" {
		t.Fatal("the second server never dialed the fake: the test proves nothing")
	}
	// Once the liar is gone (its call's timeout, or the restart), calls work.
	deadline := time.Now().Add(60 * time.Second)
	for {
		out, res, err := func() (string, sandbox.ExecResult, error) {
			c := sandbox.NewCapture(1<<10, 1<<10)
			res, err := sb2.Exec(t.Context(), sandbox.ExecRequest{Command: "echo back", Timeout: time.Minute, Output: c})
			h, tl, _ := c.Result()
			return string(h) + string(tl), res, err
		}()
		if err == nil && out == "back\n" && res.ExitCode == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("never back: %q %v", out, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Forty calls at once on one container share its supervisor's channel:
// each gets its own output and exit code, whole.
func TestFortyConcurrentCallsOneContainer(t *testing.T) {
	t.Parallel()
	for _, channel := range []string{channelSocket, channelExec} {
		t.Run(channel, func(t *testing.T) {
			t.Parallel()
			fortyConcurrentCalls(t, newFixture(t, func(c *Config) { c.Channel = channel }))
		})
	}
}

func fortyConcurrentCalls(t *testing.T, f *fixture) {
	sb := f.acquire(t, "forty")
	execOut(t, sb, "true")
	errs := make(chan string, 40)
	for i := range 40 {
		go func() {
			c := sandbox.NewCapture(1<<20, 1<<20)
			res, err := sb.Exec(t.Context(), sandbox.ExecRequest{Command: fmt.Sprintf("head -c 50000 /dev/zero | tr '\\0' a; echo %d; exit %d", i, i%5), Timeout: time.Minute, Output: c})
			h, tl, _ := c.Result()
			want := strings.Repeat("a", 50000) + fmt.Sprint(i) + "\n"
			if err != nil || string(h)+string(tl) != want || res.ExitCode != i%5 {
				errs <- fmt.Sprintf("call %d: exit %d, %d bytes, err %v", i, res.ExitCode, len(h)+len(tl), err)
				return
			}
			errs <- ""
		}()
	}
	for range 40 {
		if e := <-errs; e != "" {
			t.Error(e)
		}
	}
	if got := f.ours(t, false); len(got) != 1 {
		t.Fatalf("%d containers for one thread", len(got))
	}
}

// A command attacks the relay exec that carries its own thread's channel
// (docker.channel exec): garbage and a forged frame into the relay's
// stdout, its stderr flooded, the relay killed. The call fails or ends
// cleanly, never hangs, and the next call works (red team's cases).
func TestHostileRelayExecChannel(t *testing.T) {
	t.Parallel()
	const findRelay = `for d in /proc/[0-9]*; do if tr '\0' ' ' < $d/cmdline 2>/dev/null | grep -q -- '--conn''ect'; then echo ${d#/proc/}; fi; done`
	for _, c := range []struct {
		name, cmd string
		broken    bool // the attack breaks the channel: the call fails
	}{
		{"garbage", `for p in $(` + findRelay + `); do head -c 65536 /dev/urandom > /proc/$p/fd/1; done; sleep 5`, true},
		{"forged-frame", `for p in $(` + findRelay + `); do printf 'SMCP\0\0\0\0\0\0\0\0\0\0\0\0' > /proc/$p/fd/1; done; sleep 5`, true},
		{"stderr-flood", `n=0; for p in $(` + findRelay + `); do head -c 50000000 /dev/zero > /proc/$p/fd/2; n=$((n+1)); done; echo "$n relays"`, false},
		{"kill", `for p in $(` + findRelay + `); do kill -9 $p; done; sleep 5`, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, func(cf *Config) { cf.Channel = channelExec })
			sb := f.acquire(t, "hostile-"+c.name)
			execOut(t, sb, "true")
			done := make(chan error, 1)
			out := sandbox.NewCapture(1<<10, 1<<10)
			go func() {
				_, err := sb.Exec(t.Context(), sandbox.ExecRequest{Command: c.cmd, Timeout: 20 * time.Second, Output: out})
				done <- err
			}()
			select {
			case err := <-done:
				h, _, _ := out.Result()
				if c.broken && err == nil {
					t.Fatalf("the attack on the relay did not reach it: the call succeeded (%q)", h)
				}
				if !c.broken && (err != nil || string(h) != "1 relays\n") {
					t.Fatalf("the stderr flood: %v %q, want the one relay flooded and the call answered", err, h)
				}
			case <-time.After(45 * time.Second):
				t.Fatal("the attacked call hangs")
			}
			if out, res := execOut(t, sb, "echo ok"); out != "ok\n" || res.ExitCode != 0 {
				t.Fatalf("next call: exit %d %q", res.ExitCode, out)
			}
		})
	}
}
