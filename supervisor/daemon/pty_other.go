//go:build unix && !linux

package daemon

import (
	"errors"
	"os"
	"syscall"

	"github.com/sandbox-mcp/sandbox-mcp/supervisor/wire"
)

// Terminal jobs are Linux's: every box is a Linux one.
var errNoPTY = errors.New("terminal: not supported on this system")

func openPTY(wire.TTY) (master, slave *os.File, err error) { return nil, nil, errNoPTY }

func setSize(*os.File, wire.TTY) error { return errNoPTY }

func ttyAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setsid: true} }
