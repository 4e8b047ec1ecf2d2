package daemon

import "golang.org/x/sys/unix"

// ioctlInQ asks how many bytes a pipe holds unread (FIONREAD).
const ioctlInQ = unix.TIOCINQ
