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
