//go:build unix

package main

import (
	"io/fs"
	"syscall"
)

// statOwner is fi's owner.
func statOwner(fi fs.FileInfo) (uid, gid int, ok bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0, false
	}
	return int(st.Uid), int(st.Gid), true
}
