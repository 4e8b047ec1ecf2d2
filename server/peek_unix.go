//go:build unix

package server

import (
	"net"
	"syscall"
)

// peekWaiting returns up to max bytes that c has received and not yet
// been read, without waiting and without taking them (MSG_PEEK); nil when
// there are none or c is not a socket.
func peekWaiting(c net.Conn, max int) []byte {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	buf := make([]byte, max)
	n := 0
	raw.Read(func(fd uintptr) bool {
		n, _, err = syscall.Recvfrom(int(fd), buf, syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		return true // never wait
	})
	if err != nil || n <= 0 {
		return nil
	}
	return buf[:n]
}
