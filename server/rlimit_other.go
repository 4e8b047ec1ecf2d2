//go:build !unix

package server

// openFileLimit is the process's limit on open files (0: unknown).
func openFileLimit() int { return 0 }
