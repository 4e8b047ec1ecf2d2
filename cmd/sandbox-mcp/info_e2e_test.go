package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// infoFacts calls sandbox_info and answers its text and facts.
func infoFacts(t *testing.T, ctx context.Context, cs *mcp.ClientSession) (string, map[string]any) {
	t.Helper()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "sandbox_info", Arguments: map[string]any{}})
	if err != nil || res.IsError {
		t.Fatalf("sandbox_info: %v %+v", err, res)
	}
	var m map[string]any
	raw, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	return res.Content[0].(*mcp.TextContent).Text, m
}

func num(m map[string]any, keys ...string) (float64, bool) {
	var v any = m
	for _, k := range keys {
		mm, ok := v.(map[string]any)
		if !ok {
			return 0, false
		}
		v = mm[k]
	}
	f, ok := v.(float64)
	return f, ok
}

// checkInfoUse allocates 200 MiB in a job of the sandbox (python3 fills
// them) and sees sandbox_info's memory rise by at least 190 MiB — what the
// box really uses, not a share of it — its processes counted, the job
// counted; then the job killed.
func checkInfoUse(t *testing.T, ctx context.Context, cs *mcp.ClientSession, call func(string, map[string]any) (string, bool), provider string) {
	t.Helper()
	text, before := infoFacts(t, ctx, cs)
	t.Logf("before:\n%s", text)
	if !strings.HasPrefix(text, "provider: "+provider) {
		t.Fatalf("not the %s provider:\n%s", provider, text)
	}
	mem0, ok := num(before, "memory", "used_bytes")
	if !ok {
		t.Fatalf("memory not known:\n%s", text)
	}
	pids0, ok := num(before, "processes", "now")
	if !ok {
		t.Fatalf("processes not known:\n%s", text)
	}
	if _, ok := num(before, "cpu", "user_seconds"); !ok {
		t.Fatalf("cpu not known:\n%s", text)
	}
	if out, isErr := call("bash", map[string]any{"command": `python3 -c 'b=bytearray(200<<20); import time; time.sleep(60)' & sleep 60`, "run_in_background": true}); isErr {
		t.Fatalf("job: %s", out)
	}
	var after map[string]any
	deadline := time.Now().Add(20 * time.Second)
	for {
		text, after = infoFacts(t, ctx, cs)
		mem, _ := num(after, "memory", "used_bytes")
		if mem-mem0 >= 190<<20 || time.Now().After(deadline) {
			break
		}
		time.Sleep(300 * time.Millisecond)
	}
	t.Logf("after:\n%s", text)
	mem, _ := num(after, "memory", "used_bytes")
	if mem-mem0 < 190<<20 {
		t.Errorf("memory rose by %.0f bytes holding 200 MiB, want at least 190 MiB", mem-mem0)
	}
	if pids, _ := num(after, "processes", "now"); pids < pids0+2 {
		t.Errorf("processes %v, then %v with a job of two more", pids0, pids)
	}
	if jobs, _ := num(after, "jobs", "now"); jobs != 1 {
		t.Errorf("jobs running: %v", jobs)
	}
	if peak, ok := num(after, "memory", "peak_bytes"); ok && peak < mem {
		t.Errorf("peak %v below use %v", peak, mem)
	}
	call("bash_kill", map[string]any{"job": "j1", "signal": "KILL"})
}

// The real binary, local provider in bubblewrap with its cgroups.
func TestE2EInfoLocal(t *testing.T) {
	if _, err := exec.LookPath("bwrap"); err != nil || os.Geteuid() != 0 {
		t.Skip("SKIPPED: needs bubblewrap and root (cgroups)")
	}
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("SKIPPED: no python3")
	}
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "config.yaml")
	os.WriteFile(cfgFile, []byte("provider: local\nlocal:\n  isolation: bwrap\n  limits: {memory: 1g, pids: 512}\n"), 0o644)
	cmd := exec.Command(binary(t), "--config", cfgFile, "--state-dir", filepath.Join(dir, "state"), "--audit-log", "off", "--thread", "info")
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cs, stderr := stdioSession(t, ctx, cmd)
	defer cs.Close()
	call := caller(t, ctx, cs, stderr)
	text, m := infoFacts(t, ctx, cs)
	if lim, _ := num(m, "memory", "limit_bytes"); lim != 1<<30 && os.Getenv("SANDBOX_MCP_REQUIRE_CGROUPS") == "1" {
		t.Fatalf("memory limit %v, want 1g:\n%s", lim, text)
	}
	if lim, _ := num(m, "processes", "limit"); lim != 512 && os.Getenv("SANDBOX_MCP_REQUIRE_CGROUPS") == "1" {
		t.Fatalf("processes limit %v, want 512:\n%s", lim, text)
	}
	checkInfoUse(t, ctx, cs, call, "local")
}

// The real binary, docker provider.
func TestE2EInfoDocker(t *testing.T) {
	dir, cfgFile, _ := dockerE2EConfig(t)
	cmd := exec.Command(binary(t), "--config", cfgFile, "--state-dir", filepath.Join(dir, "state"), "--audit-log", "off", "--thread", "info")
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cs, stderr := stdioSession(t, ctx, cmd)
	defer cs.Close()
	call := caller(t, ctx, cs, stderr)
	text, m := infoFacts(t, ctx, cs)
	if lim, _ := num(m, "memory", "limit_bytes"); lim != 256<<20 {
		t.Errorf("memory limit %v, want 256m:\n%s", lim, text)
	}
	if left, ok := num(m, "idle", "left_seconds"); !ok || left <= 0 || !strings.Contains(text, "idle stop: in ") {
		t.Errorf("no idle stop:\n%s", text)
	}
	checkInfoUse(t, ctx, cs, call, "docker")
}

// checkOOM runs a command that allocates past the memory limit (64m):
// its result says the OOM killer took it, not just exit 137.
func checkOOM(t *testing.T, call func(string, map[string]any) (string, bool)) {
	t.Helper()
	out, _ := call("bash", map[string]any{"command": `python3 -c 'b=bytearray(200<<20); print(len(b))'`})
	t.Logf("bash over the memory limit: %q", out)
	if !strings.HasSuffix(out, "[killed: out of memory (limit 64m)]") {
		t.Errorf("bash over the memory limit: %q", out)
	}
	// Another command is no OOM kill.
	if out, _ := call("bash", map[string]any{"command": "exit 3"}); out != "[exit code 3]" {
		t.Errorf("after: %q", out)
	}
	if out, _ := call("sandbox_info", map[string]any{}); !strings.Contains(out, "killed for want of memory") {
		t.Errorf("sandbox_info does not count the OOM kill:\n%s", out)
	}
}

func TestE2EOOMLocal(t *testing.T) {
	if _, err := exec.LookPath("bwrap"); err != nil || os.Geteuid() != 0 {
		t.Skip("SKIPPED: needs bubblewrap and root (cgroups)")
	}
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("SKIPPED: no python3")
	}
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "config.yaml")
	os.WriteFile(cfgFile, []byte("provider: local\nlocal:\n  isolation: bwrap\n  limits: {memory: 64m}\n"), 0o644)
	cmd := exec.Command(binary(t), "--config", cfgFile, "--state-dir", filepath.Join(dir, "state"), "--audit-log", "off", "--thread", "oom")
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cs, stderr := stdioSession(t, ctx, cmd)
	defer cs.Close()
	checkOOM(t, caller(t, ctx, cs, stderr))
}

func TestE2EOOMDocker(t *testing.T) {
	dir, cfgFile, prefix := dockerE2EConfig(t)
	os.WriteFile(cfgFile, []byte("provider: docker\ndocker:\n  container_prefix: "+prefix+"\n  memory: 64m\n  remove_on_exit: true\n  image: sandbox-mcp-base:latest\n"), 0o644)
	cmd := exec.Command(binary(t), "--config", cfgFile, "--state-dir", filepath.Join(dir, "state"), "--audit-log", "off", "--thread", "oom")
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cs, stderr := stdioSession(t, ctx, cmd)
	defer cs.Close()
	checkOOM(t, caller(t, ctx, cs, stderr))
}

// k8sPythonConfig is k8sE2EConfig with the sandbox image of
// SANDBOX_MCP_K8S_IMAGE, which has python3 (sandbox-mcp-base); without it
// the test skips, or fails with SANDBOX_MCP_REQUIRE_K8S=1, as without a
// cluster (busybox has no python3). memory is the sandbox's limit.
func k8sPythonConfig(t *testing.T, memory string) (cfgFile, dir string) {
	t.Helper()
	img := os.Getenv("SANDBOX_MCP_K8S_IMAGE")
	cfgFile, dir = k8sE2EConfig(t, img)
	if img == "" {
		if os.Getenv("SANDBOX_MCP_REQUIRE_K8S") == "1" {
			t.Fatal("SANDBOX_MCP_K8S_IMAGE is not set: the busybox image has no python3")
		}
		t.Skip("SKIPPED: the busybox image has no python3 (SANDBOX_MCP_K8S_IMAGE)")
	}
	b, err := os.ReadFile(cfgFile)
	if err != nil {
		t.Fatal(err)
	}
	cfg := strings.Replace(string(b), "memory: 256Mi,", "memory: "+memory+",", 1)
	if cfg == string(b) && memory != "256Mi" {
		t.Fatalf("no memory limit to set in:\n%s", b)
	}
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return cfgFile, dir
}

// The real binary, kubernetes provider (a cluster at KUBECONFIG).
func TestE2EInfoKubernetes(t *testing.T) {
	cfgFile, dir := k8sPythonConfig(t, "256Mi")
	cmd := exec.Command(binary(t), "--config", cfgFile, "--state-dir", filepath.Join(dir, "state"), "--audit-log", "off", "--thread", "info")
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	cs, stderr := stdioSession(t, ctx, cmd)
	defer cs.Close()
	call := caller(t, ctx, cs, stderr)
	text, m := infoFacts(t, ctx, cs)
	if lim, _ := num(m, "memory", "limit_bytes"); lim != 256<<20 {
		t.Errorf("memory limit %v, want 256Mi:\n%s", lim, text)
	}
	checkInfoUse(t, ctx, cs, call, "kubernetes")
}

// The real binary, kubernetes provider: a command over the sandbox
// container's limit is OOM-killed in the Pod, which lives on, and bash
// says so.
func TestE2EOOMKubernetes(t *testing.T) {
	cfgFile, dir := k8sPythonConfig(t, "64Mi")
	cmd := exec.Command(binary(t), "--config", cfgFile, "--state-dir", filepath.Join(dir, "state"), "--audit-log", "off", "--thread", "oom")
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	cs, stderr := stdioSession(t, ctx, cmd)
	defer cs.Close()
	checkOOM(t, caller(t, ctx, cs, stderr))
}
