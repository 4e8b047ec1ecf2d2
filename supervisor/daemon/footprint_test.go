//go:build linux

package daemon

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	client "github.com/sandbox-mcp/sandbox-mcp/supervisor"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor/supervisortest"
)

// Targets of the daemon in every sandbox (issue #26): its release build
// (static, stripped) at most 8 MB, and at most 10 MB resident when idle
// after it ran commands, in bubblewrap and in a container. The figures
// are logged (go test -v; docs/benchmarks.md). With
// SANDBOX_MCP_FOOTPRINT_BINARY another supervisor binary is measured
// instead (the server of an earlier release, `sandbox-mcp supervise`),
// and no target is held.
func TestFootprint(t *testing.T) {
	bin, targets := os.Getenv("SANDBOX_MCP_FOOTPRINT_BINARY"), false
	if bin == "" {
		bin = supervisortest.Build(t, []string{"CGO_ENABLED=0"}, "-trimpath", "-ldflags", "-s -w")
		targets = true
	}
	fi, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %.2f MB", bin, float64(fi.Size())/1e6)
	if targets && fi.Size() > 8<<20 {
		t.Errorf("the daemon's release build is %d bytes, over 8 MiB", fi.Size())
	}
	check := func(t *testing.T, where string, pid int, c *client.Conn) {
		for _, cmd := range []string{"true", "export A=1; cd /tmp"} {
			if _, err := c.Exec(t.Context(), client.ExecRequest{Argv: []string{c.Hello().Shell, "-c", cmd}, Dir: "/", Output: io.Discard, Shell: true}); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(time.Second)
		rss, anon := statusKB(pid, "VmRSS:"), statusKB(pid, "RssAnon:")
		t.Logf("%s, idle after two commands: VmRSS %d kB, RssAnon %d kB", where, rss, anon)
		if targets && (rss == 0 || rss > 10<<10) {
			t.Errorf("%s: the idle daemon holds %d kB, over 10 MiB", where, rss)
		}
	}
	t.Run("bwrap", func(t *testing.T) {
		if _, err := exec.LookPath("bwrap"); err != nil {
			if os.Getenv("SANDBOX_MCP_REQUIRE_BWRAP") == "1" {
				t.Fatal("bubblewrap required but not found")
			}
			t.Skip("SKIPPED: no bwrap")
		}
		marker := "FOOTPRINT_" + strconv.FormatInt(time.Now().UnixNano(), 10)
		cmd := exec.Command("bwrap", "--die-with-parent", "--unshare-pid", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev",
			"--tmpfs", "/tmp", "--ro-bind", bin, "/tmp/supervisor", "--setenv", marker, "1", "/tmp/supervisor", "supervise")
		c, err := client.StartProcess(t.Context(), cmd, false)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		check(t, "bubblewrap", marked(t, marker), c)
	})
	t.Run("docker", func(t *testing.T) {
		const image = "sandbox-mcp-test:busybox" // deploy/docker/build-images.sh
		if exec.Command("docker", "image", "inspect", image).Run() != nil {
			if os.Getenv("SANDBOX_MCP_REQUIRE_DOCKER") == "1" {
				t.Fatalf("no docker engine, or no %s (deploy/docker/build-images.sh)", image)
			}
			t.Skipf("SKIPPED: no docker engine, or no %s", image)
		}
		run := t.TempDir()
		os.Chmod(run, 0o777)
		name := "sandbox-mcp-footprint-" + strconv.FormatInt(time.Now().UnixNano(), 36)
		if out, err := exec.Command("docker", "run", "-d", "--rm", "--name", name, "--network", "none", "-v", bin+":/.sandbox-mcp/sandbox-mcp:ro",
			"-v", run+":/.sandbox-mcp/run", "--entrypoint", "/.sandbox-mcp/sandbox-mcp", image, "supervise", "--listen", "/.sandbox-mcp/run/sock").CombinedOutput(); err != nil {
			t.Fatalf("docker run: %v %s", err, out)
		}
		defer exec.Command("docker", "rm", "-f", name).Run()
		out, err := exec.Command("docker", "inspect", "-f", "{{.State.Pid}}", name).Output()
		pid, _ := strconv.Atoi(strings.TrimSpace(string(out)))
		if err != nil || pid <= 0 {
			t.Fatalf("the container's pid: %q %v", out, err)
		}
		var c *client.Conn
		for range 500 {
			if s, err := client.DialSocket(run, "sock"); err == nil {
				ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
				c, err = client.NewConn(ctx, s, s, s)
				cancel()
				if err != nil {
					t.Fatal(err)
				}
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if c == nil {
			t.Fatal("the container's supervisor does not listen")
		}
		defer c.Close()
		check(t, "a container", pid, c)
	})
}

// statusKB is a field of /proc/PID/status, in kB.
func statusKB(pid int, field string) int {
	b, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == field {
			n, _ := strconv.Atoi(f[1])
			return n
		}
	}
	return 0
}

// marked is the pid of the process (not bwrap) whose environment holds
// marker.
func marked(t *testing.T, marker string) int {
	for range 500 {
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
			exe, _ := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
			if err == nil && strings.Contains(string(env), marker+"=") && filepath.Base(exe) != "bwrap" {
				return pid
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("the supervisor's process is not found")
	return 0
}
