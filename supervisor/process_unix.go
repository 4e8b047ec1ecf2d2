//go:build unix

package supervisor

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// stopGrace is how long a supervisor whose channel was closed may take to
// kill its commands and exit before its process group is killed.
const stopGrace = 2 * time.Second

// StartProcess starts cmd — a supervisor serving its stdin and stdout,
// directly or inside a sandbox (bwrap) — in its own process group, and
// returns the channel to it. Closing the channel closes the supervisor's
// stdin (it kills its commands and exits), then kills the group if it
// lingers. cmd.ExtraFiles are closed once it started.
func StartProcess(ctx context.Context, cmd *exec.Cmd) (*Conn, error) {
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
	cmd.SysProcAttr.Setpgid = true
	err = cmd.Start()
	pw.Close()
	for _, f := range cmd.ExtraFiles {
		f.Close()
	}
	if err != nil {
		stdout.Close()
		return nil, fmt.Errorf("start the supervisor: %w", err)
	}
	p := &process{cmd: cmd, stdin: stdin, stdout: stdout, exited: make(chan struct{})}
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
	cmd    *exec.Cmd
	stdin  interface{ Close() error }
	stdout *os.File
	exited chan struct{}
	once   sync.Once
}

func (p *process) Close() error {
	p.once.Do(func() {
		p.stdin.Close()
		select {
		case <-p.exited:
		case <-time.After(stopGrace):
		}
		syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.exited
		p.stdout.Close()
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

// Executable is this binary's path, which serves as the supervisor
// (`supervise` subcommand).
func Executable() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find this binary (the sandbox's supervisor): %w", err)
	}
	return exe, nil
}
