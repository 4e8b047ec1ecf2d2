//go:build unix

package supervisor

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/supervisor/internal/procstat"
)

// stopGrace is how long a supervisor whose channel was closed may take to
// kill its commands and exit before its process group is killed.
const stopGrace = 2 * time.Second

// StartProcess starts cmd — a supervisor serving its stdin and stdout,
// directly or inside a sandbox (bwrap) — in its own process group, and
// returns the channel to it. Closing the channel closes the supervisor's
// stdin (it kills its commands and exits), then kills the group if it
// lingers. cmd.ExtraFiles are closed once it started.
//
// With session, the supervisor leads a session of its own instead (it
// runs on the host, with no namespace to end), and closing the channel
// also kills every process left in that session: the commands of a
// supervisor that was killed or stopped. (A command that starts a session
// of its own and then kills its supervisor leaves that session behind:
// only a PID namespace holds that.)
func StartProcess(ctx context.Context, cmd *exec.Cmd, session bool) (*Conn, error) {
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	// Not StdoutPipe: Wait would close it under the reader, which would
	// then fail with "file already closed" rather than see the end.
	stdout, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout = pw
	tail := &tailBuffer{max: 2048}
	cmd.Stderr = tail
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	if session {
		cmd.SysProcAttr.Setsid = true
	} else {
		cmd.SysProcAttr.Setpgid = true
	}
	err = cmd.Start()
	pw.Close()
	for _, f := range cmd.ExtraFiles {
		f.Close()
	}
	if err != nil {
		stdout.Close()
		return nil, fmt.Errorf("start the supervisor: %w", err)
	}
	p := &process{cmd: cmd, stdin: stdin, stdout: stdout, session: session, exited: make(chan struct{})}
	go func() {
		cmd.Wait()
		close(p.exited)
	}()
	c, err := NewConn(ctx, stdout, stdin, p)
	if err != nil {
		<-p.exited
		if t := strings.TrimSpace(tail.String()); t != "" {
			err = fmt.Errorf("%w: %s", err, t)
		}
		return nil, fmt.Errorf("start the supervisor: %w", err)
	}
	return c, nil
}

// process is a supervisor started by StartProcess.
type process struct {
	cmd     *exec.Cmd
	stdin   interface{ Close() error }
	stdout  *os.File
	session bool
	exited  chan struct{}
	once    sync.Once
}

func (p *process) Close() error {
	p.once.Do(func() {
		pid := p.cmd.Process.Pid
		syscall.Kill(pid, syscall.SIGCONT) // a command may have stopped it
		p.stdin.Close()
		select {
		case <-p.exited:
		case <-time.After(stopGrace):
		}
		syscall.Kill(-pid, syscall.SIGKILL)
		<-p.exited
		p.stdout.Close()
		if p.session {
			killSession(pid)
		}
	})
	return nil
}

// tailBuffer keeps the last max bytes written to it: what a supervisor
// that failed to start said.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

// killSession kills every process of session sid, a few rounds.
func killSession(sid int) {
	for range 50 {
		pids := inSession(sid)
		if len(pids) == 0 {
			return
		}
		for _, pid := range pids {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// inSession lists the live processes of session sid (/proc: Linux; an
// empty list elsewhere).
func inSession(sid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	want := strconv.Itoa(sid)
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		f := procstat.Fields(pid)
		// state ppid pgrp session ...
		if len(f) > 3 && f[0] != "Z" && f[3] == want {
			out = append(out, pid)
		}
	}
	return out
}
