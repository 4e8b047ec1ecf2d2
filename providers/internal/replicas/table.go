package replicas

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// Table is what one server process knows of the boxes (containers, Pods)
// it runs or uses, by name: each one's id, its thread, its last use and
// the calls in flight here; and the places it holds for boxes being made,
// admitted under the cap. The provider gives its engine's acts: how a box
// is found or made (Ensure's start), which boxes the cap counts and how
// one is taken (Room), and — where other server replicas share the boxes
// — how this process's use is told to them (TableConfig.Publish).
type Table struct {
	cfg       TableConfig
	admitting chan struct{} // one admission at a time

	mu    sync.Mutex
	boxes map[string]*entry
}

// TableConfig is what a provider says of its table.
type TableConfig struct {
	Setting string // the cap's setting, named in its error (docker.replicas)
	Limit   int    // the cap: the most boxes running at once; < 0: none
	What    string // the box in an error ("docker provider: container")
	// Lock takes box name's creation lock: concurrent first uses of a
	// thread make one box.
	Lock func(ctx context.Context, name string) (unlock func(), err error)
	// Publish, if set, tells the other replicas this process's use of box
	// name (its last use, and whether a call is in flight here): at once
	// when a use begins, at most once a Heartbeat otherwise.
	Publish   func(name string, inUse bool, lastUsed time.Time) error
	Heartbeat time.Duration
	// Started, if set, is told of each box Ensure's start made or started
	// (it was admitted), with Ensure's context (its call's) and when start
	// set out: it runs now.
	Started func(ctx context.Context, began time.Time)
}

// entry is one box as this process knows it.
type entry struct {
	id, thread string // id "": a place held for a box being made (admit)
	lastUsed   time.Time
	busy       int // calls in flight here

	// Publish's state.
	published  time.Time // when it last succeeded
	publishing bool      // one in flight
	again      bool      // publish again after it: whether this process uses the box changed
	said       bool      // the last one said a call is in flight here
}

// NewTable returns an empty table.
func NewTable(cfg TableConfig) *Table {
	return &Table{cfg: cfg, admitting: make(chan struct{}, 1), boxes: map[string]*entry{}}
}

// Room is how a box is made room for under the cap (MakeRoom): List
// lists the running boxes the cap counts (nil: the table's own, places
// held included), each InUse as the provider sees it; Take tries to take
// one, and reports whether it went.
type Room struct {
	List func(ctx context.Context) ([]Box, error)
	Take func(b Box) bool
}

// Ensure returns the id of thread's running box name, marked in use until
// done is called: the one known here, or else — under the box's creation
// lock — the one start finds or makes (not under sandbox.IfRunning: a box
// not known running here is then sandbox.ErrNotRunning). start calls admit before it makes
// or starts a box (not for one found running): admit makes room under the
// cap (room), once, and holds the new box's place until it runs. A
// *FullError says that nothing may go.
func (t *Table) Ensure(ctx context.Context, name, thread string, start func(admit func() error) (id string, err error), room Room) (string, func(), error) {
	if id, done := t.Use(name, thread); id != "" {
		return id, done, nil
	}
	unlock, err := t.cfg.Lock(ctx, name)
	if err != nil {
		return "", nil, err
	}
	defer unlock()
	if id, done := t.Use(name, thread); id != "" {
		return id, done, nil
	}
	if sandbox.OnlyIfRunning(ctx) {
		return "", nil, sandbox.ErrNotRunning
	}
	var release func()
	defer func() {
		if release != nil {
			release()
		}
	}()
	began := time.Now()
	id, err := start(func() (err error) {
		if release == nil {
			release, err = t.admit(ctx, name, thread, room)
		}
		return err
	})
	if err != nil {
		return "", nil, err
	}
	if release != nil && t.cfg.Started != nil {
		t.cfg.Started(ctx, began)
	}
	t.mu.Lock()
	t.boxes[name] = &entry{id: id, thread: thread, lastUsed: time.Now()} // in place of the one admit held
	t.mu.Unlock()
	id, done := t.Use(name, thread)
	if id == "" {
		return "", nil, errors.New(t.cfg.What + " went away while starting")
	}
	return id, done, nil
}

// Use marks box name, known running as thread's, in use until done is
// called, and returns its id; "" when it is not known so.
func (t *Table) Use(name, thread string) (string, func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.boxes[name]
	if e == nil || e.thread != thread || e.id == "" {
		return "", nil
	}
	e.busy++
	e.lastUsed = time.Now()
	t.publishLocked(name, e)
	var once sync.Once
	return e.id, func() {
		once.Do(func() {
			t.mu.Lock()
			e.busy--
			e.lastUsed = time.Now()
			t.publishLocked(name, e)
			t.mu.Unlock()
		})
	}
}

// admit makes room under the cap for box name of thread, about to be made
// or started (MakeRoom over room's list and the places held here, never
// name's own), and holds its place: an entry in use without an id, which
// Ensure replaces once the box runs, or release drops. Admissions take
// turns, so that two new threads never both count the last free place.
func (t *Table) admit(ctx context.Context, name, thread string, room Room) (release func(), err error) {
	if t.cfg.Limit >= 0 {
		select {
		case t.admitting <- struct{}{}:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		defer func() { <-t.admitting }()
		if err := t.makeRoom(ctx, name, thread, room); err != nil {
			return nil, err
		}
	}
	place := &entry{thread: thread, lastUsed: time.Now(), busy: 1}
	t.mu.Lock()
	if t.boxes[name] == nil {
		t.boxes[name] = place
	}
	t.mu.Unlock()
	return func() {
		t.mu.Lock()
		if t.boxes[name] == place {
			delete(t.boxes, name)
		}
		t.mu.Unlock()
	}, nil
}

func (t *Table) makeRoom(ctx context.Context, name, thread string, room Room) error {
	var listed []Box
	if room.List != nil {
		var err error
		if listed, err = room.List(ctx); err != nil {
			return err
		}
	}
	var boxes []Box
	seen := map[string]bool{name: true}
	for _, b := range listed {
		if !seen[b.Name] {
			seen[b.Name] = true
			boxes = append(boxes, b)
		}
	}
	for _, b := range t.Snapshot() { // the table's own; places held here, not listed yet
		if !seen[b.Name] && (room.List == nil || b.ID == "") {
			boxes = append(boxes, b)
		}
	}
	return MakeRoom(t.cfg.Setting, t.cfg.Limit, boxes, thread, room.Take)
}

// Snapshot lists the boxes known here, places held included (without an
// ID); InUse: a call in flight here, or a place.
func (t *Table) Snapshot() []Box {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]Box, 0, len(t.boxes))
	for name, e := range t.boxes {
		out = append(out, Box{Name: name, ID: e.id, Thread: e.thread, LastUsed: e.lastUsed, InUse: e.busy > 0 || e.id == ""})
	}
	return out
}

// Running is how many boxes are known running here (places held for
// boxes being made left out).
func (t *Table) Running() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, e := range t.boxes {
		if e.id != "" {
			n++
		}
	}
	return n
}

// Idle are the boxes of boxes not in use and unused for d.
func Idle(boxes []Box, d time.Duration) []Box {
	var out []Box
	for _, b := range boxes {
		if !b.InUse && time.Since(b.LastUsed) >= d {
			out = append(out, b)
		}
	}
	return out
}

// Take forgets box b (listed by Snapshot) so that the caller removes it,
// unless it changed since, or a call here uses it (or its place is held),
// or used says its supervisor runs something — a job, a command of another
// server — which counts as a use now: it is looked at again only after
// another idle time. A thread merely held (a session open between calls)
// does not use its box (SPEC §16: calls in flight and running jobs are
// protected): it may go, and its next call makes it again, files intact.
func (t *Table) Take(b Box, used bool) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.boxes[b.Name]
	switch {
	case e == nil || e.id != b.ID || e.id == "" || e.busy > 0:
		return false
	case used:
		e.lastUsed = time.Now()
		return false
	}
	delete(t.boxes, b.Name)
	return true
}

// Add records box name of thread running as id, unless a box of that name
// is known here already (a box found running: its idle time starts now).
func (t *Table) Add(name, id, thread string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.boxes[name] == nil {
		t.boxes[name] = &entry{id: id, thread: thread, lastUsed: time.Now()}
	}
}

// Forget drops box name — only while its id is id, when id is not "" —
// that went away (or goes): its next use makes it again. A place held for
// one being made stays.
func (t *Table) Forget(name, id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e := t.boxes[name]; e != nil && e.id != "" && (id == "" || e.id == id) {
		delete(t.boxes, name)
	}
}

// ID is the id of running box name as known here; "" when it is not.
func (t *Table) ID(name string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e := t.boxes[name]; e != nil {
		return e.id
	}
	return ""
}

// Used says whether a call here uses box name (or its place is held), and
// when it was last used here; zero when it is not known here.
func (t *Table) Used(name string) (inUse bool, lastUsed time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e := t.boxes[name]; e != nil {
		return e.busy > 0 || e.id == "", e.lastUsed
	}
	return false, time.Time{}
}

// Clear forgets every box, and returns those that ran (for a provider
// that removes them as it closes).
func (t *Table) Clear() []Box {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []Box
	for name, e := range t.boxes {
		if e.id != "" {
			out = append(out, Box{Name: name, ID: e.id, Thread: e.thread, LastUsed: e.lastUsed})
		}
	}
	clear(t.boxes)
	return out
}

// Publish tells the other replicas, if it is due, this process's use of
// box name of thread (after its thread was released here: a use that
// ended goes at once, so that every replica may take the box for the cap
// from now on).
func (t *Table) Publish(name, thread string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e := t.boxes[name]; e != nil && e.thread == thread {
		t.publishLocked(name, e)
	}
}

// Refresh marks the boxes in use here used now, and tells the other
// replicas what is due: a heartbeat, run every Heartbeat at least, so
// that none takes a box in use here for idle or for the cap.
func (t *Table) Refresh() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for name, e := range t.boxes {
		if e.busy > 0 {
			e.lastUsed = time.Now()
		}
		if e.busy > 0 || e.said {
			t.publishLocked(name, e)
		}
	}
}

// publishLocked runs Publish for box name in the background. One that
// says this process began using the box goes at once (after the one in
// flight); any other (a refresh, or the end of use) waits a Heartbeat
// since the last. t.mu is held.
func (t *Table) publishLocked(name string, e *entry) {
	if t.cfg.Publish == nil || e.id == "" {
		return
	}
	began := e.busy > 0 && !e.said
	if !began && time.Since(e.published) < t.cfg.Heartbeat {
		return
	}
	if e.publishing {
		e.again = e.again || began
		return
	}
	e.publishing = true
	go func() {
		for {
			t.mu.Lock()
			inUse, at := e.busy > 0, e.lastUsed
			t.mu.Unlock()
			err := t.cfg.Publish(name, inUse, at)
			t.mu.Lock()
			if err == nil {
				e.published, e.said = time.Now(), inUse
			}
			if err != nil || !e.again {
				e.publishing, e.again = false, false
				t.mu.Unlock()
				return
			}
			e.again = false
			t.mu.Unlock()
		}
	}()
}

// Idle says box name's idle timeout and the time left of it now: timeout
// minus the time since its last use here (all of it while a call uses
// the box, or when no use is known); ok false when timeout is below zero
// (no box is stopped for being idle).
func (t *Table) Idle(name string, timeout time.Duration) (_, left time.Duration, ok bool) {
	if timeout < 0 {
		return 0, 0, false
	}
	inUse, last := t.Used(name)
	if inUse || last.IsZero() {
		return timeout, timeout, true
	}
	return timeout, max(timeout-time.Since(last), 0), true
}
