//go:build unix && !linux

package daemon

// ioctlInQ asks how many bytes a pipe holds unread: FIONREAD,
// _IOR('f', 127, int).
const ioctlInQ = 0x4004667f
