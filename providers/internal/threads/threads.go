// Package threads is the providers' one table of acquired sandboxes: one
// per thread, counted by its users, closed with the last.
package threads

import (
	"sync"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// Table holds the sandboxes a provider has handed out. Its zero value is
// ready.
type Table[S any] struct {
	mu sync.Mutex
	m  map[string]*entry[S]
}

type entry[S any] struct {
	sb    S
	refs  int
	close func()
	ended chan struct{} // closed once close has run
}

// end closes the entry's sandbox.
func (e *entry[S]) end() {
	if e.close != nil {
		e.close()
	}
	close(e.ended)
}

// Acquire returns thread's sandbox, counting one more user: the one held,
// or, for the first user, one that open makes (under the table's lock, so
// concurrent first users make one). close ends it after the last Release
// or at Close. The thread key is checked first.
func (t *Table[S]) Acquire(thread string, open func() (sb S, close func(), err error)) (S, error) {
	var zero S
	if err := sandbox.ValidThreadKey(thread); err != nil {
		return zero, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if e := t.m[thread]; e != nil {
		e.refs++
		return e.sb, nil
	}
	sb, close, err := open()
	if err != nil {
		return zero, err
	}
	if t.m == nil {
		t.m = map[string]*entry[S]{}
	}
	t.m[thread] = &entry[S]{sb: sb, refs: 1, close: close, ended: make(chan struct{})}
	return sb, nil
}

// Held returns thread's sandbox if one is held, counting one more user
// (give it back with Release), and a channel closed once that sandbox has
// ended: what a provider's Discard waits for.
func (t *Table[S]) Held(thread string) (sb S, ended <-chan struct{}, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.m[thread]
	if e == nil {
		return sb, nil, false
	}
	e.refs++
	return e.sb, e.ended, true
}

// Retain counts one more user of thread's sandbox if one is held, and
// reports whether it was (a user that holds it may lend a use this way,
// with no sandbox to make).
func (t *Table[S]) Retain(thread string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e := t.m[thread]; e != nil {
		e.refs++
		return true
	}
	return false
}

// All lists the sandboxes held now.
func (t *Table[S]) All() []S {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]S, 0, len(t.m))
	for _, e := range t.m {
		out = append(out, e.sb)
	}
	return out
}

// Release drops one user of thread's sandbox; the last one closes it.
func (t *Table[S]) Release(thread string) {
	t.mu.Lock()
	e := t.m[thread]
	if e == nil {
		t.mu.Unlock()
		return
	}
	e.refs--
	if e.refs > 0 {
		t.mu.Unlock()
		return
	}
	delete(t.m, thread)
	t.mu.Unlock()
	e.end()
}

// Close closes every sandbox, whatever its users.
func (t *Table[S]) Close() {
	t.mu.Lock()
	m := t.m
	t.m = nil
	t.mu.Unlock()
	for _, e := range m {
		e.end()
	}
}
