//go:build unix

package daemon

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// The small files a command's run reads — its OOM kills in the box's
// cgroups (usage.go), the supervisor's children in /proc (supervise.go) —
// read by plain system calls, and relative to a directory opened once
// where one is: in a container whose root is fuse-overlayfs, every path
// walked from the root is a round trip to that daemon (its root's ACL,
// 15–150 µs each on the machines of docs/benchmarks.md), and a command's
// run read some thirty of them.

// dirFD is a directory opened once, for the *at system calls.
type dirFD struct{ fd int }

// openDir opens directory name for the *at system calls; nil when it
// cannot be.
func openDir(name string) *dirFD {
	fd, err := unix.Open(name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	return &dirFD{fd}
}

// procDir is /proc, opened once; nil without one.
var procDir = sync.OnceValue(func() *dirFD { return openDir("/proc") })

// readProc reads /proc/rel.
func readProc(rel string) (string, error) {
	if d := procDir(); d != nil {
		return readSmallAt(d.fd, rel)
	}
	return readSmall("/proc/" + rel)
}

// readlinkProc reads the link /proc/rel.
func readlinkProc(rel string) (string, error) {
	dir, name := unix.AT_FDCWD, "/proc/"+rel
	if d := procDir(); d != nil {
		dir, name = d.fd, rel
	}
	b := make([]byte, 4096+len(" (deleted)"))
	n, err := unix.Readlinkat(dir, name, b)
	if err != nil {
		return "", &os.PathError{Op: "readlink", Path: name, Err: err}
	}
	return string(b[:n]), nil
}

// procFields is /proc/PID/stat after the command name (procstat.Fields,
// through procDir): state, ppid, pgrp, session, ...; nil when the process
// is gone.
func procFields(pid int) []string {
	s, err := readProc(strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil
	}
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(s[i+1:])
}

// readSmall reads at most 64 KiB of a file — by plain system calls: an
// os.File of a regular file costs four fcntls and an epoll_ctl more.
func readSmall(name string) (string, error) { return readSmallAt(unix.AT_FDCWD, name) }

// readSmallAt is readSmall of name relative to directory dir.
func readSmallAt(dir int, name string) (string, error) {
	var fd int
	var err error
	for {
		fd, err = unix.Openat(dir, name, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return "", &os.PathError{Op: "open", Path: name, Err: err}
	}
	defer unix.Close(fd)
	b := make([]byte, 0, 512)
	for len(b) < 64<<10 {
		if len(b) == cap(b) {
			b = slices.Grow(b, cap(b))
		}
		n, err := unix.Read(fd, b[len(b):min(cap(b), 64<<10)])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return "", &os.PathError{Op: "read", Path: name, Err: err}
		}
		if n == 0 {
			break
		}
		b = b[:len(b)+n]
	}
	return string(b), nil
}
