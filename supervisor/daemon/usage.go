//go:build unix

package daemon

import (
	"bufio"
	"math"
	"os"
	"path"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sandbox-mcp/sandbox-mcp/supervisor/wire"
)

// What the box uses (a usage request, SPEC §19), read from the cgroup the
// supervisor is in — the box's: a container's, or the thread's cgroup the
// local provider made (inside bubblewrap, bound at wire.BoundCgroups) — by
// reading a few files; no shell runs.

// cgroupDir is one of the box's cgroups: dir holds its use, chain is dir
// and its ancestors up to the hierarchy's mount (the nearest limit is the
// one that holds).
type cgroupDir struct {
	chain []string
	// at, when set, is a descriptor of chain[0] (the supervisor's cgroups,
	// opened once: supervise.go), and rel what lies between it and this
	// directory: files are read relative to it, with no path walk from
	// the root — in a container over fuse-overlayfs, a round trip to that
	// daemon for each.
	at  *dirFD
	rel string
}

// read reads file name of the cgroup's own directory.
func (c cgroupDir) read(name string) (string, error) {
	if c.at != nil {
		return readSmallAt(c.at.fd, c.rel+name)
	}
	return readSmall(path.Join(c.chain[0], name))
}

// sub is the cgroup's child directory name.
func (c cgroupDir) sub(name string) cgroupDir {
	d := cgroupDir{chain: []string{path.Join(c.chain[0], name)}}
	if c.at != nil {
		d.at, d.rel = c.at, c.rel+name+"/"
	}
	return d
}

// readDir lists the cgroup's own directory.
func (c cgroupDir) readDir() []os.DirEntry {
	if c.at == nil {
		ents, _ := os.ReadDir(c.chain[0])
		return ents
	}
	fd, err := unix.Openat(c.at.fd, c.rel+".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	f := os.NewFile(uintptr(fd), c.chain[0])
	defer f.Close()
	ents, _ := f.ReadDir(-1)
	return ents
}

// boxCgroups finds the box's cgroups: those bound at wire.BoundCgroups, else
// those /proc/self/cgroup names, located by /proc/self/mountinfo.
func boxCgroups() []cgroupDir {
	if ents, err := os.ReadDir(wire.BoundCgroups); err == nil {
		var out []cgroupDir
		for _, e := range ents {
			if e.IsDir() {
				out = append(out, cgroupDir{chain: []string{path.Join(wire.BoundCgroups, e.Name())}})
			}
		}
		return out
	}
	own, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil
	}
	info, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	return locateCgroups(string(own), string(info))
}

// locateCgroups finds the directories of the cgroups named in own (the
// format of /proc/self/cgroup) on the mounts of mountinfo (that of
// /proc/self/mountinfo); only those of memory, pids, cpu and cpuacct, and
// v2's.
func locateCgroups(own, mountinfo string) []cgroupDir {
	type mnt struct {
		v2          bool
		ctls        map[string]bool
		root, point string
	}
	var mounts []mnt
	for line := range strings.SplitSeq(mountinfo, "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(g) < 3 {
			continue
		}
		m := mnt{root: unescapeMount(f[3]), point: unescapeMount(f[4]), ctls: map[string]bool{}}
		switch g[0] {
		case "cgroup2":
			m.v2 = true
		case "cgroup":
			for o := range strings.SplitSeq(g[2], ",") {
				m.ctls[o] = true
			}
		default:
			continue
		}
		mounts = append(mounts, m)
	}
	var out []cgroupDir
	seen := map[string]bool{}
	for line := range strings.SplitSeq(own, "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 || !path.IsAbs(parts[2]) {
			continue
		}
		v2 := parts[0] == "0" && parts[1] == ""
		for _, m := range mounts {
			if m.v2 != v2 {
				continue
			}
			if !v2 && !func() bool {
				for c := range strings.SplitSeq(parts[1], ",") {
					if m.ctls[c] && (c == "memory" || c == "pids" || c == "cpu" || c == "cpuacct") {
						return true
					}
				}
				return false
			}() {
				continue
			}
			rel, ok := strings.CutPrefix(parts[2], m.root)
			if !ok || m.root != "/" && rel != "" && rel[0] != '/' {
				continue
			}
			dir := path.Join(m.point, rel)
			if seen[dir] {
				break
			}
			if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
				continue
			}
			seen[dir] = true
			var chain []string
			for d := dir; ; d = path.Dir(d) {
				chain = append(chain, d)
				if d == m.point || d == "/" {
					break
				}
			}
			out = append(out, cgroupDir{chain: chain})
			break
		}
	}
	return out
}

// unescapeMount undoes mountinfo's octal escapes ("\040" for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// readCgroupFile reads a small cgroup file of the box's: the first of its
// cgroups (their own directory, not an ancestor's) that has it.
func readCgroupFile(cgs []cgroupDir, name string) (string, bool) {
	for _, c := range cgs {
		if b, err := c.read(name); err == nil {
			return strings.TrimSpace(b), true
		}
	}
	return "", false
}

// cgroupInt reads a file of one number.
func cgroupInt(cgs []cgroupDir, name string) *int64 {
	s, ok := readCgroupFile(cgs, name)
	if !ok {
		return nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return nil
	}
	return &n
}

// cgroupKey reads the value of key in a flat keyed file ("key value" a
// line: cpu.stat, memory.events, memory.oom_control, cpuacct.stat).
func cgroupKey(cgs []cgroupDir, name, key string) *int64 {
	s, ok := readCgroupFile(cgs, name)
	if !ok {
		return nil
	}
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if ok && k == key {
			if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
				return &n
			}
		}
	}
	return nil
}

// unlimited is where a v1 limit means none (PAGE_COUNTER_MAX pages, about
// 2^63 bytes rounded down to a page).
const unlimited = int64(1) << 60

// cgroupLimit reads a limit: the tightest of the box's cgroup and its
// ancestors; 0 when none holds; nil when no cgroup has the file.
func cgroupLimit(cgs []cgroupDir, name string) *int64 {
	for _, c := range cgs {
		var best *int64
		for _, d := range c.chain {
			b, err := readSmall(path.Join(d, name))
			if err != nil {
				continue
			}
			s := strings.TrimSpace(b)
			n, err := strconv.ParseInt(s, 10, 64)
			switch {
			case s == "max", err == nil && (n < 0 || n >= unlimited):
				n = 0
			case err != nil:
				continue
			}
			if best == nil || n > 0 && (*best == 0 || n < *best) {
				best = &n
			}
		}
		if best != nil {
			return best
		}
	}
	return nil
}

// cpuLimit reads the CPU limit (CPUs' worth): v2 cpu.max "QUOTA PERIOD",
// v1 cpu.cfs_quota_us and cpu.cfs_period_us; the tightest of the chain;
// 0 when none.
func cpuLimit(cgs []cgroupDir) *float64 {
	for _, c := range cgs {
		var best *float64
		for _, d := range c.chain {
			var quota, period float64
			if b, err := readSmall(path.Join(d, "cpu.max")); err == nil {
				q, p, _ := strings.Cut(strings.TrimSpace(b), " ")
				quota, _ = strconv.ParseFloat(q, 64)
				period, _ = strconv.ParseFloat(p, 64)
				if q == "max" {
					quota = -1
				}
			} else if b, err := readSmall(path.Join(d, "cpu.cfs_quota_us")); err == nil {
				quota, _ = strconv.ParseFloat(strings.TrimSpace(b), 64)
				b, _ := readSmall(path.Join(d, "cpu.cfs_period_us"))
				period, _ = strconv.ParseFloat(strings.TrimSpace(b), 64)
			} else {
				continue
			}
			n := 0.0
			if quota > 0 && period > 0 {
				n = quota / period
			}
			if best == nil || n > 0 && (*best == 0 || n < *best) {
				best = &n
			}
		}
		if best != nil {
			return best
		}
	}
	return nil
}

// oomKills reads how many processes the OOM killer took in the box: v2
// memory.events oom_kill (the cgroup's and its descendants'), v1
// memory.oom_control oom_kill (kernel 4.13 and later), which counts a
// kill in the victim's own cgroup only: the box's and its children's
// (the local provider's thread cgroup holds its processes in a child).
func oomKills(cgs []cgroupDir) *int64 {
	if n := cgroupKey(cgs, "memory.events", "oom_kill"); n != nil {
		return n
	}
	for _, c := range cgs {
		n := cgroupKey([]cgroupDir{c}, "memory.oom_control", "oom_kill")
		if n == nil {
			continue
		}
		for _, e := range c.readDir() {
			if e.IsDir() {
				if m := cgroupKey([]cgroupDir{c.sub(e.Name())}, "memory.oom_control", "oom_kill"); m != nil {
					*n += *m
				}
			}
		}
		return n
	}
	return nil
}

// memoryMax is the box's memory limit; 0: none, or not known.
func memoryMax(cgs []cgroupDir) int64 {
	n := cgroupLimit(cgs, "memory.max")
	if n == nil {
		n = cgroupLimit(cgs, "memory.limit_in_bytes")
	}
	if n == nil {
		return 0
	}
	return *n
}

// usage answers a usage request.
func (s *supervisor) usage(dir string) wire.JobReply {
	cgs := boxCgroups()
	u := &wire.Usage{JobsRunning: s.runningJobs()}
	if cur := cgroupInt(cgs, "memory.current"); cur != nil {
		u.Cgroup, u.MemoryBytes = "v2", cur
		u.MemoryPeakBytes = cgroupInt(cgs, "memory.peak")
		u.MemoryMaxBytes = cgroupLimit(cgs, "memory.max")
	} else if cur := cgroupInt(cgs, "memory.usage_in_bytes"); cur != nil {
		u.Cgroup, u.MemoryBytes = "v1", cur
		u.MemoryPeakBytes = cgroupInt(cgs, "memory.max_usage_in_bytes")
		u.MemoryMaxBytes = cgroupLimit(cgs, "memory.limit_in_bytes")
	}
	u.OOMKills = oomKills(cgs)
	u.Pids = cgroupInt(cgs, "pids.current")
	u.PidsMax = cgroupLimit(cgs, "pids.max")
	if us, sy := cgroupKey(cgs, "cpu.stat", "user_usec"), cgroupKey(cgs, "cpu.stat", "system_usec"); us != nil && sy != nil {
		a, b := float64(*us)/1e6, float64(*sy)/1e6
		u.CPUUserSec, u.CPUSystemSec = &a, &b
	} else if us, sy := cgroupKey(cgs, "cpuacct.stat", "user"), cgroupKey(cgs, "cpuacct.stat", "system"); us != nil && sy != nil {
		// USER_HZ, 100 on every Linux.
		a, b := float64(*us)/100, float64(*sy)/100
		u.CPUUserSec, u.CPUSystemSec = &a, &b
	}
	u.CPULimit = cpuLimit(cgs)
	if u.Cgroup == "" && (u.Pids != nil || u.CPUUserSec != nil) {
		u.Cgroup = "v1"
		if cgroupInt(cgs, "cgroup.max.depth") != nil || func() bool { _, ok := readCgroupFile(cgs, "cgroup.controllers"); return ok }() {
			u.Cgroup = "v2"
		}
	}
	if dir != "" {
		u.DiskBytes, u.DiskFiles, u.DiskCut = diskUse(dir, wire.MaxUsageFiles)
	}
	return wire.JobReply{Usage: u}
}

// diskUse sums the sizes of the regular files under dir (symlinks not
// followed), visiting at most max entries; cut says it stopped there.
func diskUse(dir string, max int) (bytes int64, files int, cut bool) {
	stack := []string{dir}
	for len(stack) > 0 {
		d := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		f, err := os.Open(d)
		if err != nil {
			continue
		}
		for {
			ents, err := f.ReadDir(256)
			for _, e := range ents {
				if files >= max {
					f.Close()
					return bytes, files, true
				}
				files++
				switch {
				case e.IsDir():
					stack = append(stack, path.Join(d, e.Name()))
				case e.Type().IsRegular():
					if fi, err := e.Info(); err == nil && fi.Size() > 0 && bytes <= math.MaxInt64-fi.Size() {
						bytes += fi.Size()
					}
				}
			}
			if err != nil { // io.EOF, or an unreadable directory: what was read counts
				break
			}
		}
		f.Close()
	}
	return bytes, files, false
}
