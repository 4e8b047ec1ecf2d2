package daemon

import "golang.org/x/sys/unix"

// becomeSubreaper makes the supervisor the parent of every orphan of its
// commands, whatever session or group they moved to, so that it can kill
// them.
func becomeSubreaper() { unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) }
