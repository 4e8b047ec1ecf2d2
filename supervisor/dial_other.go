//go:build !linux

package supervisor

import (
	"errors"
	"net"
)

// DialSocket: only Linux hosts reach a container's supervisor through a
// bound socket (Docker Desktop's file sharing passes no sockets).
func DialSocket(dir, name string) (net.Conn, error) {
	return nil, errors.New("the docker provider's supervisor channel needs a Linux host for now")
}
