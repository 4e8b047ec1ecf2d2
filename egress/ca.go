package egress

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// The CA's files, in <state dir>/network/.
const (
	caCertFile = "ca.pem"     // the certificate, for the sandbox to trust (0644)
	caKeyFile  = "ca-key.pem" // the key and the certificate (0600)
)

const (
	caValidity   = 10 * 365 * 24 * time.Hour
	leafValidity = 7 * 24 * time.Hour
	leafCacheMax = 256 // hosts whose leaf certificate is kept
)

// ca is the proxy's certificate authority: it mints a certificate for each
// host whose TLS the proxy terminates.
type ca struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte

	mu     sync.Mutex
	leaves map[string]*tls.Certificate // by host
}

// loadOrMakeCA returns the CA of the state dir, making it on first use.
//
// Several server processes may start at once on one state dir, and none
// may ever read a half-made CA. The commit point is one file holding both
// the key and the certificate, ca-key.pem: written whole under a temporary
// name, then hard-linked into place, which fails when another process got
// there first (its CA is then loaded instead). ca.pem, the certificate
// alone, is derived from it by every process (temporary file and rename,
// all writing the same bytes), so it is repaired if lost.
func loadOrMakeCA(stateDir string) (*ca, error) {
	if stateDir == "" {
		return nil, errors.New("network.inject: the proxy's CA needs a state dir")
	}
	dir := filepath.Join(stateDir, "network")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("network.inject: the CA's directory: %w", err)
	}
	keyPath := filepath.Join(dir, caKeyFile)
	for range 2 {
		b, err := os.ReadFile(keyPath)
		if err == nil {
			c, err := parseCA(b)
			if err != nil {
				return nil, fmt.Errorf("network.inject: %s: %w (remove it, and the sandboxes' trust in it, for a new CA)", keyPath, err)
			}
			return c, c.writeCert(dir)
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("network.inject: the CA: %w", err)
		}
		b, err = newCA()
		if err != nil {
			return nil, fmt.Errorf("network.inject: making the CA: %w", err)
		}
		tmp, err := writeTemp(dir, b, 0o600)
		if err != nil {
			return nil, fmt.Errorf("network.inject: writing the CA: %w", err)
		}
		err = os.Link(tmp, keyPath)
		os.Remove(tmp)
		if err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("network.inject: writing the CA: %w", err)
		}
		// Made, or another process made it first: read what is there.
	}
	return nil, fmt.Errorf("network.inject: %s: made but not found", keyPath)
}

// newCA makes a CA and returns its key and certificate in PEM.
func newCA() ([]byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	id := make([]byte, 6)
	rand.Read(id)
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: randomSerial(),
		Subject: pkix.Name{
			Organization: []string{"sandbox-mcp"},
			CommonName:   "sandbox-mcp egress CA " + hex.EncodeToString(id),
		},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	pem.Encode(&b, &pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: der})
	return b.Bytes(), nil
}

// parseCA reads ca-key.pem: a key and the CA certificate of that key.
func parseCA(b []byte) (*ca, error) {
	var c ca
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			break
		}
		switch blk.Type {
		case "PRIVATE KEY":
			k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
			if err != nil {
				return nil, errors.New("its key cannot be read")
			}
			ek, ok := k.(*ecdsa.PrivateKey)
			if !ok {
				return nil, errors.New("its key is not an ECDSA key")
			}
			c.key = ek
		case "CERTIFICATE":
			cert, err := x509.ParseCertificate(blk.Bytes)
			if err != nil {
				return nil, errors.New("its certificate cannot be read")
			}
			c.cert = cert
			c.certPEM = pem.EncodeToMemory(blk)
		}
	}
	if c.key == nil || c.cert == nil {
		return nil, errors.New("not a CA made by sandbox-mcp (a key and a certificate)")
	}
	if !c.cert.IsCA || !c.key.PublicKey.Equal(c.cert.PublicKey) {
		return nil, errors.New("its certificate is not a CA of its key")
	}
	if time.Now().After(c.cert.NotAfter) {
		return nil, errors.New("the CA has expired")
	}
	c.leaves = map[string]*tls.Certificate{}
	return &c, nil
}

// writeCert makes sure dir/ca.pem is the CA's certificate, readable by
// all.
func (c *ca) writeCert(dir string) error {
	path := filepath.Join(dir, caCertFile)
	if b, err := os.ReadFile(path); err == nil && bytes.Equal(b, c.certPEM) {
		if fi, err := os.Stat(path); err == nil && fi.Mode().Perm() == 0o644 {
			return nil
		}
	}
	tmp, err := writeTemp(dir, c.certPEM, 0o644)
	if err == nil {
		if err = os.Rename(tmp, path); err != nil {
			os.Remove(tmp)
		}
	}
	if err != nil {
		return fmt.Errorf("network.inject: writing %s: %w", caCertFile, err)
	}
	return nil
}

// writeTemp writes b, synced, to a new file in dir with mode perm, and
// returns its path.
func writeTemp(dir string, b []byte, perm os.FileMode) (string, error) {
	f, err := os.CreateTemp(dir, ".ca-*.tmp")
	if err != nil {
		return "", err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Chmod(perm) // not the umask's
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}

func randomSerial() *big.Int {
	b := make([]byte, 16)
	rand.Read(b)
	b[0] &= 0x7f // positive
	return new(big.Int).SetBytes(b)
}

// leaf returns a certificate for host (a name or an IP) signed by the CA,
// minted once and kept while it is valid for a day more.
func (c *ca) leaf(host string) (*tls.Certificate, error) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if l, ok := c.leaves[host]; ok && now.Add(24*time.Hour).Before(l.Leaf.NotAfter) {
		return l, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: randomSerial(),
		Subject:      pkix.Name{CommonName: host},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(leafValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if tmpl.NotAfter.After(c.cert.NotAfter) {
		tmpl.NotAfter = c.cert.NotAfter
	}
	if ip := net.ParseIP(host); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	} else {
		tmpl.DNSNames = []string{host}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	if len(c.leaves) >= leafCacheMax {
		for h := range c.leaves { // any one: the hosts are those of network.inject
			delete(c.leaves, h)
			break
		}
	}
	l := &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: cert}
	c.leaves[host] = l
	return l, nil
}
