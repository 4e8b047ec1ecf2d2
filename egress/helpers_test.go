package egress

import (
	"bytes"
	"context"
	"crypto/x509"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// names resolves the names given to their addresses, and any other name
// as the system does: tests reach loopback servers by name with it.
func names(m map[string]string) func(ctx context.Context, host string) ([]netip.Addr, error) {
	return func(ctx context.Context, host string) ([]netip.Addr, error) {
		if a, ok := m[host]; ok {
			return []netip.Addr{netip.MustParseAddr(a)}, nil
		}
		return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	}
}

// start serves p on a real TCP listener, as the supervisor's channel hands
// it connections, and returns its address. At the end of the test every
// ServeConn must have returned.
func start(t testing.TB, p *Proxy, who Who) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	accepting := make(chan struct{})
	go func() {
		defer close(accepting)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				p.ServeConn(ctx, c, who)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-accepting
		cancel()
		if !waitFor(&wg, 10*time.Second) {
			t.Error("ServeConn did not return after its context was done")
		}
	})
	return ln.Addr().String()
}

func waitFor(wg *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// upstream is a test server that notes the requests it gets.
type upstream struct {
	*httptest.Server
	mu   sync.Mutex
	seen []*http.Request
}

func (u *upstream) requests() []*http.Request {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]*http.Request(nil), u.seen...)
}

func (u *upstream) last(t *testing.T) *http.Request {
	t.Helper()
	rs := u.requests()
	if len(rs) == 0 {
		t.Fatal("the upstream server got no request")
	}
	return rs[len(rs)-1]
}

// port is the server's port.
func (u *upstream) port() string {
	_, port, _ := net.SplitHostPort(u.Listener.Addr().String())
	return port
}

// roots trusts the server's certificate.
func (u *upstream) roots() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(u.Certificate())
	return pool
}

// newUpstream starts a server answering "hello from upstream" (or what h
// answers); over TLS when tls is set.
func newUpstream(t testing.TB, tls bool, h http.Handler) *upstream {
	t.Helper()
	u := &upstream{}
	if h == nil {
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "hello from upstream")
		})
	}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.seen = append(u.seen, r.Clone(context.Background()))
		u.mu.Unlock()
		h.ServeHTTP(w, r)
	})
	u.Server = httptest.NewUnstartedServer(handler)
	u.Config.ErrorLog = log.New(io.Discard, "", 0) // handshakes the tests make fail
	if tls {
		u.StartTLS()
	} else {
		u.Start()
	}
	t.Cleanup(u.Close)
	return u
}

// need skips the test when the program is not installed.
func need(t *testing.T, prog string) string {
	t.Helper()
	path, err := exec.LookPath(prog)
	if err != nil {
		t.Skipf("%s is not installed", prog)
	}
	return path
}

// run runs a program with only the environment given (and PATH, HOME), so
// that no proxy setting of the machine's applies. It returns stdout, and
// the error with stderr in it.
func run(t *testing.T, env []string, dir string, prog string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, prog, args...)
	cmd.Dir = dir
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "LANG=C"}, env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		err = &runError{err: err, stderr: errb.String()}
	}
	return out.String(), err
}

type runError struct {
	err    error
	stderr string
}

func (e *runError) Error() string { return e.err.Error() + ": " + strings.TrimSpace(e.stderr) }

// writeFile writes b to a new file in a temporary directory.
func writeFile(t *testing.T, name string, b []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// curl fetches url through the proxy at proxy, with curl's own -x, and
// returns the body and the status code curl saw.
func curl(t *testing.T, proxy, url string, extra ...string) (body string, code string, err error) {
	t.Helper()
	prog := need(t, "curl")
	args := append([]string{"-sS", "--max-time", "30", "-x", "http://" + proxy, "-w", "\n%{http_code}", url}, extra...)
	out, err := run(t, nil, "", prog, args...)
	i := strings.LastIndexByte(out, '\n')
	if i < 0 {
		return out, "", err
	}
	return out[:i], out[i+1:], err
}

// slogTo logs everything, debug included, to w.
func slogTo(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
