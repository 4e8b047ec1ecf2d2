//go:build unix

package sandbox

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// InbandKillCommand kills the whole group under every shell a container's
// sh may be: dash (Debian), busybox, bash; and not the group of another
// command running beside it.
func TestInbandKillCommandEveryShell(t *testing.T) {
	t.Parallel()
	shells := map[string][]string{"dash": {"dash"}, "bash": {"bash"}, "busybox sh": {"busybox", "sh"}}
	for name, sh := range shells {
		if _, err := exec.LookPath(sh[0]); err != nil {
			if os.Getenv("SANDBOX_MCP_REQUIRE_SHELLS") == "1" {
				t.Fatalf("%s missing", sh[0])
			}
			t.Logf("SKIPPED %s: not installed", name)
			continue
		}
		start := func() *exec.Cmd {
			// A group of two: sh and its child sleep.
			c := exec.Command("sh", "-c", "sleep 300 & wait")
			c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			if err := c.Start(); err != nil {
				t.Fatal(err)
			}
			return c
		}
		victim, bystander := start(), start()
		argv := InbandKillCommand(victim.Process.Pid)
		argv = append(append([]string{}, sh...), argv[1:]...)
		if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
			t.Errorf("%s: %v %s", name, err, out)
		}
		ended := make(chan error, 1)
		go func() { ended <- victim.Wait() }()
		select {
		case <-ended:
		case <-time.After(20 * time.Second):
			t.Errorf("%s: the group is still running 20 s after the kill", name)
			syscall.Kill(-victim.Process.Pid, syscall.SIGKILL)
			<-ended
		}
		for deadline := time.Now().Add(20 * time.Second); syscall.Kill(-victim.Process.Pid, 0) == nil; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Errorf("%s: a child of the group is still running 20 s after the kill", name)
				syscall.Kill(-victim.Process.Pid, syscall.SIGKILL)
				break
			}
		}
		if err := syscall.Kill(-bystander.Process.Pid, 0); err != nil {
			t.Errorf("%s: another group went too: %v", name, err)
		}
		syscall.Kill(-bystander.Process.Pid, syscall.SIGKILL)
		bystander.Wait()
	}
}
