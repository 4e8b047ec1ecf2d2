package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// e2eSecret is the header value the proxy adds to the upstream's HTTPS
// requests; the sandbox must never hold it, and no result may show it.
const e2eSecret = "sk-e2e-7f3a9c1e5b2d"

// netConfig is the network section of the scenario: the upstream's two
// servers allowed by IP literal and port, "localhost" and the plain one's
// port allowed by name (the proxy must still refuse it: it resolves to
// loopback), and a header
// injected into the HTTPS server's requests from the server's environment.
func netConfig(u *upstream) string {
	return fmt.Sprintf(`network:
  mode: allowlist
  allow: [%q, %q, "localhost:%s"]
  inject:
    - {host: %q, header: X-Api-Key, value: "${E2E_API_KEY}"}
`, hostPort(u.plain), hostPort(u.tls), portOf(u.plain), hostPort(u.tls))
}

// netEnv is the server's environment for the scenario: the secret, and the
// upstream's CA among the roots the proxy trusts (Go reads SSL_CERT_FILE).
func netEnv(u *upstream) []string {
	return []string{"E2E_API_KEY=" + e2eSecret, "SSL_CERT_FILE=" + u.caFile}
}

// netTools says which clients a sandbox's image has.
type netTools struct{ curl, python, git, wget bool }

// netScenario drives a sandbox in network.mode allowlist (SPEC §17) with
// call: what is listed passes through the proxy (curl, python, git, or
// busybox's wget), what is not is refused naming network.allow, a name
// that resolves to loopback is refused, the sandbox has no route of its
// own, the injected header reaches the upstream but neither the sandbox's
// variables and files nor any result, and every connection is an audit
// line (auditPath: the server's log, "" when off).
func netScenario(t *testing.T, u *upstream, call func(string, map[string]any) (string, bool), has netTools, auditPath string) {
	t.Helper()
	bash := func(cmd string) string {
		t.Helper()
		out, isErr := call("bash", map[string]any{"command": cmd, "timeout": 60})
		if isErr {
			t.Fatalf("bash %q: %s", cmd, out)
		}
		return out
	}
	want := func(cmd string, subs ...string) string {
		t.Helper()
		out := bash(cmd)
		for _, s := range subs {
			if !strings.Contains(out, s) {
				t.Errorf("bash %q =\n%s\nwant it to hold %q", cmd, out, s)
			}
		}
		return out
	}
	plain, secure := "http://"+hostPort(u.plain), "https://"+hostPort(u.tls)

	// The secret is nowhere in the sandbox: not in a variable of any
	// process, not in a file it can read where a sandbox keeps things.
	// (The command spells it in two halves, so that its own text holds
	// it whole nowhere; the answers are counts.)
	half := len(e2eSecret) / 2
	want(fmt.Sprintf(`S=%s; S="${S}%s"; n=0; for f in /proc/[0-9]*/environ; do tr '\0' '\n' <"$f" 2>/dev/null | grep -qF "$S" && n=$((n+1)); done; echo "environ $n"; `+
		`echo "files $(grep -rlsF "$S" /tmp /mnt /etc /run /var/tmp /dev/shm "$HOME" 2>/dev/null | wc -l)"; env | grep -c '^HTTPS_PROXY=http://127.0.0.1:'`,
		e2eSecret[:half], e2eSecret[half:]), "environ 0\n", "files 0\n", "\n1\n")

	if has.curl {
		want("curl -sS "+plain+"/", upstreamHello, "[exit code 0]")
		want("curl -sS -o /dev/null -w '%{size_download}' "+plain+"/big", "10485760")
		// HTTPS to a host with an injected header: terminated by the proxy
		// with the CA the sandbox trusts; the upstream echoes the header,
		// and the result shows it masked.
		out := want("curl -sS "+secure+"/echo", "X-Api-Key: [secret]", "[exit code 0]")
		if strings.Contains(out, e2eSecret) {
			t.Errorf("the echoed secret reached the agent:\n%s", out)
		}
		// A header the sandbox sends itself is replaced, not added to.
		want("curl -sS -H 'X-Api-Key: mine' "+secure+"/echo", "X-Api-Key: [secret]\n")
		// Refused: a port not listed, a listed name that resolves to
		// loopback (the proxy checks the address it would connect to).
		want(fmt.Sprintf("curl -sS http://%s:9/", u.ip), "network.allow")
		want("curl -sS --noproxy '' "+strings.Replace(plain, u.ip, "localhost", 1)+"/", "resolves to 127.0.0.1, an internal address; network.allow")
		// No route of its own: straight to the upstream, past the proxy.
		want("curl -sS -m 5 --noproxy '*' "+plain+"/ >/dev/null 2>&1; echo direct=$?", "direct=")
		if out := bash("curl -sS -m 5 --noproxy '*' " + plain + "/"); strings.Contains(out, upstreamHello) {
			t.Errorf("the sandbox reached the upstream without the proxy:\n%s", out)
		}
	}
	if has.python {
		want(`python3 -c "import urllib.request as u; print(u.urlopen('`+secure+`/').read().decode())"`, upstreamHello, "[exit code 0]")
	}
	if has.git {
		want("rm -rf clone && git clone -q "+plain+"/repo.git clone && cat clone/README", "cloned through the proxy", "[exit code 0]")
	}
	if has.wget {
		want("wget -q -O - "+plain+"/", upstreamHello, "[exit code 0]")
		want(fmt.Sprintf("wget -q -O - http://%s:9/ 2>&1; echo rc=$?", u.ip), "rc=1")
	}
	if got := u.sawHeader("X-Api-Key"); has.curl && (len(got) == 0 || got[0] != e2eSecret) {
		t.Errorf("the upstream saw X-Api-Key %q, want the injected secret", got)
	}
	for _, v := range u.sawHeader("X-Api-Key") {
		if v != e2eSecret {
			t.Errorf("the upstream saw X-Api-Key %q: the sandbox's own value passed", v)
		}
	}

	if auditPath == "" {
		return
	}
	// Every connection is an audit line: the allowed with their bytes,
	// the refused.
	var allowed, refused bool
	for _, l := range netAuditLines(t, auditPath) {
		args, _ := l["args"].(map[string]any)
		switch {
		case l["outcome"] == "ok" && args["allowed"] == true && args["host"] == u.ip && fmt.Sprint(args["port"]) == portOf(u.plain):
			if down, _ := args["bytes_down"].(float64); down > 0 {
				allowed = true
			}
		case l["outcome"] == "denied" && args["allowed"] == false:
			refused = true
		}
		if b, _ := json.Marshal(l); strings.Contains(string(b), e2eSecret) {
			t.Errorf("an audit line holds the secret: %s", b)
		}
	}
	if !allowed || !refused {
		t.Errorf("audit: an allowed connection with its bytes %v, a refused one %v", allowed, refused)
	}
}

// portOf is the port s listens on.
func portOf(s *httptest.Server) string {
	_, port, _ := net.SplitHostPort(hostPort(s))
	return port
}

// requireCurl skips (or, where the tests must not skip, fails) without
// curl on this machine.
func requireCurl(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("curl"); err != nil {
		if os.Getenv("SANDBOX_MCP_REQUIRE_BWRAP") == "1" {
			t.Fatal("no curl: .ci/run installs it")
		}
		t.Skip("SKIPPED: no curl (apt-get install curl)")
	}
}

// netAuditLines are the audit log's network lines (tool "network").
func netAuditLines(t *testing.T, path string) []map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l map[string]any
		if json.Unmarshal(sc.Bytes(), &l) == nil && l["tool"] == "network" {
			out = append(out, l)
		}
	}
	return out
}

// The local provider in bubblewrap, network.mode allowlist, over stdio:
// curl, python and git of this machine through the proxy.
func TestE2ENetworkAllowlistBwrap(t *testing.T) {
	t.Parallel()
	requireBwrap(t)
	requireCurl(t)
	u := newUpstream(t)
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	os.WriteFile(cfg, []byte(netConfig(u)), 0o644)
	p := start(t, opts{noBash: true, isolation: "bwrap", extra: []string{"--config", cfg}, env: netEnv(u)})
	netScenario(t, u, p.call, netTools{curl: true, python: true, git: true}, p.auditPath)
}

// exposeScenario: a dev server started as a job in the sandbox is reached
// from the host through expose_port's URL, until the port is closed.
// serve is the command that serves the workspace on 127.0.0.1:port.
func exposeScenario(t *testing.T, call func(string, map[string]any) (string, bool), serve string, port int) string {
	t.Helper()
	if out, isErr := call("write_file", map[string]any{"path": "index.html", "content": "served from the sandbox\n"}); isErr {
		t.Fatal(out)
	}
	if out, isErr := call("bash", map[string]any{"command": serve, "run_in_background": true}); isErr {
		t.Fatal(out)
	}
	out, isErr := call("expose_port", map[string]any{"port": port})
	m := regexp.MustCompile(`https?://\S+/preview/\S+/`).FindString(out)
	if isErr || m == "" {
		t.Fatalf("expose_port: %s", out)
	}
	var body string
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(m)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			body = string(b)
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: %v %q", m, err, body)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !strings.Contains(body, "served from the sandbox") {
		t.Fatalf("GET %s = %q", m, body)
	}
	if out, isErr := call("expose_port", map[string]any{"port": port, "close": true}); isErr {
		t.Fatalf("close: %s", out)
	}
	if resp, err := http.Get(m); err == nil {
		resp.Body.Close()
		if resp.StatusCode != 404 {
			t.Errorf("after close: %d, want 404", resp.StatusCode)
		}
	}
	return m
}

// expose_port on the local provider in bubblewrap (network none: the
// sandbox has only its loopback), over stdio (a loopback listener of the
// server's) and over HTTP (the server's own /preview/).
func TestE2EExposePortBwrap(t *testing.T) {
	t.Parallel()
	requireBwrap(t)
	serve := "cd /mnt/user-data/workspace && exec python3 -m http.server 8765 --bind 127.0.0.1"
	p := start(t, opts{noBash: true, isolation: "bwrap"})
	exposeScenario(t, p.call, serve, 8765)

	h := startHTTPBinary(t, "--isolation", "bwrap")
	cs := jobsSession(t, h, "expose")
	url := exposeScenario(t, func(name string, args map[string]any) (string, bool) { return jobsCall(t, h, cs, name, args) }, serve, 8765)
	if !strings.HasPrefix(url, h.url+"/preview/") {
		t.Errorf("over HTTP the URL %s is not the server's own %s/preview/", url, h.url)
	}
}

// netStdio starts the server over stdio with cfgFile and the scenario's
// environment, and answers its tool call.
func netStdio(t *testing.T, u *upstream, cfgFile, dir, thread string) func(string, map[string]any) (string, bool) {
	t.Helper()
	cmd := exec.Command(binary(t), "--config", cfgFile, "--state-dir", filepath.Join(dir, "state"), "--audit-log", filepath.Join(dir, "audit.jsonl"), "--thread", thread)
	cmd.Env = append(os.Environ(), netEnv(u)...)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	t.Cleanup(cancel)
	cs, stderr := stdioSession(t, ctx, cmd)
	t.Cleanup(func() { cs.Close(); cmd.Wait() })
	return caller(t, ctx, cs, stderr)
}

// appendConfig adds text to the config file.
func appendConfig(t *testing.T, cfgFile, text string) {
	t.Helper()
	f, err := os.OpenFile(cfgFile, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(text); err != nil {
		t.Fatal(err)
	}
}

// The docker provider in a Debian image (curl, python, git) and in a stock
// busybox one (wget): the container has no network (docker's none), its
// supervisor carries the proxy's connections.
func TestE2ENetworkAllowlistDocker(t *testing.T) {
	t.Parallel()
	u := newUpstream(t)
	t.Run("debian", func(t *testing.T) {
		t.Parallel()
		dir, cfgFile, _ := dockerE2EConfig(t)
		appendConfig(t, cfgFile, netConfig(u))
		netScenario(t, u, netStdio(t, u, cfgFile, dir, "net"), netTools{curl: true, python: true, git: true}, filepath.Join(dir, "audit.jsonl"))
	})
	t.Run("busybox", func(t *testing.T) {
		t.Parallel()
		dir, cfgFile, _ := dockerE2EConfig(t)
		cfg, _ := os.ReadFile(cfgFile)
		os.WriteFile(cfgFile, []byte(strings.Replace(string(cfg), "image: sandbox-mcp-base:latest", "image: sandbox-mcp-test:busybox-sh", 1)), 0o644)
		appendConfig(t, cfgFile, netConfig(u))
		netScenario(t, u, netStdio(t, u, cfgFile, dir, "net"), netTools{wget: true}, filepath.Join(dir, "audit.jsonl"))
	})
}

// expose_port on the docker provider, whose container has no network at
// all: a dev server in a job, reached from the host.
func TestE2EExposePortDocker(t *testing.T) {
	t.Parallel()
	dir, cfgFile, prefix := dockerE2EConfig(t)
	cfg, _ := os.ReadFile(cfgFile)
	os.WriteFile(cfgFile, []byte(strings.Replace(string(cfg), "image: sandbox-mcp-base:latest", "image: sandbox-mcp-test:busybox-sh", 1)), 0o644)
	call := netStdio(t, &upstream{}, cfgFile, dir, "expose")
	serve := "exec busybox httpd -f -p 127.0.0.1:8765 -h /mnt/user-data/workspace"
	exposeScenario(t, call, serve, 8765)

	// A preview ends with its box: the container removed behind the
	// server's back, the next one made for the thread (the same dev
	// server in it) is another box, and the URL answers 404.
	if out, isErr := call("bash", map[string]any{"command": serve, "run_in_background": true}); isErr {
		t.Fatal(out)
	}
	out, _ := call("expose_port", map[string]any{"port": 8765})
	url := regexp.MustCompile(`https?://\S+/preview/\S+/`).FindString(out)
	if url == "" {
		t.Fatalf("expose_port: %s", out)
	}
	if got := httpStatus(t, url); got != 200 {
		t.Fatalf("GET %s: %d before the box ended", url, got)
	}
	ids, _ := exec.Command("docker", "ps", "-q", "--filter", "label=sandbox-mcp.prefix="+prefix).Output()
	for _, id := range strings.Fields(string(ids)) {
		exec.Command("docker", "rm", "-f", id).Run()
	}
	if out, isErr := call("bash", map[string]any{"command": serve, "run_in_background": true}); isErr {
		t.Fatalf("bash in the new box: %s", out)
	}
	time.Sleep(500 * time.Millisecond) // its httpd listening
	if got := httpStatus(t, url); got != 404 {
		t.Errorf("GET %s after its box ended: %d, want 404", url, got)
	}
}

// httpStatus is the status of a GET of url (0: no answer).
func httpStatus(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return 0
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// The kubernetes provider: a Pod (its NetworkPolicy denies it every
// route), the proxy's connections carried by its supervisor through the
// Pod's exec channel; and a dev server in the Pod reached from the host.
func TestE2ENetworkAllowlistKubernetes(t *testing.T) {
	t.Parallel()
	u := newUpstream(t)
	cfgFile, dir := k8sE2EConfig(t, os.Getenv("SANDBOX_MCP_K8S_IMAGE"))
	appendConfig(t, cfgFile, netConfig(u))
	call := netStdio(t, u, cfgFile, dir, "net")
	netScenario(t, u, call, netTools{curl: true, python: true, git: true}, filepath.Join(dir, "audit.jsonl"))
	exposeScenario(t, call, "cd /mnt/user-data/workspace && exec python3 -m http.server 8765 --bind 127.0.0.1", 8765)
}
