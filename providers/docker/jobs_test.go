package docker

import (
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox/sandboxtest"
)

func TestJobsContract(t *testing.T) {
	jobsContract(t, newFixture(t, noCap))
}

func TestJobsContractExecChannel(t *testing.T) {
	jobsContract(t, newFixture(t, noCap, func(c *Config) { c.Channel = channelExec }))
}

func jobsContract(t *testing.T, f *fixture) {
	var n atomic.Int32
	sandboxtest.Jobs(t, func(t *testing.T) sandbox.Sandbox {
		return f.acquire(t, "jobs-"+strconv.Itoa(int(n.Add(1))))
	})
}

func jobsOf(t *testing.T, sb sandbox.Sandbox) sandbox.Jobs {
	t.Helper()
	js, ok := sb.(sandbox.Jobs)
	if !ok {
		t.Fatalf("%T does not implement sandbox.Jobs", sb)
	}
	return js
}

// A job lives in the container, not the server: a new provider on the
// same state dir (a restart of the server, its containers kept) reads it
// by its id.
func TestJobSurvivesRestart(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	js := jobsOf(t, f.acquire(t, "survive"))
	j, err := js.StartJob(t.Context(), sandbox.JobRequest{Command: "echo one; sleep 3; echo two"})
	if err != nil {
		t.Fatal(err)
	}
	f.p.Close()
	p2, err := New(t.Context(), f.cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Close()
	sb2, err := p2.Acquire(t.Context(), "survive")
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Release("survive")
	out, info := sandboxtest.WaitJob(t, jobsOf(t, sb2), j.ID, 0)
	if out != "one\ntwo\n" || info.State != sandbox.JobExited || info.Code != 0 {
		t.Fatalf("after the restart: %q %+v", out, info)
	}
}

// The idle reaper leaves a container whose job runs alone, and removes it
// once the job ended.
func TestJobKeepsIdleContainer(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(c *Config) { c.IdleTimeout = time.Second })
	sb := f.acquire(t, "idle-job")
	js := jobsOf(t, sb)
	j, err := js.StartJob(t.Context(), sandbox.JobRequest{Command: "sleep 5; echo done"})
	if err != nil {
		t.Fatal(err)
	}
	id := f.ours(t, false)[0].ID
	time.Sleep(4 * time.Second) // idle four times over, the reaper ticking every 250 ms
	if got := f.ours(t, false); len(got) != 1 || got[0].ID != id {
		t.Fatalf("the container of a running job was reaped: %d running", len(got))
	}
	if out, info := sandboxtest.WaitJob(t, js, j.ID, 0); out != "done\n" || info.State != sandbox.JobExited {
		t.Fatalf("%q %+v", out, info)
	}
	deadline := time.Now().Add(30 * time.Second)
	for len(f.ours(t, true)) > 0 {
		if time.Now().After(deadline) {
			t.Fatal("the container is still there a while after its job ended")
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Asked whether its jobs run once its container idled out (a session
// ending), a thread's sandbox says it does not run: the container is not
// made again only to ask (sandbox.IfRunning).
func TestJobsIfRunningMakesNoContainer(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(c *Config) { c.IdleTimeout = time.Second })
	sb := f.acquire(t, "ifrun")
	if out, _ := execOut(t, sb, "echo up"); out != "up\n" {
		t.Fatalf("%q", out)
	}
	deadline := time.Now().Add(30 * time.Second)
	for len(f.ours(t, true)) > 0 {
		if time.Now().After(deadline) {
			t.Fatal("the idle container was not reaped")
		}
		time.Sleep(200 * time.Millisecond)
	}
	if _, err := jobsOf(t, sb).Jobs(sandbox.IfRunning(t.Context())); !errors.Is(err, sandbox.ErrNotRunning) {
		t.Fatalf("jobs of a container that idled out: %v, want ErrNotRunning", err)
	}
	if got := f.ours(t, true); len(got) != 0 {
		t.Fatalf("asking for jobs made the container again: %d", len(got))
	}
}
