package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/providers/local"
)

// doctor runs `sandbox-mcp doctor args...` in this process with HOME (and
// only HOME, as an MCP client gives) set to home, plus env.
func doctor(t *testing.T, home string, env map[string]string, args ...string) (out string, code int) {
	t.Helper()
	vars := map[string]string{"HOME": home}
	for k, v := range env {
		vars[k] = v
	}
	lookup := func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
	var stdout, stderr bytes.Buffer
	code = run(append([]string{"doctor"}, args...), nil, &stdout, &stderr, lookup)
	if stderr.Len() > 0 {
		t.Logf("stderr: %s", stderr.String())
	}
	return stdout.String(), code
}

// clientEntry reads the client config line doctor printed.
func clientEntry(t *testing.T, out string) (command string, args []string, env map[string]string) {
	t.Helper()
	for line := range strings.SplitSeq(out, "\n") {
		if !strings.HasPrefix(line, `{"mcpServers"`) {
			continue
		}
		var c struct {
			MCPServers map[string]struct {
				Command string            `json:"command"`
				Args    []string          `json:"args"`
				Env     map[string]string `json:"env"`
			} `json:"mcpServers"`
		}
		if err := json.Unmarshal([]byte(line), &c); err != nil {
			t.Fatalf("client config line %q: %v", line, err)
		}
		s, ok := c.MCPServers["sandbox"]
		if !ok {
			t.Fatalf("client config line %q: no \"sandbox\" server", line)
		}
		return s.Command, s.Args, s.Env
	}
	t.Fatalf("no client config line in:\n%s", out)
	return
}

func wantLine(t *testing.T, out, status, text string) {
	t.Helper()
	for line := range strings.SplitSeq(out, "\n") {
		if strings.HasPrefix(line, status+" ") && strings.Contains(line, text) {
			return
		}
	}
	t.Errorf("no %q line containing %q in:\n%s", status, text, out)
}

// On this machine (Linux, bubblewrap installed) the local provider works:
// doctor says bash is isolated and as whom, reports the state dir's owner
// and mode and the audit log, exits 0, and prints a config line with the
// absolute binary path and the state dir (which a client, passing HOME
// only, would not find from $XDG_STATE_HOME).
func TestDoctorLocal(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	state := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	out, code := doctor(t, home, map[string]string{"XDG_STATE_HOME": filepath.Dir(state)}, "--thread", "proj")
	if code != 0 {
		t.Fatalf("exit %d, want 0:\n%s", code, out)
	}
	if _, err := exec.LookPath("bwrap"); err == nil && runtime.GOOS == "linux" {
		who := "as nobody (uid 65534"
		if os.Geteuid() != 0 {
			who = "(uid " + strconv.Itoa(os.Geteuid()) + ")"
		}
		wantLine(t, out, "ok", "bubblewrap works")
		if !strings.Contains(out, who) {
			t.Errorf("bash's user %q not named:\n%s", who, out)
		}
		// Root makes cgroups (this machine's CI runs as root).
		if os.Geteuid() == 0 {
			wantLine(t, out, "ok", "thread limits (local provider): pids 1024, memory 4g, cpu ")
		} else if !strings.Contains(out, "thread limits (local provider): pids 1024") {
			wantLine(t, out, "warn", "thread limits that do not hold: ")
		}
	} else {
		wantLine(t, out, "warn", "bubblewrap cannot run here")
	}
	wantLine(t, out, "ok", "state dir "+filepath.Join(filepath.Dir(state), "sandbox-mcp"))
	os.Mkdir(filepath.Join(filepath.Dir(state), "sandbox-mcp"), 0o700)
	out, _ = doctor(t, home, map[string]string{"XDG_STATE_HOME": filepath.Dir(state)}, "--thread", "proj")
	wantLine(t, out, "ok", "mode 0700")
	wantLine(t, out, "info", "audit log: "+filepath.Join(filepath.Dir(state), "sandbox-mcp", "audit.jsonl"))
	cmd, args, env := clientEntry(t, out)
	if !filepath.IsAbs(cmd) {
		t.Errorf("command %q is not absolute", cmd)
	}
	if got := strings.Join(args, " "); got != "--state-dir "+filepath.Join(filepath.Dir(state), "sandbox-mcp")+" --thread proj" {
		t.Errorf("args %q", got)
	}
	if len(env) != 0 {
		t.Errorf("env %v, want none for the local provider", env)
	}
}

// A state dir other users can reach is a warning naming the fix.
func TestDoctorStateDirMode(t *testing.T) {
	t.Parallel()
	if runtime.GOOS == "windows" {
		t.Skip("SKIPPED: no Unix modes on Windows")
	}
	state := t.TempDir()
	if err := os.Chmod(state, 0o755); err != nil {
		t.Fatal(err)
	}
	out, _ := doctor(t, t.TempDir(), nil, "--state-dir", state)
	wantLine(t, out, "warn", "mode 0755")
	if !strings.Contains(out, "chmod 700 "+state) {
		t.Errorf("no chmod hint:\n%s", out)
	}
	_, args, _ := clientEntry(t, out)
	if got := strings.Join(args, " "); got != "--state-dir "+state+" --thread default" {
		t.Errorf("args %q", got)
	}
}

// --isolation bwrap where bubblewrap cannot run: the server would refuse to
// start, so doctor fails.
func TestDoctorBwrapRequiredMissing(t *testing.T) {
	t.Setenv("PATH", t.TempDir()) // no bwrap on it
	out, code := doctor(t, t.TempDir(), nil, "--state-dir", t.TempDir(), "--isolation", "bwrap")
	if code != 1 {
		t.Fatalf("exit %d, want 1:\n%s", code, out)
	}
	wantLine(t, out, "FAIL", "--isolation bwrap")
}

// No cluster: the kubernetes provider cannot work (exit 1, naming where the
// configuration was looked for), while the local provider still can (the
// same finding is a warning). The client config carries KUBECONFIG.
func TestDoctorKubernetesNoCluster(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-such-kubeconfig")
	t.Setenv("KUBECONFIG", missing)
	env := map[string]string{"KUBECONFIG": missing}
	out, code := doctor(t, t.TempDir(), env, "--state-dir", t.TempDir(), "--provider", "kubernetes")
	if code != 1 {
		t.Fatalf("exit %d, want 1:\n%s", code, out)
	}
	wantLine(t, out, "FAIL", "kubernetes: no cluster configuration")
	if !strings.Contains(out, "KUBECONFIG="+missing) {
		t.Errorf("the kubeconfig's source is not named:\n%s", out)
	}
	_, _, cenv := clientEntry(t, out)
	if cenv["KUBECONFIG"] != missing {
		t.Errorf("client env %v, want KUBECONFIG=%s", cenv, missing)
	}

	out, code = doctor(t, t.TempDir(), env, "--state-dir", t.TempDir())
	if code != 0 {
		t.Fatalf("local provider: exit %d, want 0:\n%s", code, out)
	}
	wantLine(t, out, "warn", "kubernetes: no cluster configuration")

	// A cluster that does not answer: refused at once on a closed port.
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	os.WriteFile(kc, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: ctx, context: {cluster: c, user: u}}]
current-context: ctx
`), 0o600)
	t.Setenv("KUBECONFIG", kc)
	out, code = doctor(t, t.TempDir(), map[string]string{"KUBECONFIG": kc}, "--state-dir", t.TempDir(), "--provider", "kubernetes")
	if code != 1 {
		t.Fatalf("unreachable cluster: exit %d, want 1:\n%s", code, out)
	}
	wantLine(t, out, "FAIL", "namespace sandbox-mcp")
}

// With the engine up and the base image built (this machine, CI), the
// docker provider works; a missing image and an engine that does not
// answer fail, the latter with DOCKER_HOST carried into the client config.
func TestDoctorDocker(t *testing.T) {
	if err := exec.Command("docker", "image", "inspect", "sandbox-mcp-base:latest").Run(); err != nil {
		if os.Getenv("SANDBOX_MCP_REQUIRE_DOCKER") == "1" {
			t.Fatalf("docker or sandbox-mcp-base:latest unavailable: %v", err)
		}
		t.Skip("SKIPPED: docker or sandbox-mcp-base:latest unavailable (deploy/docker/build-images.sh)")
	}
	state := t.TempDir()
	out, code := doctor(t, t.TempDir(), nil, "--state-dir", state, "--provider", "docker", "--image", "sandbox-mcp-base:latest")
	if code != 0 {
		t.Fatalf("exit %d, want 0:\n%s", code, out)
	}
	wantLine(t, out, "ok", "docker: engine reachable, image sandbox-mcp-base:latest present, a command ran in a container")
	if !strings.Contains(out, "channel socket") {
		t.Errorf("doctor does not name the channel:\n%s", out)
	}
	if entries, _ := os.ReadDir(state); len(entries) != 0 {
		t.Errorf("doctor wrote into the state dir: %v", entries)
	}

	cfg := filepath.Join(t.TempDir(), "config.yaml")
	// A missing image is pulled by the server on its first call: doctor
	// says so, pulls nothing (no registry is reached here), and fails
	// only when docker.pull forbids the pull.
	os.WriteFile(cfg, []byte("provider: docker\ndocker: {image: sandbox-mcp-doctor-missing:latest}\n"), 0o600)
	out, code = doctor(t, t.TempDir(), nil, "--state-dir", t.TempDir(), "--config", cfg)
	if code != 0 {
		t.Fatalf("missing image: exit %d, want 0:\n%s", code, out)
	}
	wantLine(t, out, "warn", "docker: engine reachable; image sandbox-mcp-doctor-missing:latest is not on it yet: the server pulls it on its first call")
	never := filepath.Join(t.TempDir(), "config.yaml")
	os.WriteFile(never, []byte("provider: docker\ndocker: {image: sandbox-mcp-doctor-missing:latest, pull: never}\n"), 0o600)
	if out, code := doctor(t, t.TempDir(), nil, "--state-dir", t.TempDir(), "--config", never); code != 1 || !strings.Contains(out, "is not on the engine (docker.pull: never)") {
		t.Errorf("missing image, docker.pull never: exit %d, want 1:\n%s", code, out)
	}
	if _, args, _ := clientEntry(t, out); len(args) < 2 || args[0] != "--config" || args[1] != cfg {
		t.Errorf("args %q, want --config %s first", args, cfg)
	}

	host := "unix://" + filepath.Join(t.TempDir(), "no-docker.sock")
	t.Setenv("DOCKER_HOST", host)
	out, code = doctor(t, t.TempDir(), map[string]string{"DOCKER_HOST": host}, "--state-dir", t.TempDir(), "--provider", "docker")
	if code != 1 {
		t.Fatalf("engine down: exit %d, want 1:\n%s", code, out)
	}
	wantLine(t, out, "FAIL", "docker: engine not reachable")
	if _, _, env := clientEntry(t, out); env["DOCKER_HOST"] != host {
		t.Errorf("client env %v, want DOCKER_HOST=%s", env, host)
	}
}

// Doctor names the thread limits that hold, and by what; or those that do
// not, why, and what to do (SPEC §16).
func TestDoctorLimitsFinding(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		r      local.LimitsReport
		status string
		line   string
		detail []string
	}{
		{"all hold", local.LimitsReport{Holding: []string{"pids 1024", "memory 4g", "cpu 2"}, Cgroup: "cgroup v2", Dirs: []string{"/sys/fs/cgroup/sandbox-mcp-x"}},
			"ok", "thread limits (local provider): pids 1024, memory 4g, cpu 2 (cgroup v2)", []string{"under /sys/fs/cgroup\n", "local.limits"}},
		{"none holds", local.LimitsReport{Missing: []string{"pids 1024", "memory 4g", "cpu 2"}, Reason: "cgroup v1: uid 1000 may not make cgroups in /sys/fs/cgroup/pids"},
			"warn", "thread limits that do not hold: pids 1024, memory 4g, cpu 2", []string{"no cgroup can be made here: cgroup v1: uid 1000", "Delegate=yes"}},
		{"cpu not delegated", local.LimitsReport{Holding: []string{"pids 1024", "memory 4g"}, Missing: []string{"cpu 2"}, Cgroup: "cgroup v2", Reason: "no cgroup hierarchy here carries cpu"},
			"warn", "thread limits that do not hold: cpu 2", []string{"pids 1024, memory 4g hold (cgroup v2)", "carries cpu"}},
	} {
		f := limitsFinding(c.r)
		if f.status != c.status || f.what != c.line {
			t.Errorf("%s: %s %q, want %s %q", c.name, f.status, f.what, c.status, c.line)
		}
		for _, d := range c.detail {
			if !strings.Contains(f.detail+"\n", d) {
				t.Errorf("%s: detail %q lacks %q", c.name, f.detail, d)
			}
		}
	}
}

// doctor --client writes the same server entry in each client's own format
// (#25 item 5), each parsed back here as that client would read it.
func TestDoctorClients(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	state := filepath.Join(t.TempDir(), "sta\"te") // a quote to escape in every format
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	base := []string{"--state-dir", state, "--thread", "proj", "--isolation", "none"}
	// The entry for Claude Desktop is the reference.
	out, _ := doctor(t, home, nil, base...)
	wantCmd, wantArgs, _ := clientEntry(t, out)
	if !filepath.IsAbs(wantCmd) {
		t.Fatalf("command %q is not absolute", wantCmd)
	}
	snippet := func(out string) string {
		_, after, ok := strings.Cut(out, "Client config for this machine (")
		if !ok {
			t.Fatalf("no client config in:\n%s", out)
		}
		_, text, _ := strings.Cut(after, "):\n")
		text, _, _ = strings.Cut(text, "\n  note:")
		return strings.TrimSuffix(text, "\n")
	}
	type server struct {
		Type    string   `json:"type"`
		Command string   `json:"command"`
		Args    []string `json:"args"`
	}
	check := func(client string, s server) {
		t.Helper()
		if s.Command != wantCmd || strings.Join(s.Args, "\x00") != strings.Join(wantArgs, "\x00") {
			t.Errorf("--client %s: command %q args %q, want %q %q", client, s.Command, s.Args, wantCmd, wantArgs)
		}
	}
	for _, client := range []string{"claude", "cursor"} {
		out, code := doctor(t, home, nil, append(base, "--client", client)...)
		var c struct{ MCPServers map[string]server }
		if err := json.Unmarshal([]byte(snippet(out)), &c); err != nil || code != 0 {
			t.Fatalf("--client %s: exit %d, %v:\n%s", client, code, err, out)
		}
		check(client, c.MCPServers["sandbox"])
	}
	out, _ = doctor(t, home, nil, append(base, "--client", "vscode")...)
	var vs struct{ Servers map[string]server }
	if err := json.Unmarshal([]byte(snippet(out)), &vs); err != nil {
		t.Fatalf("--client vscode: %v:\n%s", err, out)
	}
	if check("vscode", vs.Servers["sandbox"]); vs.Servers["sandbox"].Type != "stdio" {
		t.Errorf("--client vscode: type %q, want stdio", vs.Servers["sandbox"].Type)
	}
	// Codex reads TOML: parsed by Python's tomllib where there is one.
	out, _ = doctor(t, home, nil, append(base, "--client", "codex")...)
	toml := snippet(out)
	if !strings.HasPrefix(toml, "[mcp_servers.sandbox]\n") {
		t.Fatalf("--client codex:\n%s", toml)
	}
	py, err := exec.LookPath("python3")
	if err != nil || exec.Command(py, "-c", "import tomllib").Run() != nil {
		t.Log("SKIPPED the codex TOML parse: no python3 with tomllib")
	} else {
		cmd := exec.Command(py, "-c", "import sys, tomllib, json; print(json.dumps(tomllib.loads(sys.stdin.read())['mcp_servers']['sandbox']))")
		cmd.Stdin = strings.NewReader(toml)
		js, err := cmd.Output()
		if err != nil {
			t.Fatalf("--client codex: not TOML: %v\n%s", err, toml)
		}
		var s server
		if err := json.Unmarshal(js, &s); err != nil {
			t.Fatal(err)
		}
		check("codex", s)
	}
	// docker: the server image, run as a registry client runs it.
	out, _ = doctor(t, home, nil, append(base, "--client", "docker")...)
	var dk struct{ MCPServers map[string]server }
	if err := json.Unmarshal([]byte(snippet(out)), &dk); err != nil {
		t.Fatalf("--client docker: %v:\n%s", err, out)
	}
	d := dk.MCPServers["sandbox"]
	args := strings.Join(d.Args, " ")
	if filepath.Base(d.Command) != "docker" || !strings.HasPrefix(args, "run -i --rm -v sandbox-mcp-state:/var/lib/sandbox-mcp ") ||
		!strings.Contains(args, "--cap-drop ALL") || !strings.HasSuffix(args, "ghcr.io/sandbox-mcp/sandbox-mcp:VERSION --thread proj") {
		t.Errorf("--client docker: command %q args %q", d.Command, d.Args)
	}
	if !strings.Contains(out, "this build is of no release") {
		t.Errorf("--client docker from a build of no release: no note on the image's tag:\n%s", out)
	}
	if _, code := doctor(t, home, nil, append(base, "--client", "emacs")...); code != 2 {
		t.Errorf("--client emacs: exit %d, want 2", code)
	}
}

// With no cluster configured anywhere, a local server's doctor says nothing
// of kubernetes, and a kubernetes one's says where it looked without
// naming ~/.kube/config as the source of a cluster it did not find (#25
// item 10).
func TestDoctorKubernetesOnlyWhereItMatters(t *testing.T) {
	t.Setenv("KUBECONFIG", "")
	os.Unsetenv("KUBECONFIG")
	home := t.TempDir()
	out, code := doctor(t, home, nil, "--state-dir", t.TempDir(), "--isolation", "none")
	if code != 0 || strings.Contains(out, "kubernetes") {
		t.Errorf("local provider, no cluster anywhere: exit %d, and a kubernetes line:\n%s", code, out)
	}
	out, code = doctor(t, home, nil, "--state-dir", t.TempDir(), "--provider", "kubernetes")
	if code != 1 {
		t.Fatalf("kubernetes provider, no cluster: exit %d, want 1:\n%s", code, out)
	}
	wantLine(t, out, "FAIL", "kubernetes: no cluster configuration")
	if strings.Contains(out, "cluster from ~/.kube/config") {
		t.Errorf("doctor names ~/.kube/config as a cluster's source though there is none:\n%s", out)
	}
}
