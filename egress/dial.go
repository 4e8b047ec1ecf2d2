package egress

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"syscall"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/audit"
)

// refusal is a target the policy refuses; its text, for the sandbox,
// names the target and network.allow.
type refusal struct{ text string }

func (r *refusal) Error() string { return r.text }

// notListed is the refusal of a target network.allow does not list, nil
// when it is listed (or the mode lists nothing).
func (p *Proxy) notListed(t target) *refusal {
	switch {
	case p.mode == ModeNone:
		return &refusal{"network.mode is none: nothing leaves this sandbox"}
	case p.mode == ModeAllowlist && !listed(p.allow, t):
		return &refusal{t.String() + " is not in network.allow"}
	}
	return nil
}

// addrAllowed: the proxy may connect to a:port. An internal address, or
// one of the server's host, only when network.allow lists it as such.
func (p *Proxy) addrAllowed(a netip.Addr, port int) bool {
	return !internal(a) && !p.host.has(a) || literal(p.allow, a, port)
}

// internalRefusal is the refusal of t, which is or resolves to the
// internal address a.
func internalRefusal(t target, a netip.Addr, port int) *refusal {
	at := netip.AddrPortFrom(a, uint16(port)).String()
	if t.ip.IsValid() {
		return &refusal{fmt.Sprintf("%s is an internal address; network.allow may list that address itself (%s)", t, at)}
	}
	return &refusal{fmt.Sprintf("%s resolves to %s, an internal address; network.allow may list that address itself (%s)", t, a, at)}
}

// dial connects to t: resolve, then connectTo.
func (p *Proxy) dial(ctx context.Context, t target) (net.Conn, error) {
	addrs, err := p.resolve(ctx, t)
	if err != nil {
		return nil, err
	}
	return p.connectTo(ctx, t, addrs)
}

// resolve is the addresses of t (whose name network.allow lists) that
// the policy allows, in the order given; a *refusal when it allows none.
// A name is resolved once: connectTo connects to these very addresses,
// so DNS rebinding gains nothing.
func (p *Proxy) resolve(ctx context.Context, t target) ([]netip.Addr, error) {
	if t.ip.IsValid() {
		if !p.addrAllowed(t.ip, t.port) {
			return nil, internalRefusal(t, t.ip, t.port)
		}
		return []netip.Addr{t.ip}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, p.lim.dialTimeout)
	defer cancel()
	addrs, err := p.lookup(ctx, t.name)
	if err != nil {
		return nil, err
	}
	var ok []netip.Addr
	var refused *refusal
	for _, a := range addrs {
		a = a.Unmap()
		if p.addrAllowed(a, t.port) {
			ok = append(ok, a)
		} else if refused == nil {
			refused = internalRefusal(t, a, t.port)
		}
	}
	if len(ok) == 0 {
		if refused != nil {
			return nil, refused
		}
		return nil, &net.DNSError{Err: "no address", Name: t.name, IsNotFound: true}
	}
	return ok, nil
}

// connectTo connects to t at the first of addrs (which resolve gave)
// that answers. The addresses are checked again where the socket
// connects (Control), so that no path reaches an internal address
// unchecked. An error is a *refusal when the policy refuses.
func (p *Proxy) connectTo(ctx context.Context, t target, addrs []netip.Addr) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, p.lim.dialTimeout)
	defer cancel()
	d := net.Dialer{Control: p.control}
	deadline, _ := ctx.Deadline()
	var err error
	for i, a := range addrs {
		// Each address gets its share of the time left, so that one
		// that does not answer leaves time for the next.
		actx, acancel := context.WithTimeout(ctx, time.Until(deadline)/time.Duration(len(addrs)-i))
		var c net.Conn
		c, err = d.DialContext(actx, "tcp", netip.AddrPortFrom(a, uint16(t.port)).String())
		acancel()
		if err == nil {
			return c, nil
		}
		if r := (*refusal)(nil); errors.As(err, &r) {
			return nil, r
		}
	}
	return nil, err
}

// control refuses a socket about to connect to an address the policy
// does not allow.
func (p *Proxy) control(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return &refusal{address + " is not an address the proxy connects to"}
	}
	a := ap.Addr().Unmap()
	if !p.addrAllowed(a, int(ap.Port())) {
		t := target{ip: a, port: int(ap.Port())}
		return internalRefusal(t, a, t.port)
	}
	return nil
}

// upstreamError is a response of an upstream the proxy does not pass on;
// its text, for the sandbox, says why.
type upstreamError struct{ text string }

func (e *upstreamError) Error() string { return e.text }

// failure is how an error reaching a target is answered to the sandbox:
// the status, a one-line text (naming no host path and no secret) and
// the audit outcome.
func failure(t target, err error) (code int, text, outcome string) {
	if r := (*refusal)(nil); errors.As(err, &r) {
		return http.StatusForbidden, "sandbox-mcp: " + r.text, audit.Denied
	}
	if u := (*upstreamError)(nil); errors.As(err, &u) {
		return http.StatusBadGateway, u.text, audit.Error
	}
	return http.StatusBadGateway, fmt.Sprintf("sandbox-mcp: cannot reach %s: %s", t, reason(err)), audit.Error
}

// reason says in a few words why a connection failed.
func reason(err error) string {
	var dnsErr *net.DNSError
	var errno syscall.Errno
	var unknown x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var invalid x509.CertificateInvalidError
	var verify *tls.CertificateVerificationError
	switch {
	case errors.As(err, &dnsErr):
		if dnsErr.IsNotFound {
			return "no such host"
		}
		if dnsErr.IsTimeout {
			return "its name lookup timed out"
		}
		return "its name lookup failed"
	case errors.Is(err, context.Canceled):
		return "the request was cancelled"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return "timed out"
	case errors.As(err, &unknown), errors.As(err, &hostErr), errors.As(err, &invalid), errors.As(err, &verify):
		return "its TLS certificate is not trusted"
	case errors.As(err, &errno):
		return errno.Error()
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "it closed the connection"
	}
	return "the connection failed"
}
