// Package hostfs is the one place where a virtual path becomes a host file
// operation (FS): the local provider's files, and the docker provider's
// bind-mounted thread directories. Every mapping is opened once as an
// os.Root, so that ".." and symlinks cannot leave it, and every write is
// atomic (a temporary file beside the target, renamed into place) and
// locked across processes (package filelock).
package hostfs
