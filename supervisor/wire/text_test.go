package wire

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
	"time"
)

// testCA is a self-signed CA certificate, PEM-encoded.
func testCA(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"}, NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

func TestValidCA(t *testing.T) {
	t.Parallel()
	ca, other := testCA(t), testCA(t)
	key := string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte{1, 2, 3}}))
	headers := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Headers: map[string]string{"Proc-Type": "4,ENCRYPTED"}, Bytes: []byte{1}}))
	for _, tc := range []struct {
		name string
		ca   string
		ok   bool
	}{
		{"one", ca, true},
		{"two, blank lines around", "\n" + ca + "\r\n\n" + other + "\n\n", true},
		{"indented", ca + "\t" + other, false},
		{"empty", "", false},
		{"spaces only", " \n", false},
		{"a private key", key, false},
		{"a key after a certificate", ca + key, false},
		{"headers", headers, false},
		{"text before", "hello\n" + ca, false},
		{"text between", ca + "hello\n" + other, false},
		{"text after", ca + "hello", false},
		{"truncated", ca[:len(ca)-20], false},
		{"too large", strings.Repeat(ca, MaxCABytes/len(ca)+1), false},
	} {
		if got := ValidCA([]byte(tc.ca)); got != tc.ok {
			t.Errorf("%s: ValidCA %v, want %v", tc.name, got, tc.ok)
		}
	}
}
