package egress

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"testing"
	"time"
)

// BenchmarkDownload10MB downloads 10 MB from a loopback server: directly,
// and through the proxy as plain HTTP, as a CONNECT tunnel (HTTPS passed
// through) and terminated with a header injected. Run with
//
//	go test -run '^$' -bench Download10MB -benchtime 20x ./egress/
func BenchmarkDownload10MB(b *testing.B) {
	const size = 10 << 20
	payload := bytes.Repeat([]byte("0123456789abcdef"), size/16)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(payload) })
	plainUp := newUpstream(b, false, handler)
	tlsUp := newUpstream(b, true, handler)
	p, err := New(Config{
		Mode:   ModeAllowlist,
		Allow:  []string{"127.0.0.1:" + plainUp.port(), "127.0.0.1:" + tlsUp.port(), "example.com:" + tlsUp.port()},
		Inject: []Inject{{Host: "example.com:" + tlsUp.port(), Header: "Authorization", Value: "Bearer x"}},
	}, Options{StateDir: b.TempDir(), RootCAs: tlsUp.roots(), lookup: names(map[string]string{"example.com": "127.0.0.1"})})
	if err != nil {
		b.Fatal(err)
	}
	addr := start(b, p, Who{})
	caPool := x509.NewCertPool()
	caPool.AppendCertsFromPEM(p.CA())
	direct := func(roots *x509.CertPool) *http.Client {
		return &http.Client{Timeout: time.Minute, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	}
	for _, bc := range []struct {
		name   string
		client *http.Client
		url    string
	}{
		{"direct", direct(nil), plainUp.URL},
		{"proxy", proxyClient(addr, nil), plainUp.URL},
		{"direct-tls", direct(tlsUp.roots()), tlsUp.URL},
		{"tunnel-tls", proxyClient(addr, tlsUp.roots()), tlsUp.URL},
		{"inject-tls", proxyClient(addr, caPool), "https://example.com:" + tlsUp.port()},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(size)
			for b.Loop() {
				resp, err := bc.client.Get(bc.url + "/")
				if err != nil {
					b.Fatal(err)
				}
				n, err := io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if err != nil || n != size {
					b.Fatalf("%d bytes, %v", n, err)
				}
			}
			bc.client.CloseIdleConnections()
		})
	}
}
