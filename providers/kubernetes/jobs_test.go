package kubernetes

import (
	"errors"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox/sandboxtest"
)

func TestJobsContract(t *testing.T) {
	cfg := newConfig(t)
	cfg.Replicas = -1 // its subtests each hold a thread, as many at once as run in parallel
	p := newProviderT(t, cfg)
	sandboxtest.Jobs(t, func(t *testing.T) sandbox.Sandbox {
		return acquire(t, p, "jobs-"+randomHex(4))
	})
}

// A job lives in the Pod, not the server: another provider (a restart, or
// another replica) reads it by its id.
func TestJobSurvivesRestart(t *testing.T) {
	t.Parallel()
	cfg := newConfig(t)
	p := newProviderT(t, cfg)
	thread := "survive-" + randomHex(4)
	j, err := acquire(t, p, thread).StartJob(t.Context(), sandbox.JobRequest{Command: "echo one; sleep 3; echo two"})
	if err != nil {
		t.Fatal(err)
	}
	p2 := newProviderT(t, cfg)
	out, info := sandboxtest.WaitJob(t, acquire(t, p2, thread), j.ID, 0)
	if out != "one\ntwo\n" || info.State != sandbox.JobExited || info.Code != 0 {
		t.Fatalf("from another provider: %q %+v", out, info)
	}
}

// The idle reaper leaves a Pod whose job runs alone, and deletes it once
// the job ended.
func TestJobKeepsIdlePod(t *testing.T) {
	t.Parallel()
	cfg := newConfig(t)
	cfg.IdleTimeout = 2 * time.Second
	p := newProviderT(t, cfg)
	f := &fixture{p: p, cfg: cfg}
	sb := acquire(t, p, "idle-job-"+randomHex(4))
	j, err := sb.StartJob(t.Context(), sandbox.JobRequest{Command: "sleep 10; echo done"})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(8 * time.Second) // idle four times over
	if pods := f.pods(t); len(pods) != 1 || pods[0].Name != sb.PodName() {
		t.Fatalf("the Pod of a running job was deleted: %d Pods", len(pods))
	}
	if out, info := sandboxtest.WaitJob(t, sb, j.ID, 0); out != "done\n" || info.State != sandbox.JobExited {
		t.Fatalf("%q %+v", out, info)
	}
	waitFor(t, 60*time.Second, "the idle Pod deleted once its job ended", func() bool { return len(f.pods(t)) == 0 })
}

// Asked whether its jobs run once its Pod idled out (a session ending),
// a thread's sandbox says it does not run: the Pod is not made again
// only to ask (sandbox.IfRunning). A job running keeps the Pod, and is
// listed so.
func TestJobsIfRunningMakesNoPod(t *testing.T) {
	t.Parallel()
	cfg := newConfig(t)
	cfg.IdleTimeout = 2 * time.Second
	p := newProviderT(t, cfg)
	f := &fixture{p: p, cfg: cfg}
	sb := acquire(t, p, "ifrun-"+randomHex(4))
	if out, _ := execOut(t, sb, "echo up"); out != "up\n" {
		t.Fatalf("%q", out)
	}
	waitFor(t, time.Minute, "the idle Pod deleted", func() bool { return len(f.pods(t)) == 0 })
	if _, err := sb.Jobs(sandbox.IfRunning(t.Context())); !errors.Is(err, sandbox.ErrNotRunning) {
		t.Fatalf("jobs of a Pod that idled out: %v, want ErrNotRunning", err)
	}
	time.Sleep(2 * time.Second)
	if pods := f.pods(t); len(pods) != 0 {
		t.Fatalf("asking for jobs made Pod %s again", pods[0].Name)
	}
	j, err := sb.StartJob(t.Context(), sandbox.JobRequest{Command: "sleep 30"})
	if err != nil {
		t.Fatal(err)
	}
	list, err := sb.Jobs(sandbox.IfRunning(t.Context()))
	if err != nil || len(list) != 1 || list[0].ID != j.ID || list[0].State != sandbox.JobRunning {
		t.Fatalf("jobs of a Pod that runs one: %+v %v", list, err)
	}
	sb.KillJob(t.Context(), j.ID, "KILL")
}
