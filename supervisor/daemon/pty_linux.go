package daemon

import (
	"fmt"
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/sandbox-mcp/sandbox-mcp/supervisor/wire"
)

// openPTY opens a new pseudo-terminal of size sz: its master, the
// supervisor's side (in Go's poller: reads and writes take deadlines),
// and its slave, the job's. The slave is opened from the master
// (TIOCGPTPEER, Linux 4.13) where the kernel can, so that it is the
// master's own peer whatever /dev/pts is mounted in the box; else by its
// number under /dev/pts (bubblewrap's --dev, a container's and a Pod's
// /dev have their own devpts).
func openPTY(sz wire.TTY) (master, slave *os.File, err error) {
	master, err = os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("terminal: %w", err)
	}
	// Fd would put the master in blocking mode (no deadlines): its
	// descriptor is used through Control only.
	var peer, n int
	cerr := control(master, func(fd int) error {
		if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil { // unlockpt
			return fmt.Errorf("unlock: %w", err)
		}
		r, _, errno := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), unix.TIOCGPTPEER, uintptr(os.O_RDWR|syscall.O_NOCTTY|syscall.O_CLOEXEC))
		if errno == 0 {
			peer = int(r)
			return nil
		}
		peer = -1
		var err error
		n, err = unix.IoctlGetInt(fd, unix.TIOCGPTN) // ptsname
		return err
	})
	if cerr == nil {
		if peer >= 0 {
			slave = os.NewFile(uintptr(peer), "/dev/pts/peer")
		} else {
			slave, cerr = os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
		}
	}
	if cerr == nil {
		cerr = setSize(master, sz)
	}
	if cerr != nil {
		master.Close()
		if slave != nil {
			slave.Close()
		}
		return nil, nil, fmt.Errorf("terminal: %w", cerr)
	}
	return master, slave, nil
}

// setSize sets a terminal's size (TIOCSWINSZ on its master): the kernel
// sends SIGWINCH to its foreground process group.
func setSize(master *os.File, sz wire.TTY) error {
	return control(master, func(fd int) error {
		return unix.IoctlSetWinsize(fd, unix.TIOCSWINSZ, &unix.Winsize{Row: uint16(sz.Rows), Col: uint16(sz.Cols)})
	})
}

// control runs op on f's descriptor, leaving f's mode as it is.
func control(f *os.File, op func(fd int) error) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var opErr error
	if err := rc.Control(func(fd uintptr) { opErr = op(int(fd)) }); err != nil {
		return err
	}
	return opErr
}

// ttyAttr starts a terminal job's command as a new session's leader with
// the terminal (its stdin, child descriptor 0) as its controlling one.
func ttyAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
}
