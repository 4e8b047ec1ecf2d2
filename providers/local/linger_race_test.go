//go:build unix

package local

import (
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// Red team (#16): the linger watcher decides "no job runs" from a Jobs list taken
// before it takes linger.mu; a job started (and holdForJobs called, which
// sees held still true and does nothing) in between runs with no hold, so
// the last Release closes the sandbox and kills it.
func TestLingerRaceJobStartedWhileWatcherDecides(t *testing.T) {
	old := lingerPoll
	lingerPoll = time.Millisecond
	t.Cleanup(func() { lingerPoll = old })
	p, err := New(Config{AllowHostBash: true, StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	sbi, err := p.Acquire(t.Context(), "t1")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Release("t1")
	sb := sbi.(*Sandbox)
	for i := range 100 {
		a, err := sb.StartJob(t.Context(), sandbox.JobRequest{Command: "sleep 0.02"})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(15+i%10) * time.Millisecond)
		b, err := sb.StartJob(t.Context(), sandbox.JobRequest{Command: "sleep 30"})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(30 * time.Millisecond)
		sb.linger.mu.Lock()
		held := sb.linger.held
		sb.linger.mu.Unlock()
		if !held {
			t.Fatalf("iteration %d: job %s runs (after %s ended) but the sandbox holds no use for it: the last Release would kill it", i, b.ID, a.ID)
		}
		sb.KillJob(t.Context(), b.ID, "KILL")
		for sb.jobsRunning() {
			time.Sleep(time.Millisecond)
		}
		for {
			sb.linger.mu.Lock()
			h := sb.linger.held
			sb.linger.mu.Unlock()
			if !h {
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
}
