//go:build linux || darwin || freebsd

package checkpoint

import (
	"io/fs"
	"syscall"
)

// fileOwner is the owner of the file st describes.
func fileOwner(st fs.FileInfo) (uid, gid uint32) {
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		return sys.Uid, sys.Gid
	}
	return 0, 0
}
