package rename

import (
	"errors"
	"io/fs"
	"os"
	"syscall"
)

// lookThenRename is NoReplace without the kernel's help: a look, then a
// plain rename, which fails onto a directory that holds anything.
func lookThenRename(from, to string) error {
	if _, err := os.Lstat(to); err == nil {
		return fs.ErrExist
	}
	err := os.Rename(from, to)
	if errors.Is(err, syscall.ENOTEMPTY) || errors.Is(err, syscall.EEXIST) {
		return fs.ErrExist
	}
	return err
}
