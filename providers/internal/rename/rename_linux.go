//go:build linux

// Package rename puts what a warm box's claim makes into place (docker
// and kubernetes warm pools): the box's directories renamed to the
// thread's only when nothing is there, so that of two claims for one
// thread, or a claim and a first call that made the thread's directory,
// one fails; and its small records written whole or not at all.
package rename

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// NoReplace renames directory from to to, failing (fs.ErrExist) if to
// exists, even empty — which a plain rename would replace. Where the file
// system cannot say so (RENAME_NOREPLACE unsupported), a look then a
// plain rename, which fails onto a directory that holds anything.
func NoReplace(from, to string) error {
	err := unix.Renameat2(unix.AT_FDCWD, from, unix.AT_FDCWD, to, unix.RENAME_NOREPLACE)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
		return lookThenRename(from, to)
	}
	if err != nil {
		return &os.LinkError{Op: "rename", Old: from, New: to, Err: err}
	}
	return nil
}
