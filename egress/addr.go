package egress

import (
	"net"
	"net/netip"
	"sync"
	"time"
)

// internal4 are the IPv4 ranges a sandbox may not reach by name: this
// host, the networks it sits on, and what is not the internet.
var internal4 = prefixes(
	"0.0.0.0/8",       // this network; 0.0.0.0 reaches the host itself
	"10.0.0.0/8",      // private
	"100.64.0.0/10",   // carrier-grade NAT, also many clusters' pods and services
	"127.0.0.0/8",     // loopback
	"169.254.0.0/16",  // link-local, cloud metadata (169.254.169.254)
	"172.16.0.0/12",   // private
	"192.0.0.0/24",    // IETF protocol assignments (some metadata services)
	"192.0.2.0/24",    // documentation
	"192.88.99.0/24",  // 6to4 relays
	"192.168.0.0/16",  // private
	"198.18.0.0/15",   // benchmarking
	"198.51.100.0/24", // documentation
	"203.0.113.0/24",  // documentation
	"224.0.0.0/4",     // multicast
	"240.0.0.0/4",     // reserved, and the broadcast address
)

// internal6 are the IPv6 ranges a sandbox may not reach by name. The
// ranges that embed an IPv4 address are judged by that address instead
// (embedded4).
var internal6 = prefixes(
	"::/96",          // unspecified, loopback, IPv4-compatible (deprecated)
	"100::/64",       // discard
	"64:ff9b:1::/48", // local-use NAT64
	"2001::/32",      // Teredo: an address tunnelled anywhere
	"2001:2::/48",    // benchmarking
	"2001:10::/28",   // ORCHID
	"2001:db8::/32",  // documentation
	"3fff::/20",      // documentation
	"fc00::/7",       // unique local (private), and fd00:ec2::254 (AWS metadata)
	"fe80::/10",      // link-local
	"fec0::/10",      // site-local (deprecated)
	"ff00::/8",       // multicast
)

var (
	nat64   = netip.MustParsePrefix("64:ff9b::/96")
	sixTo4  = netip.MustParsePrefix("2002::/16")
	mapped4 = netip.MustParsePrefix("::ffff:0:0/96")
)

func prefixes(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParsePrefix(s)
	}
	return out
}

// internal: a is an address of this host or of a network it is on, or
// none of the internet's (SPEC §17: loopback, private, link-local, cloud
// metadata), in any of its IPv4 and IPv6 spellings. The host's own
// addresses outside these ranges are hostAddrs'.
func internal(a netip.Addr) bool {
	a = a.WithZone("")
	if v4, ok := embedded4(a); ok {
		a = v4
	}
	if !a.IsValid() {
		return true
	}
	set := internal6
	if a.Is4() {
		set = internal4
	}
	for _, p := range set {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// embedded4 is the IPv4 address an IPv6 address stands for: an
// IPv4-mapped address (::ffff:10.0.0.1), a NAT64 one (64:ff9b::10.0.0.1)
// or a 6to4 one (2002:0a00:0001::): reaching it reaches that IPv4
// address.
func embedded4(a netip.Addr) (netip.Addr, bool) {
	if !a.Is6() {
		return a, a.Is4()
	}
	b := a.As16()
	switch {
	case mapped4.Contains(a), nat64.Contains(a):
		return netip.AddrFrom4([4]byte(b[12:16])), true
	case sixTo4.Contains(a):
		return netip.AddrFrom4([4]byte(b[2:6])), true
	}
	return a, false
}

// hostAddrs are the addresses of this host's own interfaces: reaching one
// reaches the server's own services, whatever range it is in (a public
// address of the host is no more the internet than its loopback is).
type hostAddrs struct {
	list func() ([]net.Addr, error) // net.InterfaceAddrs

	mu  sync.Mutex
	at  time.Time // of the last listing, failed or not
	set map[netip.Addr]bool
}

// hostAddrsEvery is how often the interfaces are listed again: an address
// a host gains is refused within it.
const hostAddrsEvery = time.Minute

// thisHost is the server's host, listed once for every proxy.
var thisHost = &hostAddrs{list: net.InterfaceAddrs}

// has: a is, in any of its spellings, an address of the host. The list
// is refreshed at most every hostAddrsEvery; a failure to list keeps the
// last one.
func (h *hostAddrs) has(a netip.Addr) bool {
	a = a.WithZone("")
	if v4, ok := embedded4(a); ok {
		a = v4
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.at.IsZero() || time.Since(h.at) >= hostAddrsEvery {
		h.at = time.Now()
		if addrs, err := h.list(); err == nil {
			h.set = map[netip.Addr]bool{}
			for _, ad := range addrs {
				var ip net.IP
				switch v := ad.(type) {
				case *net.IPNet:
					ip = v.IP
				case *net.IPAddr:
					ip = v.IP
				}
				if na, ok := netip.AddrFromSlice(ip); ok {
					h.set[na.Unmap().WithZone("")] = true
				}
			}
		}
	}
	return h.set[a]
}
