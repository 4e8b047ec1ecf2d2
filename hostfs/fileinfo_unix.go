//go:build unix

package hostfs

import (
	"io/fs"
	"os"
	"syscall"
)

// oNoFollow opens a symlink's own file, not its target, where the OS can.
const oNoFollow = syscall.O_NOFOLLOW

// fileOwner is fi's owner, where the OS has one in a FileInfo.
func fileOwner(fi fs.FileInfo) (uid, gid int, ok bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0, false
	}
	return int(st.Uid), int(st.Gid), true
}

// dirKey names the directory dir (whose FileInfo is fi) by its device
// and inode: one key however it was reached.
func dirKey(_ *os.Root, fi fs.FileInfo) ([2]uint64, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return [2]uint64{}, false
	}
	return [2]uint64{uint64(st.Dev), uint64(st.Ino)}, true
}
