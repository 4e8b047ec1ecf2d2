package main

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestE2EEchoedSecretNeverReachesSandbox: an inject host that echoes the
// request's headers in a body (the scenario's own /echo; httpbin-like
// endpoints, error pages quoting the credential they refused) hands the
// sandbox no secret: the proxy scrubs it from the body (egress/scrub.go),
// so no transform in the sandbox (base64, reversed) gets it past the
// masker, and the sandbox holds nothing it could send to another allowed
// host. (Red team: the value entered the sandbox and only the masker,
// matching it literally, stood in the way.)
func TestE2EEchoedSecretNeverReachesSandbox(t *testing.T) {
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
