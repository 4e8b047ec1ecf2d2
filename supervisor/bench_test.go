//go:build linux

package supervisor

import (
	"context"
	"os/exec"
	"testing"
)

func BenchmarkExecTrue(b *testing.B) {
	exe, _ := Executable()
	c, err := StartProcess(context.Background(), execCommand(exe, "supervise"), true)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	for b.Loop() {
		if _, err := c.Exec(context.Background(), ExecRequest{Argv: []string{c.Hello().Shell, "-c", "true"}, Dir: "/"}); err != nil {
			b.Fatal(err)
		}
	}
}

var execCommand = exec.Command

// BenchmarkExecTrueShell is BenchmarkExecTrue as a Shell command: the
// state's trap (bash's export -p), the state file read back.
func BenchmarkExecTrueShell(b *testing.B) { benchShell(b, "true") }

// BenchmarkExecTrueShellCat is BenchmarkExecTrueShell when bash has a
// function: the trap's cat path (a fork and exec more).
func BenchmarkExecTrueShellCat(b *testing.B) { benchShell(b, "f() { :; }; true") }

func benchShell(b *testing.B, script string) {
	exe, _ := Executable()
	c, err := StartProcess(context.Background(), execCommand(exe, "supervise"), true)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Exec(context.Background(), ExecRequest{Argv: []string{c.Hello().Shell, "-c", "export A=1"}, Dir: "/", Shell: true}); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := c.Exec(context.Background(), ExecRequest{Argv: []string{c.Hello().Shell, "-c", script}, Dir: "/", Shell: true}); err != nil {
			b.Fatal(err)
		}
	}
}
