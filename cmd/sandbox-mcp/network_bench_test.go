package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// BenchmarkProxyDownload10MB is the egress proxy's cost as a sandbox sees
// it (SPEC §17): curl fetching 10 MiB from a server on this machine,
// straight from the host ("direct") and from a bubblewrap sandbox in
// network.mode allowlist, through the proxy its supervisor carries to the
// server ("proxied"), plain HTTP and HTTPS passed through. curl's own
// time_total is reported (ms/download), so the MCP call around it counts
// for nothing.
//
//	go test -run '^$' -bench ProxyDownload10MB -benchtime 20x ./cmd/sandbox-mcp/
func BenchmarkProxyDownload10MB(b *testing.B) {
	if _, err := exec.LookPath("curl"); err != nil {
		b.Skip("no curl")
	}
	u := newUpstream(b)
	cfg := filepath.Join(b.TempDir(), "config.yaml")
	os.WriteFile(cfg, []byte(netConfig(u)), 0o644)
	p := start(b, opts{noBash: true, isolation: "bwrap", extra: []string{"--config", cfg}, env: netEnv(u)})
	report := func(b *testing.B, total float64) {
		b.ReportMetric(total*1000/float64(b.N), "ms/download")
		b.ReportMetric(float64(10<<20)*float64(b.N)/total/1e6, "MB/s")
	}
	for _, c := range []struct{ name, url, curlOpts string }{
		{"http", "http://" + hostPort(u.plain) + "/big", ""},
		{"https", "https://" + hostPort(u.tls) + "/big", ""},
	} {
		b.Run(c.name+"/direct", func(b *testing.B) {
			var total float64
			for range b.N {
				out, err := exec.Command("curl", "-sS", "--cacert", u.caFile, "-o", "/dev/null", "-w", "%{time_total}", c.url).Output()
				if err != nil {
					b.Fatal(err)
				}
				v, _ := strconv.ParseFloat(strings.TrimSpace(string(out)), 64)
				total += v
			}
			report(b, total)
		})
		b.Run(c.name+"/proxied", func(b *testing.B) {
			var total float64
			for range b.N {
				out, isErr := p.call("bash", map[string]any{"command": "curl -sS -k -o /dev/null -w '%{time_total}' " + c.url})
				if isErr || !strings.HasSuffix(out, "[exit code 0]") {
					b.Fatal(out)
				}
				v, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(out, "[exit code 0]")), 64)
				total += v
			}
			report(b, total)
		})
	}
}
