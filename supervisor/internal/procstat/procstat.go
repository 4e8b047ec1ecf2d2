// Package procstat reads /proc/PID/stat, which both sides of the
// supervisor's channel read: the daemon for its children, the server for
// what a supervisor on the host left in its session.
package procstat

import (
	"os"
	"strconv"
	"strings"
)

// Fields is /proc/PID/stat after the command name: state, ppid, pgrp,
// session, ... (the name may hold spaces and parentheses); nil when the
// process is gone (or there is no /proc).
func Fields(pid int) []string {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil
	}
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(s[i+1:])
}
