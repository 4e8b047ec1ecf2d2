package audit

import (
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/windows"
)

// reserve checks that the volume of f has room for the reserved n bytes
// and free more (the bytes free to this user, quotas counted); nothing is
// allocated ahead (see reserve_linux.go).
func reserve(f *os.File, size, n, free int64) error {
	dir, err := windows.UTF16PtrFromString(filepath.Dir(f.Name()))
	if err != nil {
		return err
	}
	var avail, total, totalFree uint64
	if err := windows.GetDiskFreeSpaceEx(dir, &avail, &total, &totalFree); err != nil {
		return err
	}
	if avail < uint64(n+free) {
		return syscall.ENOSPC
	}
	return nil
}
