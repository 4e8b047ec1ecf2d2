// Package local is the zero-dependency provider: a thread's sandbox is a set
// of directories on the host, its file system is hostfs.FS, and bash
// runs on the host in its own process group — only when the operator allowed
// it (--allow-host-bash), because on the host a command can reach whatever
// the server's user can.
package local
