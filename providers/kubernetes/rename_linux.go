//go:build linux

package kubernetes

import (
	"errors"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// renameNoReplace renames directory from to to, failing (fs.ErrExist) if
// to exists, even empty. Where the file system cannot say so
// (RENAME_NOREPLACE unsupported), a plain rename, which fails onto a
// thread's directory once it holds user-data.
func renameNoReplace(from, to string) error {
	err := unix.Renameat2(unix.AT_FDCWD, from, unix.AT_FDCWD, to, unix.RENAME_NOREPLACE)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
		if _, err := os.Lstat(to); err == nil {
			return fs.ErrExist
		}
		err = os.Rename(from, to)
		if errors.Is(err, unix.ENOTEMPTY) {
			return fs.ErrExist
		}
		return err
	}
	if err != nil {
		return &os.LinkError{Op: "rename", Old: from, New: to, Err: err}
	}
	return nil
}
