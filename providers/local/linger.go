package local

import (
	"context"
	"sync"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// lingerPoll is how often a sandbox held for its jobs asks whether any
// still runs.
var lingerPoll = 2 * time.Second

// linger keeps a thread's sandbox — its supervisor, and the jobs it runs —
// while a job runs, whether or not a session uses the thread: the thread's
// last Release would otherwise end the supervisor and every job with it,
// so an HTTP client that reconnects (a new session) would find its dev
// server gone. A sandbox with a job holds one use of the thread (the
// provider's table) until no job runs, or the server closes.
type linger struct {
	mu   sync.Mutex
	held bool
	gen  uint64 // counts holdForJobs: a job may have started since the watcher asked
}

// holdForJobs takes the thread's extra use, once, after a command may have
// become a job; a watcher gives it back when no job runs.
func (s *Sandbox) holdForJobs() {
	s.linger.mu.Lock()
	defer s.linger.mu.Unlock()
	s.linger.gen++
	if s.linger.held {
		return
	}
	// The caller holds a use of the thread: the table holds this sandbox
	// (not one closed by the server's Close meanwhile).
	if !s.p.threads.Retain(s.thread) {
		return
	}
	s.linger.held = true
	go s.watchJobs()
}

// watchJobs gives the extra use back once no job of the sandbox runs (or
// its supervisor is gone).
func (s *Sandbox) watchJobs() {
	for {
		time.Sleep(lingerPoll)
		s.linger.mu.Lock()
		gen := s.linger.gen
		s.linger.mu.Unlock()
		if s.jobsRunning() {
			continue
		}
		s.linger.mu.Lock()
		if s.linger.gen != gen { // a job started while the supervisor was asked
			s.linger.mu.Unlock()
			continue
		}
		s.linger.held = false
		s.linger.mu.Unlock()
		s.p.threads.Release(s.thread)
		return
	}
}

// jobsRunning asks the thread's supervisor, if it runs, whether a job does.
func (s *Sandbox) jobsRunning() bool {
	if !s.Link().Connected() {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	list, err := s.Jobs(ctx)
	if err != nil {
		return false
	}
	for _, j := range list {
		if j.State == sandbox.JobRunning {
			return true
		}
	}
	return false
}
