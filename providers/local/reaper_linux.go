package local

import (
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Host bash has no PID namespace, and a process group is no fence: a child
// that calls setsid (or double-forks into a new session) leaves the group
// that a timeout or the end of the call kills, and would outlive the call
// and the server. So host bash runs under a reaper: this same binary,
// started again under the name reaperName, made a child subreaper
// (PR_SET_CHILD_SUBREAPER), so that every process the command leaves behind
// is re-parented to it, whatever session or group it moved to. When bash
// exits, when the server asks (SIGTERM: timeout or cancellation) or when
// the server dies (its parent changes), the reaper kills every child it
// has, again as their own children fall to it, until none is left.
//
// The command runs as the reaper's uid and can signal it. So bash stays in
// the reaper's process group (the one the server made and kills when the
// reaper ends, at once if the reaper dies early): a killed reaper still
// takes with it every process that never left the group. A stopped one is
// sent SIGCONT with the server's SIGTERM. What is left: a command that
// kills its reaper after starting children that left the group (setsid)
// leaves those behind, as does a process that makes itself a subreaper or
// that leaves through ptrace or a daemon manager (systemd-run, at). Only a
// PID namespace (--isolation bwrap) or a cgroup holds those.

// reaperName is argv[0] of the reaper process.
const reaperName = "sandbox-mcp-reaper"

// reaperReady is set once ReaperMain has run in this process and returned:
// the binary can be its own reaper.
var reaperReady atomic.Bool

// ReaperMain turns this process into the host-bash reaper and never
// returns when it was started as one; otherwise it notes that this binary
// can serve as the reaper and returns at once. main calls it first thing;
// a binary that does not (a test binary of another package) runs host bash
// without a reaper.
func ReaperMain() {
	if len(os.Args) < 2 || os.Args[0] != reaperName {
		reaperReady.Store(true)
		return
	}
	os.Exit(reap(os.Args[1:]))
}

// reaperCommand is argv for running argv under the reaper, or nil when
// this binary cannot be its own reaper.
func reaperCommand() (path string, args []string) {
	if !reaperReady.Load() {
		return "", nil
	}
	return "/proc/self/exe", []string{reaperName}
}

// reap runs argv in this process's group and, when it ends, kills every
// process it left. Its exit code is the command's (128+N for a signal).
func reap(argv []string) int {
	parent := os.Getppid()
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		os.Stderr.WriteString("sandbox-mcp-reaper: " + err.Error() + "\n")
		return 126
	}
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	pid, err := syscall.ForkExec(argv[0], argv, &syscall.ProcAttr{
		Env:   os.Environ(),
		Files: []uintptr{0, 1, 2},
	})
	if err != nil {
		os.Stderr.WriteString("sandbox-mcp-reaper: " + argv[0] + ": " + err.Error() + "\n")
		return 127
	}
	code := make(chan int, 1)
	go func() {
		// Every child is reaped as it exits, not only bash: the orphans
		// re-parented here would otherwise stay zombies until the call ends.
		// Only until the sweep starts: a reap here while killChildren
		// blocks in wait could leave it waiting on a child nobody killed.
		// So wait without reaping (WNOWAIT), then reap under sweepMu.
		var ws syscall.WaitStatus
		for {
			var info unix.Siginfo
			err := unix.Waitid(unix.P_ALL, 0, &info, unix.WEXITED|unix.WNOWAIT, nil)
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				code <- 137 // reaped by the sweep below, after a kill
				return
			}
			sweepMu.Lock()
			if sweeping {
				sweepMu.Unlock()
				return
			}
			wpid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			sweepMu.Unlock()
			if err != nil || wpid != pid {
				continue
			}
			if ws.Signaled() {
				code <- 128 + int(ws.Signal())
			} else {
				code <- ws.ExitStatus()
			}
			return
		}
	}()
	orphaned := time.NewTicker(200 * time.Millisecond)
	defer orphaned.Stop()
	exit := -1
wait:
	for {
		select {
		case exit = <-code:
			break wait
		case <-term:
			break wait
		case <-orphaned.C:
			if os.Getppid() != parent {
				break wait // the server died
			}
		}
	}
	// Not the group: this process is in it. bash, if it still runs, is a
	// child like the others.
	killChildren()
	if exit < 0 {
		select {
		case exit = <-code:
		default:
			exit = 137
		}
	}
	return exit
}

// sweepMu guards sweeping, set when killChildren starts: from then on it
// alone reaps.
var (
	sweepMu  sync.Mutex
	sweeping bool
)

// killChildren kills every child of this process and reaps it, until none
// is left: a killed child's own children are re-parented here and go in a
// later round.
func killChildren() {
	sweepMu.Lock()
	sweeping = true // reap's waiter stops reaping
	sweepMu.Unlock()
	self := os.Getpid()
	for {
		for _, c := range childrenOf(self) {
			syscall.Kill(c, syscall.SIGKILL)
		}
		_, err := unix.Wait4(-1, nil, unix.WALL, nil)
		if err == unix.ECHILD {
			return
		}
		for { // the rest of this round, without a /proc scan each
			wpid, err := unix.Wait4(-1, nil, unix.WALL|unix.WNOHANG, nil)
			if err == unix.ECHILD {
				return
			}
			if wpid <= 0 && err != unix.EINTR {
				break
			}
		}
	}
}

// childrenOf lists the processes whose parent is pid.
func childrenOf(pid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		s := string(stat)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out = append(out, p)
		}
	}
	return out
}
