package egress

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
)

// Modes of network.mode.
const (
	ModeNone      = "none"      // no network at all (the default)
	ModeAllowlist = "allowlist" // only what network.allow lists
	ModeOpen      = "open"      // the sandbox's own network, unfiltered: no proxy, no allow, no inject
)

// Config is the `network:` section of the config file (SPEC §17).
type Config struct {
	Mode   string   `yaml:"mode"`   // none (default), allowlist or open
	Allow  []string `yaml:"allow"`  // host patterns: pypi.org, *.pythonhosted.org, github.com:22, 10.0.0.5:8080
	Inject []Inject `yaml:"inject"` // headers the proxy sets on HTTPS requests to a host
}

// Inject is a header the proxy sets on every HTTPS request to Host. The
// value, usually ${VAR}, never enters the sandbox.
type Inject struct {
	Host   string `yaml:"host"`   // host or host:port (port default 443); no wildcard
	Header string `yaml:"header"` // e.g. Authorization
	Value  string `yaml:"value"`
}

// mode is c.Mode with its default.
func (c Config) mode() string {
	if c.Mode == "" {
		return ModeNone
	}
	return c.Mode
}

// Validate checks the section, naming the key of the first setting that
// is wrong, in one line. It never names an inject value: that is a
// secret.
func (c Config) Validate() error {
	_, _, err := c.parse()
	return err
}

// refusedHeaders are header names an inject entry may not set: the proxy
// owns the framing of the request (Host, the length, the connection) and
// what is between the sandbox and the proxy (Proxy-*).
var refusedHeaders = []string{"Host", "Content-Length", "Transfer-Encoding", "Connection", "Keep-Alive", "Upgrade", "Te", "Trailer", "Expect"}

// parse validates c and returns its allow patterns and its inject
// headers by target ("host:port").
func (c Config) parse() ([]pattern, map[string][]header, error) {
	mode := c.mode()
	switch mode {
	case ModeNone, ModeAllowlist, ModeOpen:
	default:
		return nil, nil, fmt.Errorf("network.mode: %q is not none, allowlist or open", c.Mode)
	}
	if mode != ModeAllowlist && (len(c.Allow) > 0 || len(c.Inject) > 0) {
		// The lists are the proxy's, and only allowlist has one: another
		// mode silently dropping a list the user wrote would look like a
		// broken network, or a filter that is not there.
		key := "network.allow"
		if len(c.Allow) == 0 {
			key = "network.inject"
		}
		if mode == ModeNone {
			return nil, nil, fmt.Errorf("%s is set but network.mode is none (the default): set network.mode to allowlist", key)
		}
		return nil, nil, fmt.Errorf("%s: only with network.mode allowlist; open gives the sandbox its own network, unfiltered", key)
	}
	allow := make([]pattern, 0, len(c.Allow))
	for i, s := range c.Allow {
		pt, err := parsePattern(s)
		if err != nil {
			return nil, nil, fmt.Errorf("network.allow[%d] %q: %w", i, s, err)
		}
		allow = append(allow, pt)
	}
	inject := map[string][]header{}
	first := map[string]int{} // "target header" -> its first entry
	for i, in := range c.Inject {
		key := fmt.Sprintf("network.inject[%d]", i)
		if in.Host == "" {
			return nil, nil, fmt.Errorf("%s.host is empty", key)
		}
		t, err := parseTarget(in.Host, 443)
		if err != nil {
			if strings.Contains(in.Host, "*") {
				err = errors.New("a single host, not a pattern")
			}
			return nil, nil, fmt.Errorf("%s.host %q: %w", key, in.Host, err)
		}
		if !listed(allow, t) {
			return nil, nil, fmt.Errorf("%s.host %s is not in network.allow", key, in.Host)
		}
		if !isToken(in.Header) {
			return nil, nil, fmt.Errorf("%s.header %q is not an HTTP header name", key, in.Header)
		}
		name := http.CanonicalHeaderKey(in.Header)
		for _, r := range refusedHeaders {
			if name == r || strings.HasPrefix(name, "Proxy-") {
				return nil, nil, fmt.Errorf("%s.header %s: the proxy does not set it (not Host, Content-Length, Transfer-Encoding, Connection, Keep-Alive, Upgrade, Te, Trailer, Expect or Proxy-*)", key, name)
			}
		}
		if in.Value == "" {
			return nil, nil, fmt.Errorf("%s.value is empty (an unset ${VAR}?)", key)
		}
		if !validValue(in.Value) {
			return nil, nil, fmt.Errorf("%s.value has a control character or surrounding space (a pasted newline?)", key)
		}
		dup := t.String() + " " + name
		if j, ok := first[dup]; ok {
			return nil, nil, fmt.Errorf("%s: %s already gets a %s header from network.inject[%d]", key, t, name, j)
		}
		first[dup] = i
		inject[t.String()] = append(inject[t.String()], header{name: name, value: in.Value})
	}
	return allow, inject, nil
}

type header struct{ name, value string }

// isToken: s is an HTTP token (RFC 9110 §5.6.2), as a header name must be.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// validValue: v can be a header's value as is: no control character
// (tab aside) and no space at either end, which HTTP would drop.
func validValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return strings.TrimSpace(v) == v
}

// pattern is one entry of network.allow.
type pattern struct {
	name     string     // a host name, lower case, no trailing dot; for a wildcard the suffix after "*."
	wildcard bool       // *.name: any subdomain of name, not name itself
	ip       netip.Addr // an IP literal instead of a name
	port     int        // 0: 80 and 443
}

// parsePattern parses an entry of network.allow.
func parsePattern(s string) (pattern, error) {
	if s == "*" || strings.HasPrefix(s, "*:") {
		return pattern{}, errors.New("a lone * is every host, which is no allowlist; network.mode open gives the sandbox its own network, unfiltered (no proxy, no inject, internal addresses reachable)")
	}
	wildcard := strings.HasPrefix(s, "*.")
	rest := s
	if wildcard {
		rest = s[2:]
	}
	if strings.Contains(rest, "*") {
		return pattern{}, errors.New("a wildcard must be a whole leading label, as in *.example.com")
	}
	t, err := parseTarget(rest, 0)
	if err != nil {
		return pattern{}, err
	}
	if wildcard && t.ip.IsValid() {
		return pattern{}, errors.New("a wildcard takes a host name, not an IP address")
	}
	return pattern{name: t.name, wildcard: wildcard, ip: t.ip, port: t.port}, nil
}

// matches: the pattern lets t through (before the internal-address rule).
func (pt pattern) matches(t target) bool {
	if pt.port == 0 {
		if t.port != 80 && t.port != 443 {
			return false
		}
	} else if pt.port != t.port {
		return false
	}
	if pt.ip.IsValid() || t.ip.IsValid() {
		return pt.ip.IsValid() && t.ip.IsValid() && pt.ip == t.ip
	}
	if pt.wildcard {
		return strings.HasSuffix(t.name, "."+pt.name)
	}
	return t.name == pt.name
}

// listed: an entry of allow matches t.
func listed(allow []pattern, t target) bool {
	for _, pt := range allow {
		if pt.matches(t) {
			return true
		}
	}
	return false
}

// literal: an entry of allow is the address a itself, with port: the
// exception to the internal-address rule (an internal service).
func literal(allow []pattern, a netip.Addr, port int) bool {
	return listed(allow, target{ip: a.Unmap(), port: port})
}

// target is where a sandbox asks to go: a host name or an IP, and a port.
type target struct {
	name string     // lower case, no trailing dot; "" when ip is set
	ip   netip.Addr // unmapped, without zone
	port int        // 0 only in a pattern without port
}

// host is the target's host as a URL names it.
func (t target) host() string {
	if t.ip.IsValid() {
		return t.ip.String()
	}
	return t.name
}

// String is host:port, the IPv6 address in brackets.
func (t target) String() string {
	return joinHostPort(t.host(), t.port)
}

func joinHostPort(host string, port int) string {
	if strings.Contains(host, ":") {
		return "[" + host + "]:" + strconv.Itoa(port)
	}
	return host + ":" + strconv.Itoa(port)
}

// parseTarget parses host, host:port, an IP, IP:port or [IPv6]:port.
// Without a port the target has port defPort.
func parseTarget(s string, defPort int) (target, error) {
	host, port := s, defPort
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return target{}, errors.New("an IPv6 address in brackets lacks its ]")
		}
		host = s[1:end]
		rest := s[end+1:]
		if rest != "" {
			if rest[0] != ':' {
				return target{}, errors.New("want [IPv6]:port")
			}
			p, err := parsePort(rest[1:])
			if err != nil {
				return target{}, err
			}
			port = p
		}
		a, err := netip.ParseAddr(host)
		if err != nil || !a.Is6() || a.Zone() != "" {
			return target{}, errors.New("not an IPv6 address (without zone) in brackets")
		}
		return target{ip: a.Unmap(), port: port}, nil
	}
	switch strings.Count(s, ":") {
	case 0:
	case 1:
		i := strings.IndexByte(s, ':')
		host = s[:i]
		p, err := parsePort(s[i+1:])
		if err != nil {
			return target{}, err
		}
		port = p
	default:
		return target{}, errors.New("an IPv6 address goes in brackets, as in [fd00::1]:443")
	}
	if a, err := netip.ParseAddr(host); err == nil {
		return target{ip: a.Unmap(), port: port}, nil
	}
	name, err := hostName(host)
	if err != nil {
		return target{}, err
	}
	return target{name: name, port: port}, nil
}

func parsePort(s string) (int, error) {
	p, err := strconv.Atoi(s)
	if err != nil || p < 1 || p > 65535 || s[0] == '+' || s[0] == '0' {
		return 0, errors.New("a port is a number from 1 to 65535")
	}
	return p, nil
}

// hostName checks a DNS name and returns it in lower case without its
// trailing dot.
func hostName(s string) (string, error) {
	s = strings.ToLower(strings.TrimSuffix(s, "."))
	if s == "" || len(s) > 253 {
		return "", errors.New("not a host name")
	}
	labels := strings.Split(s, ".")
	for _, l := range labels {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return "", errors.New("not a host name")
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				if c >= 0x80 {
					return "", errors.New("not a host name (write an international name in its xn-- form)")
				}
				return "", errors.New("not a host name")
			}
		}
	}
	if last := labels[len(labels)-1]; strings.Trim(last, "0123456789") == "" {
		// 10.1 or 2130706433: resolvers read these as IPv4 addresses.
		return "", errors.New("not a host name nor an IP address")
	}
	return s, nil
}
