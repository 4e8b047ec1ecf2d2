package audit

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// reserve allocates the blocks of [size, size+n) to f without changing
// its size, and checks that the file system has room for free more bytes
// beyond that: a disk that is full refuses new calls even while the
// reserved room lasts, which is kept for the calls in flight. Where the
// file system cannot allocate (no fallocate), only the free space is
// checked.
func reserve(f *os.File, size, n, free int64) error {
	err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_KEEP_SIZE, size, n)
	switch {
	case errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS):
		free += n
	case err != nil:
		return err
	}
	var st unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &st); err != nil {
		return err
	}
	if int64(st.Bavail)*int64(st.Bsize) < free {
		return unix.ENOSPC
	}
	return nil
}
