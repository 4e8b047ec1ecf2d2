package server

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
)

// leases hold the sandboxes of stateless (2026-07-28) requests: a thread's
// lease is a registry session of its own, taken by each request naming the
// thread and ended once no request has used it for the idle time. A request
// then finds the sandbox (and its supervisor link) open, as a session's
// calls do, without any state that another replica would need.
type leases struct {
	mu  sync.Mutex
	m   map[string]*lease // by thread key
	seq int64
}

type lease struct {
	key      string // the registry session
	tenant   string // whose thread it is (ThreadRef.Tenant)
	inflight int
	last     time.Time
}

// take returns the registry session of the thread's lease; done gives it back.
func (l *leases) take(threadKey, tenant string) (session string, done func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = map[string]*lease{}
	}
	ls := l.m[threadKey]
	if ls == nil {
		// A new generation for every lease: a request never gets a binding
		// the sweeper is ending.
		l.seq++
		ls = &lease{key: fmt.Sprintf("\x00lease-%d/%s", l.seq, threadKey), tenant: tenant}
		l.m[threadKey] = ls
	}
	ls.inflight++
	return ls.key, func() {
		l.mu.Lock()
		ls.inflight--
		ls.last = time.Now()
		l.mu.Unlock()
	}
}

// sweep ends, every tick, the leases idle for ttl, until ctx ends.
func (l *leases) sweep(ctx context.Context, ttl time.Duration, end func(session string)) {
	t := time.NewTicker(max(ttl/4, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var idle []string
		l.mu.Lock()
		for k, ls := range l.m {
			if ls.inflight == 0 && time.Since(ls.last) >= ttl {
				delete(l.m, k)
				idle = append(idle, ls.key)
			}
		}
		l.mu.Unlock()
		for _, s := range idle {
			end(s)
		}
	}
}

// idle lists the registry sessions of the tenant's leases that no request
// uses, least recently used first.
func (l *leases) idle(tenant string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var idle []*lease
	for _, ls := range l.m {
		if ls.tenant == tenant && ls.inflight == 0 {
			idle = append(idle, ls)
		}
	}
	slices.SortFunc(idle, func(a, b *lease) int { return a.last.Compare(b.last) })
	keys := make([]string, len(idle))
	for i, ls := range idle {
		keys[i] = ls.key
	}
	return keys
}

// drop forgets the lease whose registry session is key if no request uses
// it, and reports whether it did: the caller then ends the session.
func (l *leases) drop(key string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, ls := range l.m {
		if ls.key == key {
			if ls.inflight > 0 {
				return false
			}
			delete(l.m, k)
			return true
		}
	}
	return false
}
