//go:build !unix && !windows

package filelock

import (
	"errors"
	"os"
)

var errUnsupported = errors.New("file locks are not supported on this OS")

func lock(f *os.File, wait bool) error {
	return &os.PathError{Op: "lock", Path: f.Name(), Err: errUnsupported}
}

func unlock(f *os.File) error {
	return &os.PathError{Op: "unlock", Path: f.Name(), Err: errUnsupported}
}
