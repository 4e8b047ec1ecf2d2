//go:build unix

package server

import "syscall"

// openFileLimit is the process's limit on open files (0: unknown).
func openFileLimit() int {
	var r syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r) != nil {
		return 0
	}
	return int(min(r.Cur, 1<<30))
}
