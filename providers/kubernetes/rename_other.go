//go:build !linux

package kubernetes

import (
	"errors"
	"io/fs"
	"os"
	"syscall"
)

// renameNoReplace renames directory from to to, failing (fs.ErrExist) if
// to exists. Without Linux's RENAME_NOREPLACE: a look, then a plain
// rename, which fails onto a thread's directory once it holds user-data.
func renameNoReplace(from, to string) error {
	if _, err := os.Lstat(to); err == nil {
		return fs.ErrExist
	}
	err := os.Rename(from, to)
	if errors.Is(err, syscall.ENOTEMPTY) || errors.Is(err, syscall.EEXIST) {
		return fs.ErrExist
	}
	return err
}
