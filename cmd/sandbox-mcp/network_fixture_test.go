package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// upstream is the world a sandbox in network.mode allowlist reaches
// through the proxy, on this machine: a plain HTTP server and an HTTPS
// one on an address of the host that is not loopback (a sandbox's
// NO_PROXY sends loopback direct, to its own dev servers), preferring a
// private one, which the allowlist then names as an IP literal (SPEC §17:
// an internal service).
type upstream struct {
	ip     string
	plain  *httptest.Server // /: hello; /echo: the request's headers; /big: 10 MiB; /repo.git/: a git repository (dumb HTTP)
	tls    *httptest.Server // the same over TLS, its certificate for ip from ca
	caFile string           // the upstream's CA (PEM): the server trusts it through SSL_CERT_FILE

	mu   sync.Mutex
	seen []http.Header // the headers of every request the TLS server got
}

const upstreamHello = "hello from upstream"

// hostIP is an IPv4 address of this machine that is not loopback, a
// private one first.
func hostIP(t testing.TB) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	var found []net.IP
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
			found = append(found, n.IP)
		}
	}
	sort.SliceStable(found, func(i, j int) bool { return found[i].IsPrivate() && !found[j].IsPrivate() })
	if len(found) == 0 {
		t.Skip("SKIPPED: this machine has no IPv4 address but loopback, for the upstream servers")
	}
	return found[0].String()
}

func newUpstream(t testing.TB) *upstream {
	t.Helper()
	u := &upstream{ip: hostIP(t)}
	repo := gitRepo(t)
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, upstreamHello) })
	mux.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) {
		if r.TLS != nil {
			u.mu.Lock()
			u.seen = append(u.seen, r.Header.Clone())
			u.mu.Unlock()
		}
		var names []string
		for k := range r.Header {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			fmt.Fprintf(w, "%s: %s\n", k, strings.Join(r.Header[k], ", "))
		}
	})
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", fmt.Sprint(10<<20))
		chunk := make([]byte, 64<<10)
		for i := 0; i < (10<<20)/len(chunk); i++ {
			w.Write(chunk)
		}
	})
	mux.Handle("/repo.git/", http.StripPrefix("/repo.git/", http.FileServer(http.Dir(repo))))

	listen := func() net.Listener {
		l, err := net.Listen("tcp", net.JoinHostPort(u.ip, "0"))
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	u.plain = &httptest.Server{Listener: listen(), Config: &http.Server{Handler: mux}}
	u.plain.Start()
	t.Cleanup(u.plain.Close)

	caPEM, leaf := upstreamCert(t, u.ip)
	u.caFile = filepath.Join(t.TempDir(), "upstream-ca.pem")
	if err := os.WriteFile(u.caFile, caPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	u.tls = &httptest.Server{Listener: listen(), Config: &http.Server{Handler: mux}, TLS: &tls.Config{Certificates: []tls.Certificate{leaf}}}
	u.tls.StartTLS()
	t.Cleanup(u.tls.Close)
	return u
}

// hostPort is the server's address as an allow entry names it.
func hostPort(s *httptest.Server) string { return s.Listener.Addr().String() }

// sawHeader reports the values of name the TLS server was sent.
func (u *upstream) sawHeader(name string) []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	var out []string
	for _, h := range u.seen {
		out = append(out, h.Values(name)...)
	}
	return out
}

// upstreamCert makes a CA and a certificate for ip signed by it.
func upstreamCert(t testing.TB, ip string) (caPEM []byte, leaf tls.Certificate) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "upstream test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: ip},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP(ip)}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// gitRepo is a bare repository of one commit (README: "cloned through the
// proxy"), ready to serve over git's dumb HTTP.
func gitRepo(t testing.TB) string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("SKIPPED: no git (apt-get install git)")
	}
	dir := t.TempDir()
	work, bare := filepath.Join(dir, "work"), filepath.Join(dir, "repo.git")
	run := func(d string, args ...string) {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = d
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com", "HOME="+dir)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	os.MkdirAll(work, 0o755)
	run(work, "init", "-q", "-b", "main")
	os.WriteFile(filepath.Join(work, "README"), []byte("cloned through the proxy\n"), 0o644)
	run(work, "add", "README")
	run(work, "commit", "-q", "-m", "first")
	run(dir, "clone", "-q", "--bare", work, bare)
	run(bare, "update-server-info")
	return bare
}
