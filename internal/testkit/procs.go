package testkit

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
)

// Marked lists the live processes whose environment holds marker (a
// KEY=VALUE the test exported in the command it ran). Pids inside a PID
// namespace (bubblewrap) differ from the host's, so a test finds its
// processes by a marker, never by a pid they report.
func Marked(marker string) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if err != nil || !bytes.Contains(env, []byte(marker)) || gone(pid) {
			continue
		}
		pids = append(pids, pid)
	}
	return pids
}

// gone says whether pid no longer runs: no such process, or a zombie
// nobody reaped (PID 1 in a container may never reap orphans).
func gone(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// pid (comm) S ...: the state follows the last ')'.
	if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) {
		return stat[i+2] == 'Z' || stat[i+2] == 'X'
	}
	return false
}
