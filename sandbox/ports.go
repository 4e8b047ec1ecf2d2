package sandbox

import (
	"context"
	"errors"
	"net"
)

// Ports is a Sandbox that reaches TCP ports listening on its own loopback
// (SPEC §17 expose_port): through its supervisor's channel, so it works
// whatever the sandbox's network is, `none` included.
type Ports interface {
	// Box names the box that runs the sandbox now, starting it when none
	// runs. A box started anew (after the old one ended: idle reaping, a
	// crash) has another name, so that what was opened in one box ends
	// with it.
	Box(ctx context.Context) (string, error)
	// DialPort connects to 127.0.0.1:port inside the box named box;
	// ErrBoxGone when the sandbox's box is no longer that one. The
	// connection supports CloseWrite (a half close) and deadlines.
	DialPort(ctx context.Context, box string, port int) (net.Conn, error)
}

// ErrBoxGone: the box a port was opened in has ended; what was opened in
// it ended with it.
var ErrBoxGone = errors.New("the sandbox it was opened in has ended")

// ErrPortRefused: nothing listens on that port in the sandbox.
var ErrPortRefused = errors.New("nothing listens on that port in the sandbox")
