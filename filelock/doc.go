// Package filelock takes and releases exclusive advisory locks on open
// files, the same way on every OS the server builds for: flock(2) on
// Unix, LockFileEx over the whole file on Windows. A lock belongs to the
// open file, so two opens of one file exclude each other, also within one
// process, and a lock goes when its file is closed or its process dies.
//
// Locks is a table of such locks by key (a file's path): per-key mutexes
// in the process, and with a directory, flocks on lock files there, so that
// several server processes sharing a state dir never lose an update.
package filelock
