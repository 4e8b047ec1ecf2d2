package egress

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	t.Parallel()
	const secret = "s3cret-Value"
	inj := func(host, header, value string) []Inject { return []Inject{{Host: host, Header: header, Value: value}} }
	for _, tc := range []struct {
		name string
		cfg  Config
		want string // "" for valid; else a substring of the one-line error
	}{
		{"default is none", Config{}, ""},
		{"none", Config{Mode: "none"}, ""},
		{"open, nothing listed", Config{Mode: "open"}, ""},
		{"allowlist", Config{Mode: "allowlist", Allow: []string{"pypi.org", "*.pythonhosted.org", "github.com:22", "10.0.0.5:8080", "[fd00::1]:443", "[fd00::2]", "10.0.0.6", "Example.COM.", "a_b.example"}}, ""},
		{"inject", Config{Mode: "allowlist", Allow: []string{"api.example.com"}, Inject: inj("api.example.com", "Authorization", "Bearer "+secret)}, ""},
		{"inject on a port", Config{Mode: "allowlist", Allow: []string{"api.example.com:8443"}, Inject: inj("api.example.com:8443", "X-Api-Key", secret)}, ""},
		{"inject under a wildcard", Config{Mode: "allowlist", Allow: []string{"*.example.com"}, Inject: inj("api.example.com", "X-Api-Key", secret)}, ""},

		{"bad mode", Config{Mode: "x"}, `network.mode: "x" is not none, allowlist or open`},
		{"allow with none", Config{Allow: []string{"pypi.org"}}, "network.allow is set but network.mode is none"},
		{"inject with none", Config{Mode: "none", Inject: inj("a.com", "X-K", secret)}, "network.inject is set but network.mode is none (the default): set network.mode to allowlist"},
		{"inject with open", Config{Mode: "open", Inject: inj("api.example.com", "X-Api-Key", secret)}, "network.inject: only with network.mode allowlist; open gives the sandbox its own network, unfiltered"},
		{"allow with open", Config{Mode: "open", Allow: []string{"pypi.org"}}, "network.allow: only with network.mode allowlist; open gives the sandbox its own network, unfiltered"},
		{"both with open", Config{Mode: "open", Allow: []string{"a.com"}, Inject: inj("a.com", "X-K", secret)}, "network.allow: only with network.mode allowlist"},
		{"wildcard inside", Config{Mode: "allowlist", Allow: []string{"pypi.org", "x.*.org"}}, `network.allow[1] "x.*.org": a wildcard must be a whole leading label`},
		{"wildcard glued", Config{Mode: "allowlist", Allow: []string{"*pypi.org"}}, "network.allow[0]"},
		{"lone star", Config{Mode: "allowlist", Allow: []string{"*"}}, "network.mode open gives the sandbox its own network, unfiltered"},
		{"port 0", Config{Mode: "allowlist", Allow: []string{"a.com:0"}}, "network.allow[0]"},
		{"port too big", Config{Mode: "allowlist", Allow: []string{"a.com:65536"}}, "1 to 65535"},
		{"port not a number", Config{Mode: "allowlist", Allow: []string{"a.com:http"}}, "1 to 65535"},
		{"empty port", Config{Mode: "allowlist", Allow: []string{"a.com:"}}, "1 to 65535"},
		{"bare IPv6", Config{Mode: "allowlist", Allow: []string{"fd00::1"}}, "brackets"},
		{"IPv6 zone", Config{Mode: "allowlist", Allow: []string{"[fe80::1%eth0]:80"}}, "network.allow[0]"},
		{"IPv4 in brackets", Config{Mode: "allowlist", Allow: []string{"[10.0.0.1]:80"}}, "network.allow[0]"},
		{"wildcard IP", Config{Mode: "allowlist", Allow: []string{"*.10.0.0.1"}}, "network.allow[0]"},
		{"numeric name", Config{Mode: "allowlist", Allow: []string{"2130706433"}}, "network.allow[0]"},
		{"empty entry", Config{Mode: "allowlist", Allow: []string{""}}, "network.allow[0]"},
		{"unicode", Config{Mode: "allowlist", Allow: []string{"bücher.de"}}, "xn--"},
		{"space", Config{Mode: "allowlist", Allow: []string{"a .com"}}, "network.allow[0]"},
		{"inject unlisted", Config{Mode: "allowlist", Allow: []string{"pypi.org"}, Inject: inj("example.com", "X-K", secret)}, "network.inject[0].host example.com is not in network.allow"},
		{"inject other port", Config{Mode: "allowlist", Allow: []string{"example.com:8443"}, Inject: inj("example.com", "X-K", secret)}, "is not in network.allow"},
		{"inject wildcard", Config{Mode: "allowlist", Allow: []string{"*.example.com"}, Inject: inj("*.example.com", "X-K", secret)}, "a single host, not a pattern"},
		{"inject no host", Config{Mode: "allowlist", Allow: []string{"a.com"}, Inject: inj("", "X-K", secret)}, "network.inject[0].host is empty"},
		{"empty value", Config{Mode: "allowlist", Allow: []string{"a.com"}, Inject: inj("a.com", "X-K", "")}, "network.inject[0].value is empty (an unset ${VAR}?)"},
		{"newline in value", Config{Mode: "allowlist", Allow: []string{"a.com"}, Inject: inj("a.com", "X-K", secret+"\n")}, "network.inject[0].value has a control character"},
		{"header not a token", Config{Mode: "allowlist", Allow: []string{"a.com"}, Inject: inj("a.com", "X K", secret)}, `network.inject[0].header "X K" is not an HTTP header name`},
		{"header empty", Config{Mode: "allowlist", Allow: []string{"a.com"}, Inject: inj("a.com", "", secret)}, "network.inject[0].header"},
		{"header Host", Config{Mode: "allowlist", Allow: []string{"a.com"}, Inject: inj("a.com", "host", secret)}, "network.inject[0].header Host: the proxy does not set it"},
		{"header Proxy-Authorization", Config{Mode: "allowlist", Allow: []string{"a.com"}, Inject: inj("a.com", "Proxy-Authorization", secret)}, "the proxy does not set it"},
		{"header Transfer-Encoding", Config{Mode: "allowlist", Allow: []string{"a.com"}, Inject: inj("a.com", "transfer-encoding", secret)}, "the proxy does not set it"},
		{"twice the same header", Config{Mode: "allowlist", Allow: []string{"a.com"}, Inject: []Inject{{"a.com", "X-K", secret}, {"A.com:443", "x-k", "other"}}}, "network.inject[1]: a.com:443 already gets a X-K header from network.inject[0]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.cfg.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate: nil, want an error with %q", tc.want)
			}
			msg := err.Error()
			if !strings.Contains(msg, tc.want) {
				t.Errorf("Validate: %q, want it to contain %q", msg, tc.want)
			}
			if strings.Contains(msg, "\n") {
				t.Errorf("Validate: %q is not one line", msg)
			}
			if strings.Contains(msg, secret) {
				t.Errorf("Validate: %q names the secret", msg)
			}
			if !strings.HasPrefix(msg, "network.") {
				t.Errorf("Validate: %q does not start with the key", msg)
			}
			if _, err := New(tc.cfg, Options{StateDir: t.TempDir()}); err == nil {
				t.Error("New accepted what Validate refuses")
			}
		})
	}
}

func TestPatternMatch(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		pattern string
		target  string
		want    bool
	}{
		{"pypi.org", "pypi.org:443", true},
		{"pypi.org", "pypi.org:80", true},
		{"pypi.org", "pypi.org:8080", false},
		{"pypi.org", "PyPI.Org.:443", true},
		{"PYPI.org.", "pypi.org:443", true},
		{"pypi.org", "files.pypi.org:443", false},
		{"pypi.org", "pypi.org.evil.com:443", false},
		{"pypi.org", "evilpypi.org:443", false},
		{"*.pythonhosted.org", "files.pythonhosted.org:443", true},
		{"*.pythonhosted.org", "a.b.pythonhosted.org:443", true},
		{"*.pythonhosted.org", "pythonhosted.org:443", false},
		{"*.pythonhosted.org", "evilpythonhosted.org:443", false},
		{"*.pythonhosted.org", "files.pythonhosted.org:22", false},
		{"*.pythonhosted.org:8443", "files.pythonhosted.org:8443", true},
		{"github.com:22", "github.com:22", true},
		{"github.com:22", "github.com:443", false},
		{"10.0.0.5:8080", "10.0.0.5:8080", true},
		{"10.0.0.5:8080", "10.0.0.5:8081", false},
		{"10.0.0.5", "10.0.0.5:443", true},
		{"10.0.0.5", "10.0.0.5:22", false},
		{"10.0.0.5", "[::ffff:10.0.0.5]:80", true},
		{"[fd00::1]:443", "[fd00::1]:443", true},
		{"[fd00::1]:443", "[fd00:0::1]:443", true},
		{"[fd00::1]", "[fd00::1]:80", true},
		{"[fd00::1]:443", "[fd00::2]:443", false},
		{"10.0.0.5", "ten.example:443", false},
		{"example.com", "93.184.216.34:443", false},
	} {
		pt, err := parsePattern(tc.pattern)
		if err != nil {
			t.Fatalf("parsePattern(%q): %v", tc.pattern, err)
		}
		tg, err := parseTarget(tc.target, 0)
		if err != nil {
			t.Fatalf("parseTarget(%q): %v", tc.target, err)
		}
		if got := pt.matches(tg); got != tc.want {
			t.Errorf("%q matches %q: %v, want %v", tc.pattern, tc.target, got, tc.want)
		}
	}
}

func TestInternal(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		addr string
		want bool
	}{
		{"127.0.0.1", true},
		{"127.8.9.10", true},
		{"10.1.2.3", true},
		{"172.16.0.1", true},
		{"172.31.255.255", true},
		{"172.32.0.1", false},
		{"192.168.1.1", true},
		{"100.64.0.1", true},
		{"100.127.255.255", true},
		{"100.128.0.1", false},
		{"169.254.169.254", true},
		{"169.254.1.1", true},
		{"0.0.0.0", true},
		{"0.1.2.3", true},
		{"224.0.0.1", true},
		{"239.255.255.250", true},
		{"255.255.255.255", true},
		{"240.0.0.1", true},
		{"192.0.0.170", true},
		{"8.8.8.8", false},
		{"93.184.216.34", false},
		{"1.1.1.1", false},
		{"::", true},
		{"::1", true},
		{"fe80::1", true},
		{"fe80::1%eth0", true},
		{"fc00::1", true},
		{"fd00::1", true},
		{"fd00:ec2::254", true},
		{"ff02::1", true},
		{"fec0::1", true},
		{"::ffff:10.0.0.1", true},
		{"::ffff:127.0.0.1", true},
		{"::ffff:8.8.8.8", false},
		{"::ffff:169.254.169.254", true},
		{"64:ff9b::10.0.0.1", true},
		{"64:ff9b::7f00:1", true},
		{"64:ff9b::8.8.8.8", false},
		{"64:ff9b:1::1", true},
		{"2002:0a00:0001::1", true},
		{"2002:0808:0808::1", false},
		{"::10.0.0.1", true},
		{"2001::1", true},
		{"2001:db8::1", true},
		{"2606:4700:4700::1111", false},
		{"2a00:1450:4001:80b::200e", false},
	} {
		if got := internal(netip.MustParseAddr(tc.addr)); got != tc.want {
			t.Errorf("internal(%s) = %v, want %v", tc.addr, got, tc.want)
		}
	}
}

// The check where the socket connects: whatever resolved a name, an
// internal address is refused unless it is listed itself.
func TestControl(t *testing.T) {
	t.Parallel()
	p, err := New(Config{Mode: ModeAllowlist, Allow: []string{"10.0.0.5:8080", "[fd00::1]", "example.com"}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		addr string
		ok   bool
	}{
		{"127.0.0.1:80", false},
		{"10.0.0.5:8080", true},
		{"10.0.0.5:8081", false},
		{"[::ffff:10.0.0.5]:8080", true},
		{"[::ffff:10.0.0.6]:8080", false},
		{"[fd00::1]:443", true},
		{"[fd00::1]:22", false},
		{"169.254.169.254:80", false},
		{"[fd00:ec2::254]:80", false},
		{"[64:ff9b::a00:5]:8080", false}, // NAT64 of a listed address is not that address
		{"93.184.216.34:443", true},
		{"not an address", false},
	} {
		err := p.control("tcp", tc.addr, nil)
		if (err == nil) != tc.ok {
			t.Errorf("control(%s) = %v, want allowed %v", tc.addr, err, tc.ok)
		}
	}
}

func TestEnv(t *testing.T) {
	t.Parallel()
	p, err := New(Config{Mode: ModeAllowlist}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	env := p.Env("127.0.0.1:41234", "")
	for _, want := range []string{
		"HTTP_PROXY=http://127.0.0.1:41234", "http_proxy=http://127.0.0.1:41234",
		"HTTPS_PROXY=http://127.0.0.1:41234", "https_proxy=http://127.0.0.1:41234",
		"ALL_PROXY=http://127.0.0.1:41234", "all_proxy=http://127.0.0.1:41234",
		"NO_PROXY=localhost,127.0.0.1,::1", "no_proxy=localhost,127.0.0.1,::1",
	} {
		if !slices.Contains(env, want) {
			t.Errorf("Env lacks %s: %q", want, env)
		}
	}
	for _, kv := range env {
		if strings.Contains(kv, "CERT") || strings.Contains(kv, "CA_") {
			t.Errorf("Env without a CA file has %s", kv)
		}
	}
	env = p.Env("127.0.0.1:41234", "/etc/sandbox-mcp/ca.pem")
	for _, k := range []string{"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO", "PIP_CERT"} {
		if !slices.Contains(env, k+"=/etc/sandbox-mcp/ca.pem") {
			t.Errorf("Env lacks %s: %q", k, env)
		}
	}
	none, err := New(Config{}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if env := none.Env("127.0.0.1:41234", "/ca.pem"); env != nil {
		t.Errorf("Env of mode none: %q, want nothing", env)
	}
	if none.Mode() != ModeNone || p.Mode() != ModeAllowlist {
		t.Errorf("Mode: %q and %q", none.Mode(), p.Mode())
	}
	if p.CA() != nil || p.Secrets() != nil {
		t.Error("a proxy that injects nothing has a CA or secrets")
	}
}

// The parsers take whatever a config or a sandbox writes: no panic, and
// what they accept means one thing.
func FuzzParseTarget(f *testing.F) {
	for _, s := range []string{"pypi.org", "*.a.b:443", "[fd00::1]:443", "10.0.0.5:8080", "[", "[]:", "a:0", "a..b", "*.", ":80", "[::ffff:1.2.3.4]:1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if pt, err := parsePattern(s); err == nil {
			if pt.name == "" && !pt.ip.IsValid() {
				t.Fatalf("parsePattern(%q) accepted no host", s)
			}
		}
		tg, err := parseTarget(s, 443)
		if err != nil {
			return
		}
		again, err := parseTarget(tg.String(), 0)
		if err != nil || again != tg {
			t.Fatalf("parseTarget(%q) = %v; its String %q parses to %v, %v", s, tg, tg.String(), again, err)
		}
	})
}
