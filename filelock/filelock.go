package filelock

import (
	"errors"
	"os"
)

// ErrLocked is returned by TryLock when another open file holds the lock.
var ErrLocked = errors.New("file is locked by another holder")

// Lock takes f's exclusive lock, waiting as long as another holds it.
func Lock(f *os.File) error { return lock(f, true) }

// TryLock takes f's exclusive lock if nobody holds it, and returns
// ErrLocked at once when somebody does.
func TryLock(f *os.File) error { return lock(f, false) }

// Unlock releases f's lock. Closing f releases it too.
func Unlock(f *os.File) error { return unlock(f) }
