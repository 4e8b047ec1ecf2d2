package kubernetes

import (
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
