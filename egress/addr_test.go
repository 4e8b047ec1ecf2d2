package egress

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// The host's own addresses, in any spelling, are the host's; the list is
// made at most once a minute, and a failure to make it keeps the last.
func TestHostAddrs(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	fail := atomic.Bool{}
	h := &hostAddrs{list: func() ([]net.Addr, error) {
		calls.Add(1)
		if fail.Load() {
			return nil, errors.New("netlink is gone")
		}
		return []net.Addr{
			&net.IPNet{IP: net.ParseIP("93.184.216.99"), Mask: net.CIDRMask(24, 32)},
			&net.IPNet{IP: net.ParseIP("2a00:1450::99"), Mask: net.CIDRMask(64, 128)},
			&net.IPAddr{IP: net.ParseIP("fe80::1"), Zone: "eth0"},
		}, nil
	}}
	for _, tc := range []struct {
		addr string
		want bool
	}{
		{"93.184.216.99", true},
		{"::ffff:93.184.216.99", true},
		{"64:ff9b::93.184.216.99", true},
		{"2a00:1450::99", true},
		{"fe80::1%eth1", true},
		{"93.184.216.98", false},
		{"8.8.8.8", false},
	} {
		if got := h.has(netip.MustParseAddr(tc.addr)); got != tc.want {
			t.Errorf("has(%s) = %v, want %v", tc.addr, got, tc.want)
		}
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("listed %d times within a minute, want once", n)
	}
	fail.Store(true)
	h.mu.Lock()
	h.at = time.Now().Add(-hostAddrsEvery)
	h.mu.Unlock()
	if !h.has(netip.MustParseAddr("93.184.216.99")) || calls.Load() != 2 {
		t.Errorf("after a failed listing (%d listings): the last list is not kept", calls.Load())
	}
}

// An address of the server's host is refused like loopback, whatever its
// range, unless network.allow lists that address itself.
func TestHostAddressRefused(t *testing.T) {
	t.Parallel()
	hostIs := func() ([]net.Addr, error) {
		return []net.Addr{&net.IPNet{IP: net.ParseIP("93.184.216.99"), Mask: net.CIDRMask(24, 32)}}, nil
	}
	p, err := New(Config{Mode: ModeAllowlist, Allow: []string{"host.test", "93.184.216.99:8443"}},
		Options{interfaceAddrs: hostIs, lookup: names(map[string]string{"host.test": "93.184.216.99"})})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		addr string
		ok   bool
	}{
		{"93.184.216.99:443", false},
		{"[::ffff:93.184.216.99]:443", false},
		{"93.184.216.99:8443", true},
		{"93.184.216.98:443", true},
	} {
		if err := p.control("tcp", tc.addr, nil); (err == nil) != tc.ok {
			t.Errorf("control(%s) = %v, want allowed %v", tc.addr, err, tc.ok)
		}
	}
	_, err = p.resolve(t.Context(), target{name: "host.test", port: 443})
	if r := (*refusal)(nil); !errors.As(err, &r) || !strings.Contains(r.text, "resolves to 93.184.216.99, an internal address") {
		t.Errorf("host.test, which resolves to the host's address: %v", err)
	}
}

// This machine's own non-loopback IPv4 address, found at run time: a
// listed name that resolves to it is refused, the address listed itself
// passes.
func TestHostOwnAddress(t *testing.T) {
	t.Parallel()
	var ip netip.Addr
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if v, ok := netip.AddrFromSlice(n.IP); ok && v.Unmap().Is4() && !v.Unmap().IsLoopback() {
				ip = v.Unmap()
				break
			}
		}
	}
	if !ip.IsValid() {
		t.Skip("this machine has no non-loopback IPv4 address")
	}
	if !thisHost.has(ip) {
		t.Fatalf("%s, an address of this machine, is not one of the host's", ip)
	}
	ln, err := net.Listen("tcp", netip.AddrPortFrom(ip, 0).String())
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "host service") })}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	at := ln.Addr().String()
	_, port, _ := net.SplitHostPort(at)
	lookup := names(map[string]string{"host.test": ip.String()})
	for _, tc := range []struct {
		allow      []string
		code, body string
	}{
		{[]string{"host.test:" + port}, "403", "resolves to " + ip.String() + ", an internal address"},
		{[]string{"host.test:" + port, at}, "200", "host service"},
	} {
		p, err := New(Config{Mode: ModeAllowlist, Allow: tc.allow}, Options{lookup: lookup})
		if err != nil {
			t.Fatal(err)
		}
		code, body := rawRequest(t, start(t, p, Who{}), "GET http://host.test:"+port+"/ HTTP/1.1\r\nHost: host.test\r\nConnection: close\r\n\r\n")
		if code != tc.code || !strings.Contains(body, tc.body) {
			t.Errorf("allow %v: %s %q, want %s with %q", tc.allow, code, body, tc.code, tc.body)
		}
	}
}
