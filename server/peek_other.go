//go:build !unix

package server

import "net"

// peekWaiting: nothing to look at without MSG_PEEK.
func peekWaiting(net.Conn, int) []byte { return nil }
