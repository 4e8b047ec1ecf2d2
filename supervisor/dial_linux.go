package supervisor

import (
	"fmt"
	"net"
	"strconv"

	"golang.org/x/sys/unix"
)

// DialSocket connects to the supervisor's socket name in dir, a directory
// the sandbox can write: what is there is not trusted. Neither a symlink
// nor anything that is not a socket is followed or connected to (a symlink
// planted there could point the server at any socket of the host); the
// socket is reached through a descriptor opened without following, so its
// host path's length does not matter either.
func DialSocket(dir, name string) (net.Conn, error) {
	dfd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("supervisor socket directory: %w", err)
	}
	defer unix.Close(dfd)
	fd, err := unix.Openat(dfd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("supervisor socket: %w", err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("supervisor socket: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return nil, fmt.Errorf("supervisor socket: not a socket (mode %o): refused", st.Mode&unix.S_IFMT)
	}
	return net.Dial("unix", "/proc/self/fd/"+strconv.Itoa(fd))
}
