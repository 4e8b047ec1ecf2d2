package audit

import (
	"os"

	"golang.org/x/sys/unix"
)

// reserve checks that f's file system has room for the reserved n bytes
// and free more: macOS has no fallocate that keeps the size, so nothing
// is allocated ahead (see reserve_linux.go).
func reserve(f *os.File, size, n, free int64) error {
	var st unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &st); err != nil {
		return err
	}
	if int64(st.Bavail)*int64(st.Bsize) < n+free {
		return unix.ENOSPC
	}
	return nil
}
