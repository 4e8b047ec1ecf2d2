package egress

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// Plain HTTP through the proxy, driven by curl: what the allowlist lets
// through and what it refuses, with the 403's text.
func TestPlainHTTP(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, false, nil)
	port := up.port()
	other := fmt.Sprint(atoiPort(port) + 1)
	lookup := names(map[string]string{"up.test": "127.0.0.1", "a.up.test": "127.0.0.1", "other.test": "127.0.0.1"})
	for _, tc := range []struct {
		name  string
		mode  string
		allow []string
		url   string
		code  string
		body  string // a substring of the body
	}{
		{"IP literal with its port", ModeAllowlist, []string{"127.0.0.1:" + port}, "http://127.0.0.1:" + port + "/", "200", "hello from upstream"},
		{"listed name to a listed address", ModeAllowlist, []string{"up.test:" + port, "127.0.0.1:" + port}, "http://up.test:" + port + "/", "200", "hello from upstream"},
		{"case and trailing dot", ModeAllowlist, []string{"Up.Test.:" + port, "127.0.0.1:" + port}, "http://UP.test.:" + port + "/", "200", "hello from upstream"},
		{"unlisted", ModeAllowlist, []string{"up.test:" + port, "127.0.0.1:" + port}, "http://other.test:" + port + "/", "403",
			"sandbox-mcp: other.test:" + port + " is not in network.allow"},
		{"listed name resolving to loopback", ModeAllowlist, []string{"up.test:" + port}, "http://up.test:" + port + "/", "403",
			"sandbox-mcp: up.test:" + port + " resolves to 127.0.0.1, an internal address; network.allow may list that address itself"},
		{"localhost listed", ModeAllowlist, []string{"localhost:" + port}, "http://localhost:" + port + "/", "403",
			"an internal address; network.allow may list that address itself"},
		{"wildcard: a subdomain", ModeAllowlist, []string{"*.up.test:" + port, "127.0.0.1:" + port}, "http://a.up.test:" + port + "/", "200", "hello from upstream"},
		{"wildcard: not the apex", ModeAllowlist, []string{"*.up.test:" + port, "127.0.0.1:" + port}, "http://up.test:" + port + "/", "403", "up.test:" + port + " is not in network.allow"},
		{"no port: 80 and 443 only", ModeAllowlist, []string{"up.test", "127.0.0.1"}, "http://up.test:" + port + "/", "403", "is not in network.allow"},
		{"IP literal without port: 80 and 443 only", ModeAllowlist, []string{"127.0.0.1"}, "http://127.0.0.1:" + port + "/", "403", "127.0.0.1:" + port + " is not in network.allow"},
		{"another port", ModeAllowlist, []string{"127.0.0.1:" + other}, "http://127.0.0.1:" + port + "/", "403", "is not in network.allow"},
		{"open: internal refused", ModeOpen, nil, "http://127.0.0.1:" + port + "/", "403",
			"sandbox-mcp: 127.0.0.1:" + port + " is an internal address; network.allow may list that address itself"},
		{"open: a name resolving to loopback refused", ModeOpen, nil, "http://up.test:" + port + "/", "403", "resolves to 127.0.0.1, an internal address"},
		{"https:// in plain form", ModeAllowlist, []string{"127.0.0.1:" + port}, "", "400", "https:// goes through CONNECT"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, err := New(Config{Mode: tc.mode, Allow: tc.allow}, Options{lookup: lookup})
			if err != nil {
				t.Fatal(err)
			}
			addr := start(t, p, Who{Thread: "t1"})
			var body, code string
			if tc.url == "" {
				code, body = rawRequest(t, addr, "GET https://127.0.0.1:"+port+"/ HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
			} else {
				body, code, err = curl(t, addr, tc.url)
				if err != nil {
					t.Fatalf("curl: %v", err)
				}
			}
			if code != tc.code || !strings.Contains(body, tc.body) {
				t.Errorf("got %s %q, want %s with %q", code, body, tc.code, tc.body)
			}
		})
	}
}

func atoiPort(s string) int {
	var n int
	fmt.Sscan(s, &n)
	return n
}

// rawRequest sends req as is on a new connection to the proxy, and
// returns the status code and body of the answer.
func rawRequest(t *testing.T, addr, req string) (code, body string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	return fmt.Sprint(resp.StatusCode), string(b)
}

// A CONNECT to a target not listed is a 403 naming network.allow, and
// the connection closes.
func TestConnectRefused(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, true, nil)
	p, err := New(Config{Mode: ModeAllowlist, Allow: []string{"up.test:" + up.port()}},
		Options{lookup: names(map[string]string{"up.test": "127.0.0.1"})})
	if err != nil {
		t.Fatal(err)
	}
	addr := start(t, p, Who{})
	for _, tc := range []struct{ target, want string }{
		{"other.test:443", "sandbox-mcp: other.test:443 is not in network.allow"},
		{"up.test:" + up.port(), "sandbox-mcp: up.test:" + up.port() + " resolves to 127.0.0.1, an internal address"},
		{"169.254.169.254:80", "sandbox-mcp: 169.254.169.254:80 is not in network.allow"},
	} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(30 * time.Second))
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", tc.target, tc.target)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(b), tc.want) {
			t.Errorf("CONNECT %s: %d %q, want 403 with %q", tc.target, resp.StatusCode, b, tc.want)
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if n, err := br.Read(make([]byte, 1)); err != io.EOF {
			t.Errorf("CONNECT %s: after the refusal, read %d bytes, %v; want the connection closed", tc.target, n, err)
		}
		c.Close()
	}
	// And as curl sees it.
	_, _, err = curl(t, addr, "https://other.test/")
	if err == nil || !strings.Contains(err.Error(), "403") {
		t.Errorf("curl through a refused CONNECT: %v, want a failure naming the 403", err)
	}
}

// A CONNECT to a host without inject entries is a byte tunnel: the
// sandbox sees the real server's certificate, and nothing is added.
func TestConnectTunnel(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, true, nil)
	p, err := New(Config{Mode: ModeAllowlist, Allow: []string{"127.0.0.1:" + up.port(), "example.com:" + up.port()}},
		Options{lookup: names(map[string]string{"example.com": "127.0.0.1"})})
	if err != nil {
		t.Fatal(err)
	}
	addr := start(t, p, Who{})
	ca := writeFile(t, "up.pem", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: up.Certificate().Raw}))
	body, code, err := curl(t, addr, "https://example.com:"+up.port()+"/", "--cacert", ca, "-H", "Authorization: mine")
	if err != nil || code != "200" || body != "hello from upstream" {
		t.Fatalf("curl through a tunnel: %s %q %v", code, body, err)
	}
	if got := up.last(t).Header.Get("Authorization"); got != "mine" {
		t.Errorf("the upstream got Authorization %q through a tunnel, want the sandbox's own", got)
	}
	// A Go client sees the upstream's own certificate.
	c := proxyClient(addr, up.roots())
	resp, err := c.Get("https://example.com:" + up.port() + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if !resp.TLS.PeerCertificates[0].Equal(up.Certificate()) {
		t.Error("through a tunnel the client sees another certificate than the upstream's")
	}
}

// proxyClient is an HTTP client going through the proxy at addr,
// trusting roots.
func proxyClient(addr string, roots *x509.CertPool) *http.Client {
	return &http.Client{
		Timeout: 30 * time.Second,
		Transport: &http.Transport{
			Proxy:           http.ProxyURL(&url.URL{Scheme: "http", Host: addr}),
			TLSClientConfig: &tls.Config{RootCAs: roots},
		},
	}
}

// A streamed response (no length: server-sent events, a model's tokens)
// reaches the sandbox as it comes, not when it ends.
func TestStreaming(t *testing.T) {
	t.Parallel()
	read := make(chan struct{})
	up := newUpstream(t, false, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, "first\n")
		http.NewResponseController(w).Flush()
		select {
		case <-read:
		case <-time.After(10 * time.Second):
		}
		io.WriteString(w, "second\n")
	}))
	p, err := New(Config{Mode: ModeAllowlist, Allow: []string{"127.0.0.1:" + up.port()}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	addr := start(t, p, Who{})
	resp, err := proxyClient(addr, nil).Get(up.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	start := time.Now()
	line, err := br.ReadString('\n')
	if err != nil || line != "first\n" || time.Since(start) > 5*time.Second {
		t.Fatalf("the first line: %q %v after %v (held back by the proxy?)", line, err, time.Since(start))
	}
	close(read)
	if rest, _ := io.ReadAll(br); string(rest) != "second\n" {
		t.Errorf("the rest: %q", rest)
	}
}
