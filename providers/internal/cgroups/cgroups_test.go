package cgroups

import (
	"reflect"
	"slices"
	"strings"
	"testing"
)

// Mount tables and /proc/self/cgroup of the hosts the package meets.
const (
	hybridMountinfo = `25 30 0:23 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
33 25 0:27 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
34 33 0:28 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
35 33 0:29 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
36 33 0:30 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
37 33 0:31 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
38 33 0:32 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
39 33 0:33 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw`
	hybridSelf = `9:name=systemd:/
8:pids:/
4:memory:/process_api/6c8b
2:cpuacct:/
1:cpu:/
0::/`
	v2Mountinfo = `30 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot`
	v2Self      = `0::/user.slice/user-1000.slice/user@1000.service/app.slice/vte-spawn-1.scope`
	// A container whose cgroups are the host's, bind-mounted from its own.
	containerMountinfo = `700 690 0:40 /docker/abc /sys/fs/cgroup/cpu,cpuacct ro,nosuid - cgroup cgroup rw,cpu,cpuacct
701 690 0:41 /docker/abc /sys/fs/cgroup/memory ro,nosuid - cgroup cgroup rw,memory
702 690 0:42 /docker/abc /sys/fs/cgroup/pids ro,nosuid - cgroup cgroup rw,pids
703 690 0:43 / /mnt/with\040space rw - cgroup cgroup rw,pids`
	containerSelf = `12:pids:/docker/abc
5:memory:/docker/abc
3:cpu,cpuacct:/docker/abc
0::/`
)

func TestParseMounts(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, mountinfo string
		want            []mount
	}{
		{"hybrid", hybridMountinfo, []mount{
			{point: "/sys/fs/cgroup/cpu", root: "/", ctls: []string{"cpu"}},
			{point: "/sys/fs/cgroup/cpuacct", root: "/", ctls: []string{"cpuacct"}},
			{point: "/sys/fs/cgroup/memory", root: "/", ctls: []string{"memory"}},
			{point: "/sys/fs/cgroup/pids", root: "/", ctls: []string{"pids"}},
			{point: "/sys/fs/cgroup/systemd", root: "/"},
			{v2: true, point: "/sys/fs/cgroup/unified", root: "/"},
		}},
		{"v2", v2Mountinfo, []mount{{v2: true, point: "/sys/fs/cgroup", root: "/"}}},
		{"container", containerMountinfo, []mount{
			{point: "/sys/fs/cgroup/cpu,cpuacct", root: "/docker/abc", ctls: []string{"cpu", "cpuacct"}},
			{point: "/sys/fs/cgroup/memory", root: "/docker/abc", ctls: []string{"memory"}},
			{point: "/sys/fs/cgroup/pids", root: "/docker/abc", ctls: []string{"pids"}},
			{point: "/mnt/with space", root: "/", ctls: []string{"pids"}},
		}},
		{"garbage", "x\n - \n1 2 3 4 5 - cgroup2\n1 2 3 rel /p - cgroup2 c rw", nil},
	} {
		if got := parseMounts(c.mountinfo); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: got %+v\nwant %+v", c.name, got, c.want)
		}
	}
}

func TestParseSelfAndDirOf(t *testing.T) {
	t.Parallel()
	v2, v1 := parseSelf(hybridSelf)
	if v2 != "/" || v1["memory"] != "/process_api/6c8b" || v1["pids"] != "/" || v1["name=systemd"] != "/" {
		t.Errorf("hybrid: v2 %q v1 %v", v2, v1)
	}
	v2, v1 = parseSelf(v2Self)
	if v2 != "/user.slice/user-1000.slice/user@1000.service/app.slice/vte-spawn-1.scope" || len(v1) != 0 {
		t.Errorf("v2: v2 %q v1 %v", v2, v1)
	}
	_, v1 = parseSelf(containerSelf)
	ms := parseMounts(containerMountinfo)
	for _, c := range []struct {
		m    mount
		cg   string
		want string
		ok   bool
	}{
		{ms[1], v1["memory"], "/sys/fs/cgroup/memory", true},
		{ms[0], v1["cpu"], "/sys/fs/cgroup/cpu,cpuacct", true},
		{ms[0], "/docker/abc/x", "/sys/fs/cgroup/cpu,cpuacct/x", true},
		{ms[0], "/docker/abcd", "", false}, // not below the mount's root
		{ms[0], "/", "", false},
		{mount{point: "/sys/fs/cgroup", root: "/"}, "/a/b", "/sys/fs/cgroup/a/b", true},
	} {
		if got, ok := c.m.dirOf(c.cg); got != c.want || ok != c.ok {
			t.Errorf("dirOf(%+v, %q) = %q %v, want %q %v", c.m, c.cg, got, ok, c.want, c.ok)
		}
	}
}

// On v1 a thread's cgroups are made in each hierarchy of a controller of
// ours, and in cpuacct's (what it used): one cgroup per hierarchy, so a
// host that mounts cpu and cpuacct together has one for both. v2 is
// never v1's to place.
func TestPlaceV1(t *testing.T) {
	t.Parallel()
	want := append(slices.Clone(controllers), cpuacct)
	for _, c := range []struct {
		name, mountinfo, self string
		want                  []v1Place
	}{
		{"separate hierarchies", hybridMountinfo, hybridSelf, []v1Place{
			{"/sys/fs/cgroup/pids", []string{Pids}},
			{"/sys/fs/cgroup/memory/process_api/6c8b", []string{Memory}},
			{"/sys/fs/cgroup/cpu", []string{CPU}},
			{"/sys/fs/cgroup/cpuacct", []string{cpuacct}},
		}},
		{"cpu,cpuacct together", containerMountinfo, containerSelf, []v1Place{
			{"/sys/fs/cgroup/pids", []string{Pids}},
			{"/sys/fs/cgroup/memory", []string{Memory}},
			{"/sys/fs/cgroup/cpu,cpuacct", []string{CPU, cpuacct}},
		}},
		{"cpuacct not mounted", strings.ReplaceAll(hybridMountinfo, "rw,cpuacct", "rw,name=other"), hybridSelf, []v1Place{
			{"/sys/fs/cgroup/pids", []string{Pids}},
			{"/sys/fs/cgroup/memory/process_api/6c8b", []string{Memory}},
			{"/sys/fs/cgroup/cpu", []string{CPU}},
		}},
		{"v2 only", v2Mountinfo, v2Self, nil},
	} {
		_, v1 := parseSelf(c.self)
		got, why := placeV1(parseMounts(c.mountinfo), v1, want)
		if !reflect.DeepEqual(got, c.want) || len(why) > 0 {
			t.Errorf("%s: got %+v %q\nwant %+v", c.name, got, why, c.want)
		}
	}
	// This process's cpuacct cgroup outside what its mount shows.
	if _, why := placeV1(parseMounts(containerMountinfo), map[string]string{cpuacct: "/elsewhere"}, want); len(why) != 1 || !strings.Contains(why[0], "cpuacct") {
		t.Errorf("a cgroup not visible at its mount: %q", why)
	}
}

// cpuacct bounds nothing: a report never says it holds or is missing, but
// its cgroup is among the instance's (removed with them, stale or not).
func TestReportCPUAcct(t *testing.T) {
	t.Parallel()
	tree := &Tree{hier: []*hierarchy{
		{ctls: []string{Pids, Memory}, inst: "/sys/fs/cgroup/pids/x"},
		{ctls: []string{cpuacct}, inst: "/sys/fs/cgroup/cpuacct/x"},
	}}
	r := tree.makeReport(nil)
	if !reflect.DeepEqual(r.Holding, []string{Pids, Memory}) || !reflect.DeepEqual(r.Missing, []string{CPU}) || r.Version != "v1" ||
		!reflect.DeepEqual(r.Dirs, []string{"/sys/fs/cgroup/pids/x", "/sys/fs/cgroup/cpuacct/x"}) {
		t.Errorf("report %+v", r)
	}
}

func TestCPUMax(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cpus  float64
		quota int64
	}{{1, 100000}, {2, 200000}, {0.5, 50000}, {0.25, 25000}, {0.01, 1000}, {0.001, 1000}, {1.234567, 123457}} {
		if q, p := cpuMax(c.cpus); q != c.quota || p != 100000 {
			t.Errorf("cpuMax(%v) = %d/%d, want %d/100000", c.cpus, q, p, c.quota)
		}
	}
}

func TestFormatBytes(t *testing.T) {
	t.Parallel()
	for n, want := range map[int64]string{4 << 30: "4g", 512 << 20: "512m", 1536 << 10: "1536k", 3 << 40: "3t", 1000: "1000b", 1 << 30 * 3 / 2: "1536m"} {
		if got := FormatBytes(n); got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

// A recorded cgroup is removed only when it is one, of the name recorded:
// a record is not a way to make the server remove any directory.
func TestWithin(t *testing.T) {
	t.Parallel()
	ms := parseMounts(hybridMountinfo)
	const name = "sandbox-mcp-0123456789abcdef-fedcba9876543210"
	for dir, want := range map[string]bool{
		"/sys/fs/cgroup/pids/" + name:                  true,
		"/sys/fs/cgroup/memory/process_api/x/" + name:  true,
		"/sys/fs/cgroup/pids/../../../../home/" + name: false,
		"/home/me/" + name:                             false,
		"/sys/fs/cgroup/pids/other":                    false,
		"/sys/fs/cgroup/pids":                          false,
		"sys/fs/cgroup/pids/" + name:                   false,
		"/sys/fs/cgroup/pids/" + name + "/":            false,
	} {
		if got := within(ms, dir, name); got != want {
			t.Errorf("within(%q) = %v, want %v", dir, got, want)
		}
	}
}
