package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/audit"
	"github.com/sandbox-mcp/sandbox-mcp/internal/testkit"
)

const secret = "Bearer s3cret-t0ken"

// injecting is a proxy that injects the secret as Authorization (and a
// second header) into HTTPS requests to example.com at the TLS
// upstream's port, and, on the plain upstream's port, as well — where it
// must not be added.
type injecting struct {
	p        *Proxy
	addr     string
	tlsUp    *upstream
	plainUp  *upstream
	caFile   string
	caPool   *x509.CertPool
	auditLog *testkit.Buffer
	logs     *testkit.Buffer
}

func newInjecting(t *testing.T, tlsHandler http.Handler) *injecting {
	t.Helper()
	in := &injecting{tlsUp: newUpstream(t, true, tlsHandler), plainUp: newUpstream(t, false, nil), auditLog: &testkit.Buffer{}, logs: &testkit.Buffer{}}
	tp, pp := in.tlsUp.port(), in.plainUp.port()
	cfg := Config{
		Mode:  ModeAllowlist,
		Allow: []string{"example.com:" + tp, "127.0.0.1:" + tp, "example.com:" + pp, "127.0.0.1:" + pp},
		Inject: []Inject{
			{Host: "example.com:" + tp, Header: "Authorization", Value: secret},
			{Host: "example.com:" + tp, Header: "x-api-key", Value: "k3y-" + secret},
			{Host: "example.com:" + pp, Header: "Authorization", Value: secret},
		},
	}
	p, err := New(cfg, Options{
		StateDir: t.TempDir(),
		Audit:    audit.NewWriter(in.auditLog),
		Logger:   slogTo(in.logs),
		RootCAs:  in.tlsUp.roots(),
		lookup:   names(map[string]string{"example.com": "127.0.0.1"}),
	})
	if err != nil {
		t.Fatal(err)
	}
	in.p = p
	in.addr = start(t, p, Who{Session: "s1", Thread: "t1", Sandbox: "sb1", Provider: "test"})
	in.caFile = writeFile(t, "ca.pem", p.CA())
	in.caPool = x509.NewCertPool()
	if !in.caPool.AppendCertsFromPEM(p.CA()) {
		t.Fatal("CA() is not a PEM certificate")
	}
	t.Cleanup(func() {
		// Nothing the proxy wrote names the secret.
		for what, text := range map[string]string{"audit log": in.auditLog.String(), "log": in.logs.String()} {
			if strings.Contains(text, "s3cret") {
				t.Errorf("the %s names the secret: %s", what, text)
			}
		}
	})
	return in
}

func (in *injecting) url(path string) string {
	return "https://example.com:" + in.tlsUp.port() + path
}

func TestInject(t *testing.T) {
	t.Parallel()
	in := newInjecting(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Echo", r.Header.Get("Authorization")) // a server that echoes what it got
		io.WriteString(w, "hello from upstream")
	}))

	t.Run("a Go client: header set, replacing the sandbox's, certificate of the CA", func(t *testing.T) {
		c := proxyClient(in.addr, in.caPool)
		req, _ := http.NewRequest("GET", in.url("/x"), nil)
		req.Header.Set("Authorization", "Bearer mine")
		req.Header.Add("Authorization", "Bearer mine too")
		req.Header.Set("Proxy-Authorization", "Basic cHJveHk6cHc=")
		req.Header.Set("Proxy-Secret", "for the proxy only")
		req.Host = "elsewhere.test" // the secret still goes to example.com, as example.com
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != "hello from upstream" {
			t.Fatalf("got %d %q", resp.StatusCode, b)
		}
		got := in.tlsUp.last(t)
		if vs := got.Header.Values("Authorization"); len(vs) != 1 || vs[0] != secret {
			t.Errorf("the upstream got Authorization %q, want the injected one alone", vs)
		}
		if v := got.Header.Get("X-Api-Key"); v != "k3y-"+secret {
			t.Errorf("the upstream got X-Api-Key %q", v)
		}
		for _, h := range []string{"Proxy-Authorization", "Proxy-Secret"} {
			if v := got.Header.Get(h); v != "" {
				t.Errorf("%s went upstream: %q", h, v)
			}
		}
		if want := "example.com:" + in.tlsUp.port(); got.Host != want {
			t.Errorf("the upstream got Host %q, want %q", got.Host, want)
		}
		if v := resp.Header.Get("X-Echo"); strings.Contains(v, "s3cret") {
			t.Errorf("the secret came back to the sandbox in a header: %q", v)
		}
		leaf := resp.TLS.PeerCertificates[0]
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: in.caPool, DNSName: "example.com"}); err != nil {
			t.Errorf("the certificate the sandbox sees does not chain to the CA: %v", err)
		}
		if leaf.PublicKeyAlgorithm != x509.ECDSA {
			t.Errorf("leaf key %v, want ECDSA", leaf.PublicKeyAlgorithm)
		}
	})

	t.Run("curl with the CA bundle", func(t *testing.T) {
		body, code, err := curl(t, in.addr, in.url("/curl"), "--cacert", in.caFile)
		if err != nil || code != "200" || body != "hello from upstream" {
			t.Fatalf("curl: %s %q %v", code, body, err)
		}
		if v := in.tlsUp.last(t).Header.Get("Authorization"); v != secret {
			t.Errorf("the upstream got Authorization %q from curl", v)
		}
	})

	t.Run("curl without the CA fails", func(t *testing.T) {
		n := len(in.tlsUp.requests())
		_, _, err := curl(t, in.addr, in.url("/untrusted"))
		if err == nil {
			t.Fatal("curl trusted the proxy's certificate without its CA")
		}
		if len(in.tlsUp.requests()) != n {
			t.Error("a request reached the upstream over a TLS the sandbox did not trust")
		}
	})

	t.Run("not over plain HTTP", func(t *testing.T) {
		body, code, err := curl(t, in.addr, "http://example.com:"+in.plainUp.port()+"/plain", "-H", "Authorization: mine", "-H", "Proxy-Secret: for the proxy only")
		if err != nil || code != "200" || body != "hello from upstream" {
			t.Fatalf("curl: %s %q %v", code, body, err)
		}
		if v := in.plainUp.last(t).Header.Get("Authorization"); v != "mine" {
			t.Errorf("over plain HTTP the upstream got Authorization %q, want the sandbox's own", v)
		}
		if v := in.plainUp.last(t).Header.Get("Proxy-Secret"); v != "" {
			t.Errorf("Proxy-Secret went upstream: %q", v)
		}
	})

	t.Run("python urllib with the proxy's environment", func(t *testing.T) {
		py := need(t, "python3")
		env := in.p.Env(in.addr, in.caFile)
		out, err := run(t, env, "", py, "-c",
			"import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=30).read().decode())", in.url("/python"))
		if err != nil || strings.TrimSpace(out) != "hello from upstream" {
			t.Fatalf("python: %q %v", out, err)
		}
		got := in.tlsUp.last(t)
		if got.URL.Path != "/python" || got.Header.Get("Authorization") != secret {
			t.Errorf("the upstream got %s with Authorization %q", got.URL.Path, got.Header.Get("Authorization"))
		}
	})
}

// git over HTTPS with the secret injected (smart HTTP: git-http-backend
// behind a server that wants the token), and over plain HTTP (a dumb
// repository), through the proxy's environment.
func TestGit(t *testing.T) {
	t.Parallel()
	gitBin := need(t, "git")
	execPath, err := exec.Command(gitBin, "--exec-path").Output()
	if err != nil {
		t.Fatal(err)
	}
	backend := filepath.Join(strings.TrimSpace(string(execPath)), "git-http-backend")
	if _, err := os.Stat(backend); err != nil {
		t.Skip("git-http-backend is not installed")
	}
	root := t.TempDir()
	work := filepath.Join(root, "work")
	for _, args := range [][]string{
		{"init", "-q", "-b", "main", work},
		{"-C", work, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "first"},
		{"clone", "-q", "--bare", work, filepath.Join(root, "repo.git")},
		{"-C", filepath.Join(root, "repo.git"), "update-server-info"},
	} {
		if out, err := exec.Command(gitBin, args...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
	}
	smart := &cgi.Handler{Path: backend, Env: []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1"}}
	in := newInjecting(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != secret {
			http.Error(w, "who are you", http.StatusUnauthorized)
			return
		}
		smart.ServeHTTP(w, r)
	}))
	dumb := newUpstream(t, false, http.FileServer(http.Dir(root)))
	p, err := New(Config{Mode: ModeAllowlist, Allow: []string{"git.test:" + dumb.port(), "127.0.0.1:" + dumb.port()}},
		Options{lookup: names(map[string]string{"git.test": "127.0.0.1"})})
	if err != nil {
		t.Fatal(err)
	}
	plainAddr := start(t, p, Who{})

	env := append(in.p.Env(in.addr, in.caFile), "GIT_TERMINAL_PROMPT=0")
	out, err := run(t, env, "", gitBin, "ls-remote", in.url("/repo.git"))
	if err != nil || !strings.Contains(out, "refs/heads/main") {
		t.Fatalf("git ls-remote over HTTPS: %q %v", out, err)
	}
	dest := filepath.Join(t.TempDir(), "clone")
	if _, err := run(t, env, "", gitBin, "clone", "-q", in.url("/repo.git"), dest); err != nil {
		t.Fatalf("git clone over HTTPS: %v", err)
	}
	if out, err := exec.Command(gitBin, "-C", dest, "log", "--format=%s").Output(); err != nil || strings.TrimSpace(string(out)) != "first" {
		t.Errorf("the clone's log: %q %v", out, err)
	}
	sawPost := false
	for _, r := range in.tlsUp.requests() {
		sawPost = sawPost || r.Method == http.MethodPost
	}
	if !sawPost {
		t.Error("git sent no POST (smart HTTP) through the proxy")
	}

	env = append(p.Env(plainAddr, ""), "GIT_TERMINAL_PROMPT=0")
	out, err = run(t, env, "", gitBin, "ls-remote", "http://git.test:"+dumb.port()+"/repo.git")
	if err != nil || !strings.Contains(out, "refs/heads/main") {
		t.Fatalf("git ls-remote over plain HTTP: %q %v", out, err)
	}
	if len(dumb.requests()) == 0 {
		t.Error("the plain git server got no request")
	}
}

// An upgrade (a websocket) inside a terminated tunnel is refused: its
// frames could carry the secret back, and the proxy cannot scrub them.
// The upstream never sees the request.
func TestInjectUpgradeRefused(t *testing.T) {
	t.Parallel()
	in := newInjecting(t, nil)
	tc := dialThrough(t, in.addr, "example.com:"+in.tlsUp.port(), &tls.Config{RootCAs: in.caPool, ServerName: "example.com"})
	fmt.Fprintf(tc, "GET /ws HTTP/1.1\r\nHost: example.com\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(b), "example.com:"+in.tlsUp.port()) || !strings.Contains(string(b), "network.inject") {
		t.Errorf("upgrade: %d %q, want a 403 naming the host and network.inject", resp.StatusCode, b)
	}
	if n := len(in.tlsUp.requests()); n != 0 {
		t.Errorf("the upstream got %d requests", n)
	}
}

// dialThrough opens a CONNECT tunnel to target through the proxy and
// speaks TLS in it.
func dialThrough(t *testing.T, proxy, target string, conf *tls.Config) *tls.Conn {
	t.Helper()
	c, err := net.Dial("tcp", proxy)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT %s: %v %v", target, resp, err)
	}
	tc := tls.Client(c, conf)
	if err := tc.HandshakeContext(context.Background()); err != nil {
		t.Fatalf("TLS through the tunnel: %v", err)
	}
	return tc
}

// The upstream fails: the sandbox is told why in one line naming no
// secret, and the upstream's certificate is checked.
func TestInjectUpstreamUntrusted(t *testing.T) {
	t.Parallel()
	in := newInjecting(t, nil)
	// A proxy that trusts no root.
	p, err := New(Config{Mode: ModeAllowlist, Allow: []string{"example.com:" + in.tlsUp.port(), "127.0.0.1:" + in.tlsUp.port()},
		Inject: []Inject{{Host: "example.com:" + in.tlsUp.port(), Header: "Authorization", Value: secret}}},
		Options{StateDir: t.TempDir(), RootCAs: x509.NewCertPool(), lookup: names(map[string]string{"example.com": "127.0.0.1"})})
	if err != nil {
		t.Fatal(err)
	}
	addr := start(t, p, Who{})
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(p.CA())
	n := len(in.tlsUp.requests())
	resp, err := proxyClient(addr, pool).Get(in.url("/"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	want := "sandbox-mcp: cannot reach example.com:" + in.tlsUp.port() + ": its TLS certificate is not trusted\n"
	if resp.StatusCode != http.StatusBadGateway || string(b) != want {
		t.Errorf("got %d %q, want 502 %q", resp.StatusCode, b, want)
	}
	if len(in.tlsUp.requests()) != n {
		t.Error("a request reached the upstream the proxy does not trust")
	}
}
