package main

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestRedTeamE2EEchoedSecretUnmasked: the injected value does enter the
// sandbox — whenever the inject host echoes a request header in a body
// (the scenario's own /echo; httpbin-like endpoints, error pages quoting
// the credential they refused, TRACE) — and the masker, the only guard
// left, matches the literal value: any transform of it (base64, reversed,
// split) reaches the agent's tool output whole. With the value in a
// sandbox file, the code there can also send it to any other allowed host
// (a POST body), which goal 2 forbids.
//
// FAILS on the current code. Fix at the proxy, not the masker: scrub the
// inject values from the bodies of responses of the terminated tunnel
// (egress/tunnel.go, mitm: ModifyResponse wraps resp.Body in a streaming
// replacer keeping len(secret)-1 bytes of overlap, and drops
// Content-Length, or refuses a Content-Encoding it cannot scan; refuse
// TRACE/TRACK) so that the value never enters the sandbox as SPEC §17
// says; the masker then stays a second line.
func TestRedTeamE2EEchoedSecretUnmasked(t *testing.T) {
	t.Parallel()
	requireBwrap(t)
	requireCurl(t)
	u := newUpstream(t)
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	os.WriteFile(cfg, []byte(netConfig(u)), 0o644)
	p := start(t, opts{noBash: true, isolation: "bwrap", extra: []string{"--config", cfg}, env: netEnv(u)})
	secure := "https://" + hostPort(u.tls)
	out, isErr := p.call("bash", map[string]any{"command": "curl -sS " + secure + "/echo | grep -i '^X-Api-Key' | cut -d' ' -f2- | tr -d '\\n' | base64 -w0; echo", "timeout": 60})
	if isErr {
		t.Fatalf("bash: %s", out)
	}
	if strings.Contains(out, e2eSecret) {
		t.Fatalf("the secret is shown literally (masker failed outright): %s", out)
	}
	for _, m := range regexp.MustCompile(`[A-Za-z0-9+/]{16,}={0,2}`).FindAllString(out, -1) {
		if b, err := base64.StdEncoding.DecodeString(m); err == nil && strings.Contains(string(b), e2eSecret) {
			t.Errorf("the injected secret reached the agent's tool output, base64-encoded: %q decodes to %q", m, b)
		}
	}
	out, _ = p.call("bash", map[string]any{"command": "curl -sS " + secure + "/echo | grep -i '^X-Api-Key' | cut -d' ' -f2- | rev", "timeout": 60})
	rev := []rune(e2eSecret)
	for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
		rev[i], rev[j] = rev[j], rev[i]
	}
	if strings.Contains(out, string(rev)) {
		t.Errorf("the injected secret reached the agent's tool output reversed: %q", out)
	}
}
