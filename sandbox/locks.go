package sandbox

import (
	"context"
	"sync"
)

// Locks is a table of per-key mutexes whose entries live only while someone
// holds or waits for them, so the table does not grow with the number of
// files ever edited.
type Locks struct {
	mu      sync.Mutex
	entries map[string]*lockEntry
}

type lockEntry struct {
	ch   chan struct{} // holds one token while the lock is held
	refs int
}

// NewLocks returns an empty table.
func NewLocks() *Locks { return &Locks{entries: map[string]*lockEntry{}} }

// Lock takes the key's lock, waiting at most until ctx ends, and returns
// the function that releases it.
func (l *Locks) Lock(ctx context.Context, key string) (unlock func(), err error) {
	l.mu.Lock()
	e := l.entries[key]
	if e == nil {
		e = &lockEntry{ch: make(chan struct{}, 1)}
		l.entries[key] = e
	}
	e.refs++
	l.mu.Unlock()

	select {
	case e.ch <- struct{}{}:
	case <-ctx.Done():
		l.drop(key, e)
		return nil, ctx.Err()
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			<-e.ch
			l.drop(key, e)
		})
	}, nil
}

func (l *Locks) drop(key string, e *lockEntry) {
	l.mu.Lock()
	e.refs--
	if e.refs == 0 {
		delete(l.entries, key)
	}
	l.mu.Unlock()
}

// Len is the number of live entries.
func (l *Locks) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.entries)
}
