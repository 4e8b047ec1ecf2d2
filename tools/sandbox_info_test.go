package tools_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/tools"
)

// sandbox_info on the local provider: one line each, the disk of
// user-data counted, the jobs and their limit, the network policy and the
// exposed ports; the local provider stops no idle sandbox.
func TestSandboxInfoLocal(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.ok("write_file", map[string]any{"path": "/mnt/user-data/workspace/a.txt", "content": strings.Repeat("x", 3000)})
	f.ok("bash", map[string]any{"command": "sleep 30", "run_in_background": true})
	env := *f.env
	env.Network = tools.Network{Mode: "allowlist", Allow: []string{"pypi.org", "*.pythonhosted.org"}}
	env.Previews = &fakePreviews{open: map[int]string{3000: "http://127.0.0.1:8080/preview/cap3000/"}, max: 2}
	res := f.callEnv(&env, "sandbox_info", map[string]any{})
	got := resultText(t, res)
	for _, want := range []string{
		"provider: local\n",
		"jobs: 1 running, at most 16\n",
		"network: allowlist (pypi.org, *.pythonhosted.org)\n",
		"exposed ports: 3000 http://127.0.0.1:8080/preview/cap3000/\n",
		"idle stop: none (local stops no idle sandbox)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("no %q in:\n%s", want, got)
		}
	}
	m := facts(t, res)
	disk, _ := m["disk"].(map[string]any)
	if disk == nil || disk["bytes"].(float64) < 3000 {
		t.Errorf("disk: %v\n%s", m["disk"], got)
	}
	for _, k := range []string{"memory", "processes", "cpu"} {
		if _, ok := m[k]; !ok && !strings.Contains(got, "not known") {
			t.Errorf("%s neither given nor said not known:\n%s", k, got)
		}
	}
	f.ok("bash_kill", map[string]any{"job": "j1", "signal": "KILL"})
}

// usageSandbox reports a fixed usage.
type usageSandbox struct {
	sandbox.Sandbox
	u sandbox.Usage
}

func (s usageSandbox) Usage(context.Context) (sandbox.Usage, error) { return s.u, nil }

// What a provider does not know is said so, never made up; what it knows
// reads in units.
func TestSandboxInfoLines(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	i64 := func(n int64) *int64 { return &n }
	f64 := func(n float64) *float64 { return &n }
	jobs := 2
	left := 9*time.Minute + 30*time.Second
	for _, tc := range []struct {
		u    sandbox.Usage
		want []string
	}{
		{sandbox.Usage{Provider: "local"}, []string{"memory: not known (no cgroup)\n", "processes: not known (no cgroup)\n", "cpu: not known (no cgroup)\n", "disk (/mnt/user-data): not known\n", "jobs: not known\n", "network: none\n"}},
		{sandbox.Usage{Provider: "docker", Image: "python:3.12", Box: "smcp-x", Cgroup: "v2",
			MemoryBytes: i64(212 << 20), MemoryPeakBytes: i64(300 << 20), MemoryMaxBytes: i64(4 << 30), OOMKills: i64(1),
			Pids: i64(5), PidsMax: i64(1024), CPUUserSec: f64(1), CPUSystemSec: f64(0.25), CPULimit: f64(2),
			JobsRunning: &jobs, DiskBytes: i64(1 << 30), DiskFiles: 100000, DiskCut: true, IdleLeft: &left, IdleTimeout: 10 * time.Minute},
			[]string{"provider: docker (image python:3.12, box smcp-x)\n", "memory: 212 MiB in use, peak 300 MiB, limit 4 GiB; 1 killed for want of memory\n",
				"processes: 5, limit 1024\n", "cpu: 1.25 s used (user 1.00 s, system 0.25 s), limit 2 CPUs\n",
				"disk (/mnt/user-data): ≥ 1 GiB in ≥ 100000 files", "jobs: 2 running, at most 16\n", "idle stop: in 9m30s without use (idle_timeout 10m0s"}},
		{sandbox.Usage{Provider: "local", Cgroup: "v1", MemoryBytes: i64(1000), MemoryMaxBytes: i64(0), Pids: i64(3), PidsMax: nil},
			[]string{"memory: 1000 B in use, no limit\n", "processes: 3, limit not known\n"}},
	} {
		env := *f.env
		env.Sandbox = usageSandbox{f.sb, tc.u}
		got := resultText(t, f.callEnv(&env, "sandbox_info", map[string]any{}))
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("no %q in:\n%s", w, got)
			}
		}
	}
}

// oomSandbox's commands end as the OOM killer ends them.
type oomSandbox struct {
	sandbox.Sandbox
	res sandbox.ExecResult
}

func (s oomSandbox) Exec(context.Context, sandbox.ExecRequest) (sandbox.ExecResult, error) {
	return s.res, nil
}

// A command the OOM killer took says so, with the limit; one that lived
// on while another process was taken says that.
func TestBashOOM(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for _, tc := range []struct {
		res  sandbox.ExecResult
		want string
	}{
		{sandbox.ExecResult{ExitCode: 137, OOMKills: 1, MemoryMax: 4 << 30}, "[killed: out of memory (limit 4g)]"},
		{sandbox.ExecResult{ExitCode: 137, OOMKills: 1, MemoryMax: 64 << 20}, "[killed: out of memory (limit 64m)]"},
		{sandbox.ExecResult{ExitCode: 137, OOMKills: 1}, "[killed: out of memory]"},
		{sandbox.ExecResult{ExitCode: 1, OOMKills: 1, MemoryMax: 64 << 20}, "[exit code 1; a process was killed: out of memory (limit 64m)]"},
		{sandbox.ExecResult{ExitCode: 137}, "[exit code 137]"},
	} {
		env := *f.env
		env.Sandbox = oomSandbox{f.sb, tc.res}
		res := f.callEnv(&env, "bash", map[string]any{"command": "x"})
		if got := resultText(t, res); !strings.HasSuffix(got, tc.want) {
			t.Errorf("%+v: %q, want %q", tc.res, got, tc.want)
		}
		if m := facts(t, res); (m["oom_killed"] == true) != (tc.res.OOMKills > 0) {
			t.Errorf("%+v: facts %v", tc.res, m)
		}
	}
}
