package cgroups

import (
	"fmt"
	"path"
	"slices"
	"strings"
)

// Limits bound one thread's processes.
type Limits struct {
	Pids   int64   // processes and threads at once
	Memory int64   // bytes of memory, swap included
	CPU    float64 // CPUs' worth of time
}

// The controllers, in the order reports list them.
const (
	Pids   = "pids"
	Memory = "memory"
	CPU    = "cpu"
)

var controllers = []string{Pids, Memory, CPU}

// cpuacct is v1's CPU accounting controller: a thread's cgroup there bounds
// nothing, but says how much CPU time its processes used (cpuacct.stat),
// which v1's cpu controller does not. v2 needs none: every v2 cgroup has
// its cpu.stat.
const cpuacct = "cpuacct"

// Report says which limits hold and, for those that do not, why.
type Report struct {
	Holding []string // of Pids, Memory, CPU, in that order
	Missing []string // the others
	Reason  string   // why Missing do not hold; "" when none is missing
	Version string   // "v2", "v1", "v1 and v2"; "" when none holds
	Dirs    []string // the instance's cgroups, one per hierarchy
}

// mount is a cgroup file system as /proc/self/mountinfo lists it.
type mount struct {
	v2    bool
	point string   // where it is mounted
	root  string   // the cgroup it shows there (not "/" in a container)
	ctls  []string // v1: the controllers it carries
}

// parseMounts reads the cgroup file systems of a mount table in the format
// of /proc/self/mountinfo.
func parseMounts(mountinfo string) []mount {
	var out []mount
	for line := range strings.SplitSeq(mountinfo, "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		f, g := strings.Fields(pre), strings.Fields(post)
		if len(f) < 5 || len(g) < 3 {
			continue
		}
		m := mount{root: unescape(f[3]), point: unescape(f[4])}
		switch g[0] {
		case "cgroup2":
			m.v2 = true
		case "cgroup":
			for o := range strings.SplitSeq(g[2], ",") {
				if slices.Contains(controllers, o) || o == cpuacct || o == "cpuset" {
					m.ctls = append(m.ctls, o)
				}
			}
		default:
			continue
		}
		if !path.IsAbs(m.root) || !path.IsAbs(m.point) {
			continue
		}
		out = append(out, m)
	}
	return out
}

// unescape undoes mountinfo's octal escapes ("\040" for a space).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && isOctal(s[i+1]) && isOctal(s[i+2]) && isOctal(s[i+3]) {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }

// parseSelf reads /proc/self/cgroup: the process's v2 cgroup ("" when
// none) and, by v1 controller, its cgroup in that controller's hierarchy.
func parseSelf(content string) (v2 string, v1 map[string]string) {
	v1 = map[string]string{}
	for line := range strings.SplitSeq(content, "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 || !path.IsAbs(parts[2]) {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			v2 = parts[2]
			continue
		}
		for c := range strings.SplitSeq(parts[1], ",") {
			v1[c] = parts[2]
		}
	}
	return v2, v1
}

// dirOf is where cgroup cg is seen through m, if it is.
func (m mount) dirOf(cg string) (string, bool) {
	switch {
	case m.root == "/":
		return path.Join(m.point, cg), true
	case cg == m.root:
		return m.point, true
	case strings.HasPrefix(cg, m.root+"/"):
		return path.Join(m.point, strings.TrimPrefix(cg, m.root)), true
	}
	return "", false
}

// cpuMax is a CPU limit as a quota of microseconds per period.
func cpuMax(cpus float64) (quota, period int64) {
	period = 100000
	quota = int64(cpus*float64(period) + 0.5)
	return max(quota, 1000), period
}

// Within reports whether dir is one of the cgroup directories this process
// sees mounted and its base name is name: what RemoveStale accepts from a
// record it did not write itself.
func within(mounts []mount, dir, name string) bool {
	if !path.IsAbs(dir) || path.Clean(dir) != dir || path.Base(dir) != name {
		return false
	}
	for _, m := range mounts {
		if strings.HasPrefix(dir, m.point+"/") {
			return true
		}
	}
	return false
}

// FormatBytes is n as a docker-style size ("4g", "512m", "1536k").
func FormatBytes(n int64) string {
	for _, u := range []struct {
		s    string
		size int64
	}{{"t", 1 << 40}, {"g", 1 << 30}, {"m", 1 << 20}, {"k", 1 << 10}} {
		if n >= u.size && n%u.size == 0 {
			return fmt.Sprint(n/u.size) + u.s
		}
	}
	return fmt.Sprint(n) + "b"
}
