//go:build !linux && !darwin && !windows

package audit

import "os"

// reserve does nothing where the free space is not known to this build:
// a full disk then shows as a failed or short write, which Record undoes.
func reserve(f *os.File, size, n, free int64) error { return nil }
