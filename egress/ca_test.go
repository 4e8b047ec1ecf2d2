package egress

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

var injectCfg = Config{Mode: ModeAllowlist, Allow: []string{"api.example.com"}, Inject: []Inject{{Host: "api.example.com", Header: "Authorization", Value: "Bearer x"}}}

// Several servers starting at once on one state dir make one CA, and
// none reads a half-made one.
func TestCAOnce(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const n = 8
	cas := make([][]byte, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			p, err := New(injectCfg, Options{StateDir: dir})
			errs[i] = err
			if err == nil {
				cas[i] = p.CA()
			}
		})
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("New %d: %v", i, errs[i])
		}
		if !bytes.Equal(cas[i], cas[0]) {
			t.Fatalf("New %d made another CA than New 0", i)
		}
	}
	checkCAFiles(t, dir, cas[0])
	p, err := New(injectCfg, Options{StateDir: dir})
	if err != nil || !bytes.Equal(p.CA(), cas[0]) {
		t.Fatalf("a later New: %v, same CA %v", err, err == nil && bytes.Equal(p.CA(), cas[0]))
	}
	blk, _ := pem.Decode(cas[0])
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil || !cert.IsCA || !strings.HasPrefix(cert.Subject.CommonName, "sandbox-mcp egress CA") {
		t.Errorf("the CA certificate: %v %+v", err, cert.Subject)
	}

	// ca.pem lost: made again from the key, the CA unchanged.
	os.Remove(filepath.Join(dir, "network", caCertFile))
	if p, err = New(injectCfg, Options{StateDir: dir}); err != nil || !bytes.Equal(p.CA(), cas[0]) {
		t.Fatalf("New after ca.pem was removed: %v", err)
	}
	checkCAFiles(t, dir, cas[0])
}

// checkCAFiles: the CA's files are there, with their modes, and nothing
// else is left behind.
func checkCAFiles(t *testing.T, dir string, certPEM []byte) {
	t.Helper()
	netDir := filepath.Join(dir, "network")
	entries, err := os.ReadDir(netDir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	if strings.Join(got, " ") != "ca-key.pem ca.pem" {
		t.Errorf("%s holds %v, want ca-key.pem and ca.pem alone", netDir, got)
	}
	for name, mode := range map[string]os.FileMode{caCertFile: 0o644, caKeyFile: 0o600} {
		fi, err := os.Stat(filepath.Join(netDir, name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != mode {
			t.Errorf("%s has mode %v, want %v", name, fi.Mode().Perm(), mode)
		}
	}
	b, _ := os.ReadFile(filepath.Join(netDir, caCertFile))
	if !bytes.Equal(b, certPEM) {
		t.Error("ca.pem is not the CA's certificate")
	}
	key, _ := os.ReadFile(filepath.Join(netDir, caKeyFile))
	if !bytes.Contains(key, []byte("PRIVATE KEY")) || bytes.Contains(b, []byte("PRIVATE KEY")) {
		t.Error("the key is not in ca-key.pem alone")
	}
}

// The same across processes, as several servers on one state dir are.
func TestCAOnceAcrossProcesses(t *testing.T) {
	t.Parallel()
	if dir := os.Getenv("EGRESS_TEST_CA_DIR"); dir != "" {
		p, err := New(injectCfg, Options{StateDir: dir})
		if err != nil {
			os.Stdout.WriteString("error: " + err.Error())
			return
		}
		os.Stdout.Write(p.CA())
		return
	}
	dir := t.TempDir()
	const n = 4
	outs := make([][]byte, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			cmd := exec.Command(os.Args[0], "-test.run=^TestCAOnceAcrossProcesses$")
			cmd.Env = append(os.Environ(), "EGRESS_TEST_CA_DIR="+dir)
			outs[i], _ = cmd.Output()
		})
	}
	wg.Wait()
	for i := range n {
		b, _, _ := bytes.Cut(outs[i], []byte("-----END CERTIFICATE-----\n"))
		outs[i] = append(b, "-----END CERTIFICATE-----\n"...)
		if !bytes.HasPrefix(outs[i], []byte("-----BEGIN CERTIFICATE-----")) || !bytes.Equal(outs[i], outs[0]) {
			t.Fatalf("process %d: %q, process 0: %q", i, outs[i], outs[0])
		}
	}
	checkCAFiles(t, dir, outs[0])
}

// A CA file that is not one stops New with a line naming it.
func TestCABroken(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "network"), 0o700)
	path := filepath.Join(dir, "network", caKeyFile)
	os.WriteFile(path, []byte("-----BEGIN PRIVATE KEY-----\nnot base64\n"), 0o600)
	_, err := New(injectCfg, Options{StateDir: dir})
	if err == nil || !strings.Contains(err.Error(), path) || !strings.HasPrefix(err.Error(), "network.inject: ") {
		t.Errorf("New on a broken CA: %v", err)
	}
	if _, err := New(injectCfg, Options{}); err == nil || !strings.Contains(err.Error(), "state dir") {
		t.Errorf("New without a state dir: %v", err)
	}
	// Nothing is made without inject entries.
	empty := t.TempDir()
	if p, err := New(Config{Mode: ModeAllowlist, Allow: []string{"api.example.com"}}, Options{StateDir: empty}); err != nil || p.CA() != nil {
		t.Fatalf("New without inject: %v", err)
	}
	if entries, _ := os.ReadDir(empty); len(entries) != 0 {
		t.Errorf("New without inject made %v", entries)
	}
}

// Leaf certificates are minted once per host and kept within bounds.
func TestLeafCache(t *testing.T) {
	t.Parallel()
	p, err := New(injectCfg, Options{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	a, err := p.ca.leaf("api.example.com")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := p.ca.leaf("api.example.com")
	if a != b {
		t.Error("a second leaf for the same host was minted")
	}
	ip, err := p.ca.leaf("10.0.0.5")
	if err != nil || len(ip.Leaf.IPAddresses) != 1 || len(ip.Leaf.DNSNames) != 0 {
		t.Errorf("a leaf for an IP: %v %v", err, ip.Leaf)
	}
	for i := range leafCacheMax + 10 {
		p.ca.leaf("h" + strings.Repeat("x", i%3) + string(rune('a'+i%26)) + ".example" + string(rune('a'+i/26)))
	}
	if n := len(p.ca.leaves); n > leafCacheMax {
		t.Errorf("%d leaves cached, want at most %d", n, leafCacheMax)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(p.CA())
	if _, err := a.Leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "api.example.com"}); err != nil {
		t.Errorf("the leaf does not chain to the CA: %v", err)
	}
}
