package cgroups

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

func testName() string {
	var b [8]byte
	rand.Read(b[:])
	return "sandbox-mcp-test-" + hex.EncodeToString(b[:])
}

// The limits' files, v1's and v2's, get the values the kernel reads;
// swap's only where the kernel accounts it.
func TestWriteLimits(t *testing.T) {
	t.Parallel()
	tree := &Tree{limits: Limits{Pids: 64, Memory: 64 << 20, CPU: 1.5}}
	for _, c := range []struct {
		name  string
		v2    bool
		files []string
		want  map[string]string
	}{
		{"v2", true, []string{"pids.max", "memory.max", "memory.swap.max", "cpu.max"},
			map[string]string{"pids.max": "64", "memory.max": "67108864", "memory.swap.max": "0", "cpu.max": "150000 100000"}},
		{"v2 without swap accounting", true, []string{"pids.max", "memory.max", "cpu.max"},
			map[string]string{"pids.max": "64", "memory.max": "67108864", "cpu.max": "150000 100000"}},
		{"v1", false, []string{"pids.max", "memory.limit_in_bytes", "memory.memsw.limit_in_bytes", "cpu.cfs_period_us", "cpu.cfs_quota_us"},
			map[string]string{"pids.max": "64", "memory.limit_in_bytes": "67108864", "memory.memsw.limit_in_bytes": "67108864", "cpu.cfs_period_us": "100000", "cpu.cfs_quota_us": "150000"}},
		{"v1 without swap accounting", false, []string{"pids.max", "memory.limit_in_bytes", "cpu.cfs_period_us", "cpu.cfs_quota_us"},
			map[string]string{"pids.max": "64", "memory.limit_in_bytes": "67108864", "cpu.cfs_period_us": "100000", "cpu.cfs_quota_us": "150000"}},
	} {
		dir := t.TempDir()
		for _, f := range c.files {
			os.WriteFile(filepath.Join(dir, f), nil, 0o644)
		}
		if err := tree.write(&hierarchy{v2: c.v2, ctls: controllers}, dir); err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		for f, want := range c.want {
			if b, _ := os.ReadFile(filepath.Join(dir, f)); string(b) != want {
				t.Errorf("%s: %s = %q, want %q", c.name, f, b, want)
			}
		}
	}
	// cpuacct only accounts: nothing to write, alone or beside cpu (a
	// cpu,cpuacct hierarchy).
	dir := t.TempDir()
	if err := tree.write(&hierarchy{ctls: []string{cpuacct}}, dir); err != nil {
		t.Errorf("cpuacct: %v", err)
	}
	for _, f := range []string{"cpu.cfs_period_us", "cpu.cfs_quota_us"} {
		os.WriteFile(filepath.Join(dir, f), nil, 0o644)
	}
	if err := tree.write(&hierarchy{ctls: []string{CPU, cpuacct}}, dir); err != nil {
		t.Errorf("cpu,cpuacct: %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 2 {
		t.Errorf("cpu,cpuacct: %d files, want cpu's 2", len(ents))
	}
	// A limit file that is missing is an error (the controller is not
	// what it claims): never a silent no limit.
	if err := tree.write(&hierarchy{v2: true, ctls: []string{Pids}}, t.TempDir()); err == nil || !strings.Contains(err.Error(), "pids.max") {
		t.Errorf("a missing pids.max: %v", err)
	}
}

// requireRoot skips, saying why, where the test cannot make cgroups.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("SKIPPED: making cgroups at the hierarchy's root needs root")
	}
}

// On the cgroup v2 hierarchy, whatever controllers it has here (on a
// hybrid host, none of ours: they are v1's), a tree is made where root
// makes it, a process joins a thread's leaf, and Remove kills what runs
// there (cgroup.kill) and removes it all.
func TestV2Mechanics(t *testing.T) {
	requireRoot(t)
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	var m mount
	for _, mm := range parseMounts(string(mi)) {
		if mm.v2 && mm.root == "/" {
			m = mm
		}
	}
	if m.point == "" {
		t.Skip("SKIPPED: no cgroup v2 hierarchy is mounted here")
	}
	b, _ := os.ReadFile(filepath.Join(m.point, "cgroup.controllers"))
	avail := strings.Fields(string(b))
	if len(avail) == 0 {
		t.Skipf("SKIPPED: the cgroup v2 hierarchy at %s has no controller to hand down", m.point)
	}
	ctl := avail[len(avail)-1]
	before, _ := os.ReadFile(filepath.Join(m.point, "cgroup.subtree_control"))
	tree := &Tree{name: testName(), limits: Limits{Pids: 10, Memory: 64 << 20, CPU: 1}}
	h, why := tree.openV2(m, m.point, []string{ctl})
	if h == nil {
		t.Fatalf("v2 with %s at %s: %s", ctl, m.point, why)
	}
	tree.hier = []*hierarchy{h}
	t.Cleanup(func() {
		tree.Close()
		if !slices.Contains(strings.Fields(string(before)), ctl) {
			write(filepath.Join(m.point, "cgroup.subtree_control"), "-"+ctl)
		}
	})
	if h.inst != filepath.Join(m.point, tree.name) {
		t.Errorf("as root, the instance's cgroup is %s, want one at the hierarchy's root", h.inst)
	}
	if b, _ := os.ReadFile(filepath.Join(h.inst, "cgroup.subtree_control")); !strings.Contains(string(b), ctl) {
		t.Errorf("the instance does not hand %s to its threads: %q", ctl, b)
	}
	g, err := tree.Group("thread")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/bin/sleep", "100")
	g.Command(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	procs := filepath.Join(h.inst, "thread", leaf, "cgroup.procs")
	deadline := time.Now().Add(10 * time.Second)
	for len(readPids(procs)) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if pids := readPids(procs); !slices.Contains(pids, cmd.Process.Pid) {
		t.Fatalf("the command (pid %d) is not in its leaf: %v", cmd.Process.Pid, pids)
	}
	if err := g.Remove(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-waited:
	case <-time.After(5 * time.Second):
		t.Fatal("Remove left the command running")
	}
	if _, err := os.Stat(filepath.Join(h.inst, "thread")); err == nil {
		t.Error("the thread's cgroup is left")
	}
}

// On this host's hierarchies (v1 here), Open proves what holds, a
// process joins every hierarchy, and Remove kills a process left behind
// (v1 has no cgroup.kill: through pidfds) and removes everything.
func TestOpenAndRemove(t *testing.T) {
	requireRoot(t)
	tree := Open(testName(), Limits{Pids: 32, Memory: 64 << 20, CPU: 1})
	defer tree.Close()
	r := tree.Report()
	if len(r.Holding) == 0 {
		t.Skipf("SKIPPED: no limit holds here: %s", r.Reason)
	}
	g, err := tree.Group("t")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/bin/sh", "-c", "sleep 100 & cat /proc/self/cgroup; wait")
	g.Command(cmd)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	n, _ := out.Read(buf)
	for _, d := range g.Dirs() {
		if !strings.Contains(string(buf[:n]), "/"+filepath.Base(filepath.Dir(d))+"/t/"+leaf+"\n") {
			t.Errorf("the command is not in %s: %s", d, buf[:n])
		}
	}
	// On v1, where cpuacct is mounted, the thread has a cgroup there that
	// counts its CPU time (the cpu controller's own does not).
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	if m, ok := mountOf(parseMounts(string(mi)), cpuacct); ok && r.Version != "v2" {
		found := false
		for _, d := range g.Dirs() {
			if strings.HasPrefix(d, m.point+"/") {
				_, err := os.Stat(filepath.Join(d, "cpuacct.stat"))
				found = err == nil
			}
		}
		if !found {
			t.Errorf("no cgroup of the thread with cpuacct.stat in %s: %v", m.point, g.Dirs())
		}
	}
	if err := g.Remove(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	for _, d := range g.Dirs() {
		if _, err := os.Stat(d); err == nil {
			t.Errorf("%s is left", d)
		}
	}
	if err := tree.Close(); err != nil {
		t.Fatal(err)
	}
	for _, d := range r.Dirs {
		if _, err := os.Stat(d); err == nil {
			t.Errorf("%s is left", d)
		}
	}
}

// BenchmarkGroup is what a sandbox's cgroups cost: made with their
// limits, a process started in them (through sh) that exits, removed.
func BenchmarkGroup(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("SKIPPED: needs root")
	}
	tree := Open(testName(), Limits{Pids: 1024, Memory: 4 << 30, CPU: 2})
	defer tree.Close()
	if len(tree.Report().Holding) == 0 {
		b.Skip("SKIPPED: " + tree.Report().Reason)
	}
	for _, c := range []string{"make+remove", "make+run+remove", "run (no cgroup)"} {
		b.Run(c, func(b *testing.B) {
			for b.Loop() {
				var g *Group
				if c != "run (no cgroup)" {
					var err error
					if g, err = tree.Group("bench"); err != nil {
						b.Fatal(err)
					}
				}
				if c != "make+remove" {
					cmd := exec.Command("/bin/true")
					if g != nil {
						g.Command(cmd)
					}
					if err := cmd.Run(); err != nil {
						b.Fatal(err)
					}
				}
				if err := g.Remove(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// A server that is not root, on cgroup v2, uses the nearest ancestor of
// its cgroup that it may write — a delegated subtree, as a systemd user
// manager's — and moves its sandboxes there (the common ancestor's
// cgroup.procs is its own). Made here by hand: a subtree of the v2
// hierarchy given to nobody, the server (this test binary) started as
// nobody in a cgroup below it; the controller is whichever v2 has here.
func TestV2Delegated(t *testing.T) {
	requireRoot(t)
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	var m mount
	for _, mm := range parseMounts(string(mi)) {
		if mm.v2 && mm.root == "/" {
			m = mm
		}
	}
	if m.point == "" {
		t.Skip("SKIPPED: no cgroup v2 hierarchy is mounted here")
	}
	b, _ := os.ReadFile(filepath.Join(m.point, "cgroup.controllers"))
	avail := strings.Fields(string(b))
	if len(avail) == 0 {
		t.Skipf("SKIPPED: the cgroup v2 hierarchy at %s has no controller to hand down", m.point)
	}
	ctl := avail[len(avail)-1]
	before, _ := os.ReadFile(filepath.Join(m.point, "cgroup.subtree_control"))
	if err := enable(m.point, []string{ctl}); err != nil {
		t.Fatal(err)
	}
	deleg := filepath.Join(m.point, testName())
	start := filepath.Join(deleg, "start")
	for _, d := range []string{deleg, start} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		removeAll(deleg, time.Now().Add(removeWait))
		if !slices.Contains(strings.Fields(string(before)), ctl) {
			write(filepath.Join(m.point, "cgroup.subtree_control"), "-"+ctl)
		}
	})
	// Delegation (cgroup-v2.rst): the directory and its cgroup.procs,
	// cgroup.subtree_control and cgroup.threads, and the start cgroup.
	for _, f := range []string{"", "cgroup.procs", "cgroup.subtree_control", "cgroup.threads", "start", "start/cgroup.procs"} {
		if err := os.Chown(filepath.Join(deleg, f), 65534, 65534); err != nil {
			t.Fatal(err)
		}
	}
	// This test binary, where nobody can run it.
	tmp, err := os.MkdirTemp("", "cgroups-test-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	os.Chmod(tmp, 0o755)
	bin := filepath.Join(tmp, "cgroups.test")
	self, _ := os.ReadFile("/proc/self/exe")
	if err := os.WriteFile(bin, self, 0o755); err != nil {
		t.Fatal(err)
	}
	dir, err := os.Open(start)
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	cmd := exec.Command(bin, "-test.run=^TestV2DelegatedHelper$", "-test.v")
	cmd.Env = append(os.Environ(), "CGROUPS_HELPER_CONTROLLER="+ctl)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential:  &syscall.Credential{Uid: 65534, Gid: 65534},
		UseCgroupFD: true, CgroupFD: int(dir.Fd()),
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the server as nobody: %v\n%s", err, out)
	}
	inst, ok := strings.CutPrefix(firstLineWith(string(out), "INSTANCE "), "INSTANCE ")
	if !ok || filepath.Dir(inst) != deleg {
		t.Fatalf("as nobody in %s, the instance's cgroup is %q, want one in %s:\n%s", start, inst, deleg, out)
	}
	if _, err := os.Stat(inst); err == nil {
		t.Errorf("%s is left after Close", inst)
	}
}

func firstLineWith(s, prefix string) string {
	for l := range strings.SplitSeq(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}

// TestV2DelegatedHelper is the server of TestV2Delegated.
func TestV2DelegatedHelper(t *testing.T) {
	ctl := os.Getenv("CGROUPS_HELPER_CONTROLLER")
	if ctl == "" {
		t.Skip("a helper process of TestV2Delegated")
	}
	tree := open(testName(), Limits{Pids: 10, Memory: 64 << 20, CPU: 1}, []string{ctl})
	if len(tree.hier) != 1 || !tree.hier[0].v2 {
		t.Fatalf("uid %d: no v2 cgroup: %s", os.Geteuid(), tree.makeReport(nil).Reason)
	}
	fmt.Println("INSTANCE " + tree.hier[0].inst)
	g, err := tree.Group("t")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/bin/cat", "/proc/self/cgroup")
	g.Command(cmd)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "/"+tree.name+"/t/"+leaf+"\n") {
		t.Fatalf("a command is not in its thread's leaf: %v: %s", err, out)
	}
	if err := tree.Close(); err != nil {
		t.Fatal(err)
	}
}
