package replicas

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// newTable is a table capped at limit whose creation locks are real.
func newTable(limit int) *Table {
	var mu sync.Mutex
	locks := map[string]*sync.Mutex{}
	return NewTable(TableConfig{Setting: "test.replicas", Limit: limit, What: "test: box",
		Lock: func(_ context.Context, name string) (func(), error) {
			mu.Lock()
			l := locks[name]
			if l == nil {
				l = &sync.Mutex{}
				locks[name] = l
			}
			mu.Unlock()
			l.Lock()
			return l.Unlock, nil
		}})
}

// starter makes box ids "id-<name>-<n>", counting its starts, admitting
// each first.
type starter struct{ n atomic.Int32 }

func (s *starter) start(name string) func(admit func() error) (string, error) {
	return func(admit func() error) (string, error) {
		if err := admit(); err != nil {
			return "", err
		}
		return fmt.Sprintf("id-%s-%d", name, s.n.Add(1)), nil
	}
}

// take is a Room that takes any box the table lets go.
func take(t *Table) Room { return Room{Take: func(b Box) bool { return t.Take(b, false) }} }

// Concurrent first uses of a box start it once, and share it; it is in
// use until the last is done.
func TestEnsureStartsOnce(t *testing.T) {
	t.Parallel()
	tb, s := newTable(3), &starter{}
	var wg sync.WaitGroup
	ids := make([]string, 10)
	dones := make([]func(), 10)
	for i := range ids {
		wg.Go(func() {
			var err error
			if ids[i], dones[i], err = tb.Ensure(t.Context(), "a", "t1", s.start("a"), take(tb)); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if n := s.n.Load(); n != 1 {
		t.Fatalf("%d starts, want 1", n)
	}
	for _, id := range ids {
		if id != "id-a-1" {
			t.Fatalf("ids %v", ids)
		}
	}
	for i, done := range dones {
		if inUse, _ := tb.Used("a"); !inUse {
			t.Fatalf("not in use with %d of 10 calls still in flight", 10-i)
		}
		done()
		done() // twice: counted once
	}
	if inUse, last := tb.Used("a"); inUse || time.Since(last) > time.Minute {
		t.Fatalf("after every call: in use %v, last used %v", inUse, last)
	}
	if id, _ := tb.Use("a", "t2"); id != "" {
		t.Fatal("another thread's use of the box was granted")
	}
}

// Under the cap a new box takes the least recently used idle one; one in
// use (a call in flight, or a place held for a box being made) is never
// taken, and then the new box's start fails with a FullError.
func TestEnsureAdmits(t *testing.T) {
	t.Parallel()
	tb, s := newTable(2), &starter{}
	ctx := t.Context()
	_, doneA, err := tb.Ensure(ctx, "a", "ta", s.start("a"), take(tb))
	if err != nil {
		t.Fatal(err)
	}
	doneA()
	// b's start waits, its place held, until c's admission is over.
	release := make(chan struct{})
	admitted := make(chan error, 1)
	go func() {
		_, done, err := tb.Ensure(ctx, "b", "tb", func(admit func() error) (string, error) {
			err := admit()
			admitted <- err
			<-release
			return "id-b", err
		}, take(tb))
		if err == nil {
			done()
		}
	}()
	if err := <-admitted; err != nil {
		t.Fatal(err)
	}
	tb.Forget("b", "") // a place is not forgotten
	if inUse, _ := tb.Used("b"); !inUse || tb.ID("b") != "" {
		t.Fatal("b's place is not held")
	}
	_, doneC, err := tb.Ensure(ctx, "c", "tc", s.start("c"), take(tb))
	if err != nil {
		t.Fatal(err)
	}
	if tb.ID("a") != "" || tb.ID("c") == "" {
		t.Fatalf("a %q c %q: want a taken for c", tb.ID("a"), tb.ID("c"))
	}
	_, _, err = tb.Ensure(ctx, "d", "td", s.start("d"), take(tb))
	var fe *FullError
	if !errors.Is(err, ErrFull) || !errors.As(err, &fe) || fe.Setting != "test.replicas" || fe.Limit != 2 {
		t.Fatalf("with b starting and c in use: %v", err)
	}
	if inUse, _ := tb.Used("d"); inUse {
		t.Fatal("a refused box holds a place")
	}
	close(release)
	doneC()
	for tb.ID("b") == "" {
		time.Sleep(time.Millisecond)
	}
	if _, done, err := tb.Ensure(ctx, "d", "td", s.start("d"), take(tb)); err != nil || tb.ID("d") == "" {
		t.Fatalf("with b and c idle: %v", err)
	} else {
		done()
	}
}

// Take lets a box go only as Snapshot listed it, idle here, and unused
// by its supervisor; a box its supervisor uses counts as used now.
func TestTake(t *testing.T) {
	t.Parallel()
	tb := newTable(-1)
	tb.Add("a", "id-a", "ta")
	tb.Add("a", "id-other", "ta") // known already: kept
	snap := tb.Snapshot()
	if len(snap) != 1 || snap[0].ID != "id-a" || snap[0].InUse {
		t.Fatalf("snapshot %+v", snap)
	}
	b := snap[0]
	if len(Idle(snap, time.Hour)) != 0 || len(Idle(snap, 0)) != 1 {
		t.Fatal("Idle")
	}
	_, done := tb.Use("a", "ta")
	if tb.Take(b, false) {
		t.Fatal("taken with a call in flight")
	}
	done()
	before := tb.Snapshot()[0].LastUsed
	time.Sleep(time.Millisecond)
	if tb.Take(b, true) {
		t.Fatal("taken while its supervisor runs a job")
	}
	if _, last := tb.Used("a"); !last.After(before) {
		t.Fatal("a box whose supervisor runs a job does not count as used now")
	}
	if tb.Take(Box{Name: "a", ID: "id-earlier"}, false) {
		t.Fatal("taken as another box of its name")
	}
	if !tb.Take(b, false) || tb.ID("a") != "" {
		t.Fatal("an idle box not taken")
	}
	tb.Add("x", "id-x", "tx")
	tb.Forget("x", "id-earlier")
	if tb.ID("x") == "" {
		t.Fatal("forgotten as another box of its name")
	}
	if gone := tb.Clear(); len(gone) != 1 || gone[0].ID != "id-x" || tb.ID("x") != "" {
		t.Fatalf("Clear: %+v", gone)
	}
}

// A use that begins is published at once; its end, and a refresh, wait a
// heartbeat since the last.
func TestPublish(t *testing.T) {
	t.Parallel()
	ch := make(chan bool, 16) // what each publish said: in use
	const heartbeat = 200 * time.Millisecond
	tb := NewTable(TableConfig{Limit: -1, Heartbeat: heartbeat,
		Lock:    func(context.Context, string) (func(), error) { return func() {}, nil },
		Publish: func(_ string, inUse bool, _ time.Time) error { ch <- inUse; return nil }})
	expect := func(want bool, within time.Duration) {
		t.Helper()
		select {
		case inUse := <-ch:
			if inUse != want {
				t.Fatalf("published in use %v, want %v", inUse, want)
			}
			time.Sleep(20 * time.Millisecond) // the table records it
		case <-time.After(within):
			t.Fatalf("nothing published within %v", within)
		}
	}
	quiet := func(d time.Duration) {
		t.Helper()
		select {
		case inUse := <-ch:
			t.Fatalf("published (in use %v), want nothing yet", inUse)
		case <-time.After(d):
		}
	}
	tb.Add("a", "id-a", "ta")
	_, done := tb.Use("a", "ta")
	expect(true, time.Second)
	tb.Refresh() // within the heartbeat: nothing
	done()
	tb.Publish("a", "ta")
	quiet(heartbeat / 4)
	time.Sleep(heartbeat)
	tb.Publish("a", "ta")
	expect(false, time.Second)
	tb.Refresh() // nothing in use, nothing said: nothing
	quiet(heartbeat / 4)
	_, done = tb.Use("a", "ta")
	expect(true, time.Second) // began again: at once
	time.Sleep(heartbeat)
	tb.Refresh()
	expect(true, time.Second) // a heartbeat of the call in flight
	done()
}

// Started is told of each box Ensure's start made or started (admitted),
// not of one found running nor of one known here; Running counts the
// boxes known running, not the places held.
func TestEnsureTellsStarts(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var starts []time.Duration
	tb := NewTable(TableConfig{Setting: "test.replicas", Limit: -1, What: "test: box",
		Lock: func(context.Context, string) (func(), error) { return func() {}, nil },
		Started: func(_ context.Context, began time.Time) {
			mu.Lock()
			starts = append(starts, time.Since(began))
			mu.Unlock()
		}})
	ctx := t.Context()
	slow := func(admit func() error) (string, error) {
		if err := admit(); err != nil {
			return "", err
		}
		time.Sleep(20 * time.Millisecond)
		return "id-a", nil
	}
	_, done, err := tb.Ensure(ctx, "a", "ta", slow, Room{})
	if err != nil {
		t.Fatal(err)
	}
	done()
	// Known here: no start at all.
	if _, done, err = tb.Ensure(ctx, "a", "ta", slow, Room{}); err != nil {
		t.Fatal(err)
	}
	done()
	// Found running by start (made by another process): not admitted.
	found := func(func() error) (string, error) { return "id-b", nil }
	if _, done, err = tb.Ensure(ctx, "b", "tb", found, Room{}); err != nil {
		t.Fatal(err)
	}
	done()
	// A start that fails after admission: no box, nothing told.
	failed := func(admit func() error) (string, error) { admit(); return "", errors.New("boom") }
	if _, _, err = tb.Ensure(ctx, "c", "tc", failed, Room{}); err == nil {
		t.Fatal("a failed start succeeded")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(starts) != 1 || starts[0] < 20*time.Millisecond {
		t.Fatalf("starts told %v, want one of at least 20ms", starts)
	}
	if n := tb.Running(); n != 2 {
		t.Errorf("Running = %d, want 2 (a and b)", n)
	}
	release, err := tb.admit(ctx, "d", "td", Room{}) // a place held for d
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if n := tb.Running(); n != 2 {
		t.Errorf("Running = %d with a place held, want 2", n)
	}
}

// Under sandbox.IfRunning, Ensure uses a box known running and never
// starts one: a box not known here is sandbox.ErrNotRunning.
func TestEnsureIfRunning(t *testing.T) {
	t.Parallel()
	tb, s := newTable(3), &starter{}
	ctx := sandbox.IfRunning(t.Context())
	if _, _, err := tb.Ensure(ctx, "a", "t1", s.start("a"), take(tb)); !errors.Is(err, sandbox.ErrNotRunning) || s.n.Load() != 0 {
		t.Fatalf("no box known: %v, %d starts; want ErrNotRunning and none", err, s.n.Load())
	}
	_, done, err := tb.Ensure(t.Context(), "a", "t1", s.start("a"), take(tb))
	if err != nil {
		t.Fatal(err)
	}
	done()
	id, done, err := tb.Ensure(ctx, "a", "t1", s.start("a"), take(tb))
	if err != nil || id != "id-a-1" || s.n.Load() != 1 {
		t.Fatalf("a box known running: %q %v, %d starts", id, err, s.n.Load())
	}
	done()
}
