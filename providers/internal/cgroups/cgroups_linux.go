package cgroups

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// leaf is the cgroup, below a thread's, that its processes live in.
const leaf = "sandbox"

// removeWait bounds how long Remove kills and waits for what is left in a
// cgroup before it gives up (a process stuck in the kernel).
const removeWait = 5 * time.Second

// hierarchy is one cgroup file system the instance uses.
type hierarchy struct {
	v2   bool
	ctls []string // the controllers of ours it carries (cpuacct: bounds nothing)
	inst string   // the instance's cgroup there
}

// Tree is one provider instance's cgroups: a cgroup per hierarchy used,
// each thread's Group below it.
type Tree struct {
	name   string
	limits Limits
	hier   []*hierarchy
	report Report
}

// Open makes the instance's cgroups, named name, for threads bounded by
// lim, where this host and this user allow it — and, on v1, in the cpuacct
// hierarchy too, bounding nothing, so that what a thread used can be read.
// It never fails: the report says which limits hold, and why the others
// do not.
func Open(name string, lim Limits) *Tree {
	return open(name, lim, append(slices.Clone(controllers), cpuacct))
}

// open is Open for the controllers want (tests: a controller this host
// has on v2).
func open(name string, lim Limits, want []string) *Tree {
	t := &Tree{name: name, limits: lim}
	var reasons []string
	defer func() { t.report = t.makeReport(reasons) }()
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		reasons = append(reasons, err.Error())
		return t
	}
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		reasons = append(reasons, err.Error())
		return t
	}
	mounts := parseMounts(string(mi))
	if len(mounts) == 0 {
		reasons = append(reasons, "no cgroup file system is mounted here (/sys/fs/cgroup)")
		return t
	}
	v2path, v1paths := parseSelf(string(self))
	want = slices.Clone(want)
	if v2path != "" {
		for _, m := range mounts {
			dir, ok := m.dirOf(v2path)
			if !m.v2 || !ok {
				continue
			}
			h, why := t.openV2(m, dir, want)
			if h != nil {
				t.hier = append(t.hier, h)
				want = slices.DeleteFunc(want, func(c string) bool { return slices.Contains(h.ctls, c) })
			} else if why != "" {
				reasons = append(reasons, why)
			}
			break
		}
	}
	places, why := placeV1(mounts, v1paths, want)
	reasons = append(reasons, why...)
	var denied []string
	for _, pl := range places {
		h := &hierarchy{ctls: pl.ctls, inst: path.Join(pl.dir, name)}
		if err := os.Mkdir(h.inst, 0o755); err != nil {
			switch {
			case errors.Is(err, fs.ErrPermission) || errors.Is(err, unix.EROFS):
				denied = append(denied, pl.dir)
			default:
				reasons = append(reasons, fmt.Sprintf("cgroup v1 %s: %v", strings.Join(h.ctls, ","), brief(err)))
			}
			continue
		}
		if err := t.probe(h); err != nil {
			removeAll(h.inst, time.Now().Add(removeWait))
			reasons = append(reasons, fmt.Sprintf("cgroup v1 %s: %v", strings.Join(h.ctls, ","), err))
			continue
		}
		t.hier = append(t.hier, h)
	}
	if len(denied) > 0 {
		reasons = append(reasons, fmt.Sprintf("cgroup v1: uid %d may not make cgroups in %s", os.Geteuid(), strings.Join(denied, ", ")))
	}
	return t
}

// v1Place is where the instance's cgroup of one v1 hierarchy goes: under
// dir, the server's own cgroup there, for the controllers ctls.
type v1Place struct {
	dir  string
	ctls []string
}

// placeV1 places each controller of want that a v1 hierarchy carries
// under the server's cgroup there (v1paths: /proc/self/cgroup's), one
// place per hierarchy: a mount that carries several (cpu,cpuacct) is one
// place with them all. why says where this process's cgroup cannot be
// seen.
func placeV1(mounts []mount, v1paths map[string]string, want []string) (places []v1Place, why []string) {
	at := map[string]int{} // dir -> its index in places
	for _, c := range want {
		m, ok := mountOf(mounts, c)
		if !ok {
			continue
		}
		own, ok := v1paths[c]
		if !ok {
			continue
		}
		dir, ok := m.dirOf(own)
		if !ok {
			why = append(why, fmt.Sprintf("cgroup v1 %s: this process's cgroup %s is not visible at %s", c, own, m.point))
			continue
		}
		i, seen := at[dir]
		if !seen {
			i = len(places)
			at[dir] = i
			places = append(places, v1Place{dir: dir})
		}
		places[i].ctls = append(places[i].ctls, c)
	}
	return places, why
}

// openV2 picks where the instance's v2 cgroup goes (see the package
// comment) and makes it, with those of want that the hierarchy offers
// there; nil and why when it cannot (why is "" when v2 carries none of
// ours: a hybrid host's v2, whose controllers are all v1's).
func (t *Tree) openV2(m mount, own string, want []string) (*hierarchy, string) {
	var bases []string
	if os.Geteuid() == 0 {
		bases = append(bases, m.point)
	}
	for d := path.Dir(own); strings.HasPrefix(d, m.point); d = path.Dir(d) {
		if d != m.point || !slices.Contains(bases, d) {
			bases = append(bases, d)
		}
		if d == m.point {
			break
		}
	}
	var why, denied []string
	offered := false
	for _, base := range bases {
		b, err := os.ReadFile(path.Join(base, "cgroup.controllers"))
		if err != nil {
			continue
		}
		var ctls []string
		for c := range strings.FieldsSeq(string(b)) {
			if slices.Contains(want, c) {
				ctls = append(ctls, c)
			}
		}
		if len(ctls) == 0 {
			continue
		}
		offered = true
		if unix.Access(path.Join(base, "cgroup.procs"), unix.W_OK) != nil || unix.Access(base, unix.W_OK) != nil {
			denied = append(denied, base)
			continue
		}
		h, err := t.makeV2(base, ctls)
		if err == nil {
			if err = t.probe(h); err != nil {
				removeAll(h.inst, time.Now().Add(removeWait))
			}
		}
		if err != nil {
			why = append(why, fmt.Sprintf("%s: %v", base, err))
			continue
		}
		return h, ""
	}
	if !offered {
		return nil, ""
	}
	if len(denied) > 0 {
		why = append(why, fmt.Sprintf("uid %d may not make cgroups in %s", os.Geteuid(), strings.Join(denied, ", ")))
	}
	return nil, "cgroup v2: " + strings.Join(why, "; ")
}

// makeV2 makes the instance's cgroup under base, handing it ctls.
func (t *Tree) makeV2(base string, ctls []string) (*hierarchy, error) {
	if err := enable(base, ctls); err != nil {
		return nil, err
	}
	h := &hierarchy{v2: true, ctls: ctls, inst: path.Join(base, t.name)}
	if err := os.Mkdir(h.inst, 0o755); err != nil {
		return nil, brief(err)
	}
	if err := enable(h.inst, ctls); err != nil {
		unix.Rmdir(h.inst)
		return nil, err
	}
	return h, nil
}

// enable hands ctls to dir's children (v2), those not handed yet.
func enable(dir string, ctls []string) error {
	b, err := os.ReadFile(path.Join(dir, "cgroup.subtree_control"))
	if err != nil {
		return brief(err)
	}
	on := strings.Fields(string(b))
	for _, c := range ctls {
		if slices.Contains(on, c) {
			continue
		}
		if err := write(path.Join(dir, "cgroup.subtree_control"), "+"+c); err != nil {
			if errors.Is(err, unix.EBUSY) {
				return fmt.Errorf("cannot hand %s to child cgroups: %s holds processes", c, dir)
			}
			return fmt.Errorf("cannot hand %s to child cgroups of %s: %w", c, dir, brief(err))
		}
	}
	return nil
}

// probe proves h: a process started as Group.Command starts one lands in
// a thread's cgroup with the limits written.
func (t *Tree) probe(h *hierarchy) error {
	g, err := t.group([]*hierarchy{h}, "probe")
	if err != nil {
		return err
	}
	defer g.Remove()
	cmd := exec.Command("/bin/cat", "/proc/self/cgroup")
	g.Command(cmd)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("a process cannot join a cgroup made here: %v: %s", err, strings.TrimSpace(string(out)))
	}
	if !strings.Contains(string(out), "/"+t.name+"/probe/"+leaf+"\n") {
		return fmt.Errorf("a process started in a cgroup made here is not in it: %s", strings.TrimSpace(string(out)))
	}
	return nil
}

// Report says which limits hold.
func (t *Tree) Report() Report { return t.report }

func (t *Tree) makeReport(reasons []string) Report {
	var r Report
	v1, v2 := false, false
	for _, c := range controllers {
		held := false
		for _, h := range t.hier {
			if slices.Contains(h.ctls, c) {
				held = true
				v1, v2 = v1 || !h.v2, v2 || h.v2
			}
		}
		if held {
			r.Holding = append(r.Holding, c)
		} else {
			r.Missing = append(r.Missing, c)
		}
	}
	for _, h := range t.hier {
		r.Dirs = append(r.Dirs, h.inst)
	}
	switch {
	case v1 && v2:
		r.Version = "v1 and v2"
	case v1:
		r.Version = "v1"
	case v2:
		r.Version = "v2"
	}
	if len(r.Missing) > 0 {
		if len(reasons) == 0 {
			reasons = append(reasons, "no cgroup hierarchy here carries "+strings.Join(r.Missing, ", "))
		}
		r.Reason = strings.Join(reasons, "; ")
	}
	return r
}

// Group is one thread's cgroups, one per hierarchy of the instance.
type Group struct {
	dirs  []string // the thread's cgroups, which hold the limits
	procs []string // the cgroup.procs files of their leaves
}

// Group makes the cgroups of the thread named key (a hash: never what a
// client chose) with the instance's limits. It has nothing to make, and
// is nil, when no limit holds.
func (t *Tree) Group(key string) (*Group, error) {
	if len(t.hier) == 0 {
		return nil, nil
	}
	return t.group(t.hier, key)
}

func (t *Tree) group(hier []*hierarchy, key string) (*Group, error) {
	if key == "" || key == "." || key == ".." || strings.ContainsAny(key, "/\x00") {
		return nil, fmt.Errorf("cgroup name %q", key)
	}
	g := &Group{}
	for _, h := range hier {
		dir := path.Join(h.inst, key)
		if err := os.Mkdir(dir, 0o755); err != nil {
			g.Remove()
			return nil, fmt.Errorf("make the thread's cgroup: %w", brief(err))
		}
		g.dirs = append(g.dirs, dir)
		if err := t.write(h, dir); err != nil {
			g.Remove()
			return nil, err
		}
		if err := os.Mkdir(path.Join(dir, leaf), 0o755); err != nil {
			g.Remove()
			return nil, fmt.Errorf("make the thread's cgroup: %w", brief(err))
		}
		g.procs = append(g.procs, path.Join(dir, leaf, "cgroup.procs"))
	}
	return g, nil
}

// write sets the limits of h's controllers on the thread's cgroup dir.
// Memory bounds swap too (none beyond the limit), so that swapping does
// not dodge it; an OOM kill takes the process the kernel picks in the
// cgroup (the largest), never the whole group (v2's memory.oom.group
// stays 0), so the thread's supervisor normally survives its commands.
func (t *Tree) write(h *hierarchy, dir string) error {
	quota, period := cpuMax(t.limits.CPU)
	var files [][2]string
	for _, c := range h.ctls {
		switch {
		case c == Pids:
			files = append(files, [2]string{"pids.max", strconv.FormatInt(t.limits.Pids, 10)})
		case c == Memory && h.v2:
			files = append(files, [2]string{"memory.max", strconv.FormatInt(t.limits.Memory, 10)}, [2]string{"memory.swap.max?", "0"})
		case c == Memory:
			m := strconv.FormatInt(t.limits.Memory, 10)
			files = append(files, [2]string{"memory.limit_in_bytes", m}, [2]string{"memory.memsw.limit_in_bytes?", m})
		case c == CPU && h.v2:
			files = append(files, [2]string{"cpu.max", fmt.Sprintf("%d %d", quota, period)})
		case c == CPU:
			files = append(files, [2]string{"cpu.cfs_period_us", strconv.FormatInt(period, 10)}, [2]string{"cpu.cfs_quota_us", strconv.FormatInt(quota, 10)})
		}
	}
	for _, f := range files {
		name, optional := strings.CutSuffix(f[0], "?")
		err := write(path.Join(dir, name), f[1])
		switch {
		case err == nil:
		case optional && errors.Is(err, fs.ErrNotExist): // no swap accounting here
		case name == "cpu.cfs_quota_us" && errors.Is(err, unix.EINVAL):
			// v1 refuses a quota above the parent's: the parent's,
			// tighter, bounds the thread.
			if err := write(path.Join(dir, name), "-1"); err != nil {
				return fmt.Errorf("set %s of the thread's cgroup: %w", name, brief(err))
			}
		default:
			return fmt.Errorf("set %s of the thread's cgroup to %s: %w", name, f[1], brief(err))
		}
	}
	return nil
}

// Dirs are the thread's cgroups, one per hierarchy: where its limits,
// and what it uses, can be read.
func (g *Group) Dirs() []string { return g.dirs }

// joinScript runs as sh -c joinScript sh N FILE... COMMAND...: it writes
// its own pid into the N cgroup.procs files, then execs the command, which
// so starts — and forks everything it forks — inside those cgroups. It
// fails (exit 125) rather than run the command unbounded.
const joinScript = `n=$1; shift
while [ "$n" -gt 0 ]; do
	{ echo $$ >"$1"; } 2>/dev/null || { echo "sandbox-mcp: cannot join the thread's cgroup" >&2; exit 125; }
	shift; n=$((n-1))
done
exec "$@"`

// Command makes cmd start inside the group: through /bin/sh, which joins
// the group and then execs cmd's program with its arguments. Set it after
// everything else of cmd but its I/O and SysProcAttr.
func (g *Group) Command(cmd *exec.Cmd) {
	args := append([]string{"sh", "-c", joinScript, "sh", strconv.Itoa(len(g.procs))}, g.procs...)
	args = append(args, cmd.Path)
	cmd.Args = append(args, cmd.Args[1:]...)
	cmd.Path = "/bin/sh"
}

// Remove kills whatever still runs in the group's cgroups and removes
// them.
func (g *Group) Remove() error {
	if g == nil {
		return nil
	}
	deadline := time.Now().Add(removeWait)
	var errs []error
	for _, d := range g.dirs {
		errs = append(errs, removeAll(d, deadline))
	}
	return errors.Join(errs...)
}

// Close removes the instance's cgroups, and any thread's still there.
func (t *Tree) Close() error {
	deadline := time.Now().Add(removeWait)
	var errs []error
	for _, h := range t.hier {
		errs = append(errs, removeAll(h.inst, deadline))
	}
	t.hier = nil
	return errors.Join(errs...)
}

// RemoveStale removes the cgroups of an instance named name that ended
// without Close (a server killed): dirs is its Report's Dirs, as recorded
// then. A directory that is not a cgroup of that name is left alone.
func RemoveStale(name string, dirs []string) error {
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	mounts := parseMounts(string(mi))
	deadline := time.Now().Add(removeWait)
	var errs []error
	for _, d := range dirs {
		if !within(mounts, d, name) {
			continue // not a cgroup of that name (its file system gone?): not ours to touch
		}
		errs = append(errs, removeAll(d, deadline))
	}
	return errors.Join(errs...)
}

// removeAll removes the cgroup dir and those below it, killing what runs
// there; it waits up to deadline for the killed to be gone.
func removeAll(dir string, deadline time.Time) error {
	for pause := time.Millisecond; ; pause = min(2*pause, 20*time.Millisecond) {
		ents, err := os.ReadDir(dir)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		for _, e := range ents {
			if e.IsDir() {
				if err := removeAll(path.Join(dir, e.Name()), deadline); err != nil {
					return err
				}
			}
		}
		kill(dir)
		err = unix.Rmdir(dir)
		if err == nil || errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
			return fmt.Errorf("remove cgroup %s: %w", dir, err)
		}
		time.Sleep(pause) // the killed are still exiting
	}
}

// kill kills the processes in cgroup dir: with cgroup.kill where the
// kernel has it (v2, Linux 5.14), else each listed process, through a
// pidfd opened while it was listed (a pid that ended and was reused by
// another process outside is never signalled).
func kill(dir string) {
	if write(path.Join(dir, "cgroup.kill"), "1") == nil {
		return
	}
	procs := path.Join(dir, "cgroup.procs")
	fds := map[int]int{}
	for _, pid := range readPids(procs) {
		if fd, err := unix.PidfdOpen(pid, 0); err == nil {
			fds[pid] = fd
		}
	}
	if len(fds) == 0 {
		return
	}
	for _, pid := range readPids(procs) {
		if fd, ok := fds[pid]; ok {
			unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
		}
	}
	for _, fd := range fds {
		unix.Close(fd)
	}
}

func readPids(file string) []int {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil
	}
	var pids []int
	for f := range strings.FieldsSeq(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
			pids = append(pids, pid)
		}
	}
	return pids
}

// write writes a cgroup file (which must exist) in one write.
func write(file, value string) error {
	f, err := os.OpenFile(file, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(value)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// brief is err without the path of a *fs.PathError, whose message names
// its file in full.
func brief(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s %s: %w", pe.Op, path.Base(pe.Path), pe.Err)
	}
	return err
}

// mountOf is the v1 mount that carries controller c.
func mountOf(mounts []mount, c string) (mount, bool) {
	for _, m := range mounts {
		if !m.v2 && slices.Contains(m.ctls, c) {
			return m, true
		}
	}
	return mount{}, false
}
