package filelock

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// Locks is a table of per-key mutexes whose entries live only while someone
// holds or waits for them, so the table does not grow with the number of
// files ever edited. With a directory (NewFileLocks), a key's lock also
// holds an flock on one of a fixed set of lock files there, so that several
// processes sharing a state dir never lose an update either.
type Locks struct {
	mu      sync.Mutex
	entries map[string]*lockEntry
	dir     string // "" for in-process locks only
}

// lockBuckets is how many lock files keys are spread over: a fixed number,
// so the directory does not grow; two keys sharing a file only wait for
// each other.
const lockBuckets = 64

type lockEntry struct {
	ch   chan struct{} // holds one token while the lock is held
	refs int
}

// NewLocks returns an empty table of in-process locks.
func NewLocks() *Locks { return &Locks{entries: map[string]*lockEntry{}} }

// NewFileLocks returns an empty table whose locks also hold across
// processes, through flock on files in dir.
func NewFileLocks(dir string) (*Locks, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	return &Locks{entries: map[string]*lockEntry{}, dir: dir}, nil
}

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
	release := func() {
		<-e.ch
		l.drop(key, e)
	}
	if l.dir != "" {
		f, err := l.flock(ctx, key)
		if err != nil {
			release()
			return nil, err
		}
		inProcess := release
		release = func() {
			f.Close() // drops the flock
			inProcess()
		}
	}
	var once sync.Once
	return func() { once.Do(release) }, nil
}

// flock takes the exclusive flock of key's bucket file, polling so that
// ctx can end the wait. Each call opens the file anew: flocks of separate
// opens exclude each other, also within one process.
func (l *Locks) flock(ctx context.Context, key string) (*os.File, error) {
	h := fnv.New32a()
	h.Write([]byte(key))
	name := filepath.Join(l.dir, fmt.Sprintf("edit-%02d.lock", h.Sum32()%lockBuckets))
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock file: %w", err)
	}
	for wait := time.Millisecond; ; wait = min(2*wait, 20*time.Millisecond) {
		err := TryLock(f)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, ErrLocked) {
			f.Close()
			return nil, fmt.Errorf("lock file: %w", err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(wait):
		}
	}
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
