//go:build linux

package daemon

import (
	"context"
	"testing"
	"time"

	client "github.com/sandbox-mcp/sandbox-mcp/supervisor"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor/supervisortest"
)

func BenchmarkExecTrue(b *testing.B) {
	c, err := client.StartProcess(context.Background(), supervisortest.Command(b, "supervise"), true)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	for b.Loop() {
		if _, err := c.Exec(context.Background(), client.ExecRequest{Argv: []string{c.Hello().Shell, "-c", "true"}, Dir: "/"}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkExecTrueShell is BenchmarkExecTrue as a Shell command: the
// state's trap (bash's export -p), the state file read back.
func BenchmarkExecTrueShell(b *testing.B) { benchShell(b, "true") }

// BenchmarkExecTrueShellCat is BenchmarkExecTrueShell when bash has a
// function: the trap's cat path (a fork and exec more).
func BenchmarkExecTrueShellCat(b *testing.B) { benchShell(b, "f() { :; }; true") }

func benchShell(b *testing.B, script string) {
	c, err := client.StartProcess(context.Background(), supervisortest.Command(b, "supervise"), true)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Exec(context.Background(), client.ExecRequest{Argv: []string{c.Hello().Shell, "-c", "export A=1"}, Dir: "/", Shell: true}); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := c.Exec(context.Background(), client.ExecRequest{Argv: []string{c.Hello().Shell, "-c", script}, Dir: "/", Shell: true}); err != nil {
			b.Fatal(err)
		}
	}
}

// The same three as an agent calls them, a pause between calls (not
// timed): a Shell command finds its spare shell ready (spare.go), a
// command without Shell starts bash afresh. ExecTrueShellPaced against
// ExecTruePaced is what keeping the shell state costs a call.
func BenchmarkExecTruePaced(b *testing.B) {
	c, err := client.StartProcess(context.Background(), supervisortest.Command(b, "supervise"), true)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	for b.Loop() {
		pause(b)
		if _, err := c.Exec(context.Background(), client.ExecRequest{Argv: []string{c.Hello().Shell, "-c", "true"}, Dir: "/"}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkExecTrueShellPaced(b *testing.B) { benchShellPaced(b, "true") }

func BenchmarkExecTrueShellCatPaced(b *testing.B) { benchShellPaced(b, "f() { :; }; true") }

func benchShellPaced(b *testing.B, script string) {
	c, err := client.StartProcess(context.Background(), supervisortest.Command(b, "supervise"), true)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Exec(context.Background(), client.ExecRequest{Argv: []string{c.Hello().Shell, "-c", "export A=1"}, Dir: "/", Shell: true}); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		pause(b)
		if _, err := c.Exec(context.Background(), client.ExecRequest{Argv: []string{c.Hello().Shell, "-c", script}, Dir: "/", Shell: true}); err != nil {
			b.Fatal(err)
		}
	}
}

// pause waits 20 ms untimed, as the model thinks between two calls.
func pause(b *testing.B) {
	b.StopTimer()
	time.Sleep(20 * time.Millisecond)
	b.StartTimer()
}
