//go:build linux

package daemon

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// The box's cgroups are found as /proc/self/cgroup names them on the
// mounts of /proc/self/mountinfo: a container's (its cgroup is the
// mount's root), a host process's (a path below the mount), v1 and v2.
func TestLocateCgroups(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	mk := func(p string) string {
		d := filepath.Join(root, p)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	v2 := mk("v2")
	mem := mk("memory")
	memThread := mk("memory/inst/thread/sandbox")
	pids := mk("pids")
	mi := func(lines ...string) string { return strings.Join(lines, "\n") }
	for _, tc := range []struct {
		name, own, mountinfo string
		want                 [][]string
	}{
		{"v2 container", "0::/\n", mi("30 25 0:26 / " + v2 + " ro,nosuid - cgroup2 cgroup2 rw"), [][]string{{v2}}},
		{"v2 host", "0::/a/b\n", mi("30 25 0:26 / " + root + " rw - cgroup2 cgroup2 rw"), nil},
		{"v1 host, chain to the mount", "4:memory:/inst/thread/sandbox\n8:pids:/\n",
			mi("31 25 0:27 / "+mem+" rw - cgroup cgroup rw,memory", "32 25 0:28 / "+pids+" rw - cgroup cgroup rw,pids"),
			[][]string{{memThread, filepath.Dir(memThread), filepath.Dir(filepath.Dir(memThread)), mem}, {pids}}},
		{"v1 container", "4:memory:/docker/abc\n", mi("31 25 0:27 /docker/abc " + mem + " ro - cgroup cgroup rw,memory"), [][]string{{mem}}},
		{"other controllers and file systems", "3:cpuset:/\n", mi("31 25 0:27 / "+mem+" rw - cgroup cgroup rw,cpuset", "1 0 0:1 / / rw - ext4 /dev/sda rw"), nil},
		{"a path not below the mount's root", "4:memory:/elsewhere\n", mi("31 25 0:27 /docker/abc " + mem + " ro - cgroup cgroup rw,memory"), nil},
	} {
		var got [][]string
		for _, c := range locateCgroups(tc.own, tc.mountinfo) {
			got = append(got, c.chain)
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
	}
}

// A limit is the tightest of the chain; "max" and v1's huge values are
// none (0).
func TestCgroupLimitAndCPU(t *testing.T) {
	t.Parallel()
	leaf := t.TempDir()
	parent := t.TempDir()
	write := func(dir, name, v string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(leaf, "memory.max", "max")
	write(parent, "memory.max", "67108864")
	write(leaf, "pids.max", "max")
	write(leaf, "memory.limit_in_bytes", "9223372036854771712")
	write(leaf, "cpu.max", "max 100000")
	write(parent, "cpu.max", "150000 100000")
	write(leaf, "memory.events", "low 0\nhigh 0\nmax 3\noom 1\noom_kill 2\n")
	cgs := []cgroupDir{{chain: []string{leaf, parent}}}
	if n := cgroupLimit(cgs, "memory.max"); n == nil || *n != 64<<20 {
		t.Errorf("memory.max: %v", n)
	}
	if n := cgroupLimit(cgs, "pids.max"); n == nil || *n != 0 {
		t.Errorf("pids.max: %v", n)
	}
	if n := cgroupLimit(cgs, "memory.limit_in_bytes"); n == nil || *n != 0 {
		t.Errorf("v1 no limit: %v", n)
	}
	if n := cgroupLimit(cgs, "nothing"); n != nil {
		t.Errorf("a missing file: %v", *n)
	}
	if c := cpuLimit(cgs); c == nil || *c != 1.5 {
		t.Errorf("cpu: %v", c)
	}
	if n := oomKills(cgs); n == nil || *n != 2 {
		t.Errorf("oom kills: %v", n)
	}
}

// The walk sums regular files' sizes and stops at its bound.
func TestDiskUse(t *testing.T) {
	t.Parallel()
	d := t.TempDir()
	os.MkdirAll(filepath.Join(d, "a/b"), 0o755)
	os.WriteFile(filepath.Join(d, "a/b/f"), make([]byte, 1000), 0o644)
	os.WriteFile(filepath.Join(d, "g"), make([]byte, 24), 0o644)
	os.Symlink("/etc/passwd", filepath.Join(d, "l"))
	if b, n, cut := diskUse(d, 100); b != 1024 || n != 5 || cut {
		t.Errorf("got %d bytes, %d entries, cut %v", b, n, cut)
	}
	if _, n, cut := diskUse(d, 2); n != 2 || !cut {
		t.Errorf("bounded: %d entries, cut %v", n, cut)
	}
}

// One usage request answers the cgroup the daemon is in (this test's, on a
// host with cgroups), its jobs and the bytes under a directory.
func TestUsageRequest(t *testing.T) {
	t.Parallel()
	c := start(t)
	d := t.TempDir()
	os.WriteFile(filepath.Join(d, "f"), make([]byte, 5000), 0o644)
	u, err := c.Usage(t.Context(), d)
	if err != nil {
		t.Fatal(err)
	}
	if u.DiskBytes == nil || *u.DiskBytes != 5000 || u.DiskFiles != 1 || u.JobsRunning == nil || *u.JobsRunning != 0 {
		t.Errorf("disk %v files %d jobs %v", u.DiskBytes, u.DiskFiles, u.JobsRunning)
	}
	if _, err := os.Stat("/proc/self/cgroup"); err == nil && u.Cgroup == "" && os.Getenv("SANDBOX_MCP_REQUIRE_CGROUPS") == "1" {
		t.Fatal("no cgroup found")
	}
	if u.Cgroup != "" && (u.MemoryBytes == nil || *u.MemoryBytes <= 0) {
		t.Errorf("cgroup %s, memory %v", u.Cgroup, u.MemoryBytes)
	}
	t.Logf("cgroup %s memory %v peak %v max %v pids %v/%v cpu %v+%v limit %v", u.Cgroup, deref(u.MemoryBytes), deref(u.MemoryPeakBytes), deref(u.MemoryMaxBytes), deref(u.Pids), deref(u.PidsMax), deref(u.CPUUserSec), deref(u.CPUSystemSec), deref(u.CPULimit))
}

func deref[T any](p *T) any {
	if p == nil {
		return "nil"
	}
	return *p
}

// v1 counts an OOM kill in the victim's own cgroup: the box's children's
// count too.
func TestOOMKillsV1Children(t *testing.T) {
	t.Parallel()
	d := t.TempDir()
	os.Mkdir(filepath.Join(d, "sandbox"), 0o755)
	os.WriteFile(filepath.Join(d, "memory.oom_control"), []byte("oom_kill_disable 0\nunder_oom 0\noom_kill 1\n"), 0o644)
	os.WriteFile(filepath.Join(d, "sandbox", "memory.oom_control"), []byte("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n"), 0o644)
	if n := oomKills([]cgroupDir{{chain: []string{d}}}); n == nil || *n != 3 {
		t.Errorf("oom kills %v, want 3", n)
	}
	if n := oomKills([]cgroupDir{{chain: []string{t.TempDir()}}}); n != nil {
		t.Errorf("no file: %v", *n)
	}
}
