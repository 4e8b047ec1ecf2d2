//go:build unix

package local

import (
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// A running job keeps the thread's sandbox after its last user released
// it: a new user (a reconnecting client) finds the job; once no job runs,
// the sandbox closes as before.
func TestJobKeepsSandboxAfterRelease(t *testing.T) {
	for _, cfg := range []Config{{AllowHostBash: true}, {Isolation: IsolationBwrap}} {
		name := "host bash"
		if cfg.Isolation == IsolationBwrap {
			name = "bwrap"
		}
		t.Run(name, func(t *testing.T) {
			if cfg.Isolation == IsolationBwrap {
				requireBwrap(t)
			}
			old := lingerPoll
			lingerPoll = 100 * time.Millisecond
			t.Cleanup(func() { lingerPoll = old })
			cfg.StateDir = t.TempDir()
			p, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { p.Close() })
			acquire := func() sandbox.Jobs {
				sb, err := p.Acquire(t.Context(), "t1")
				if err != nil {
					t.Fatal(err)
				}
				return sb.(sandbox.Jobs)
			}
			jobs := acquire()
			j, err := jobs.StartJob(t.Context(), sandbox.JobRequest{Command: "sleep 30"})
			if err != nil {
				t.Fatal(err)
			}
			p.Release("t1")
			time.Sleep(5 * lingerPoll)
			jobs = acquire()
			o, err := jobs.JobOutput(t.Context(), j.ID, 0, 0)
			if err != nil || o.Job.State != sandbox.JobRunning {
				t.Fatalf("after the last release, the job: %+v, %v", o.Job, err)
			}
			if _, err := jobs.KillJob(t.Context(), j.ID, "KILL"); err != nil {
				t.Fatal(err)
			}
			p.Release("t1")
			time.Sleep(5 * lingerPoll)
			// No job ran: the sandbox closed, and a new one knows no job.
			jobs = acquire()
			defer p.Release("t1")
			if _, err := jobs.JobOutput(t.Context(), j.ID, 0, 0); err == nil {
				t.Errorf("the sandbox outlived its last job: %s still known", j.ID)
			}
		})
	}
}
