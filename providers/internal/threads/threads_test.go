package threads

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
)

func TestTableCountsUsers(t *testing.T) {
	var tb Table[*int]
	var opened, closed atomic.Int32
	open := func() (*int, func(), error) {
		opened.Add(1)
		n := new(int)
		return n, func() { closed.Add(1) }, nil
	}
	var wg sync.WaitGroup
	got := make([]*int, 20)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sb, err := tb.Acquire("t1", open)
			if err != nil {
				t.Error(err)
			}
			got[i] = sb
		}()
	}
	wg.Wait()
	if opened.Load() != 1 {
		t.Fatalf("opened %d times for concurrent first users", opened.Load())
	}
	for _, sb := range got {
		if sb != got[0] {
			t.Fatal("two sandboxes for one thread")
		}
	}
	for range 19 {
		tb.Release("t1")
	}
	if closed.Load() != 0 {
		t.Fatal("closed while a user holds it")
	}
	tb.Release("t1")
	tb.Release("t1") // one too many: nothing
	if closed.Load() != 1 {
		t.Fatalf("closed %d times", closed.Load())
	}
	if _, err := tb.Acquire("t2", open); err != nil {
		t.Fatal(err)
	}
	tb.Close()
	if closed.Load() != 2 {
		t.Fatalf("Close: closed %d", closed.Load())
	}
}

func TestTableRefusesBadKeysAndFailedOpens(t *testing.T) {
	var tb Table[int]
	if _, err := tb.Acquire("../x", func() (int, func(), error) { return 1, nil, nil }); err == nil {
		t.Fatal("a bad thread key passed")
	}
	boom := errors.New("boom")
	if _, err := tb.Acquire("t", func() (int, func(), error) { return 0, nil, boom }); !errors.Is(err, boom) {
		t.Fatalf("err %v", err)
	}
	n := 0
	if _, err := tb.Acquire("t", func() (int, func(), error) { n++; return 1, nil, nil }); err != nil || n != 1 {
		t.Fatalf("a failed open was remembered: %v %d", err, n)
	}
}

func TestTableRetain(t *testing.T) {
	var tb Table[*int]
	if tb.Retain("t1") {
		t.Fatal("retained a thread no one holds")
	}
	closed := 0
	if _, err := tb.Acquire("t1", func() (*int, func(), error) { return new(int), func() { closed++ }, nil }); err != nil {
		t.Fatal(err)
	}
	if !tb.Retain("t1") {
		t.Fatal("a held thread not retained")
	}
	tb.Release("t1")
	if closed != 0 {
		t.Fatal("closed while the retained use remains")
	}
	tb.Release("t1")
	if closed != 1 || tb.Retain("t1") {
		t.Fatalf("closed %d times after the last use", closed)
	}
}

// Held lends a use of a held sandbox and says when it has ended: after
// its last Release, not before.
func TestTableHeld(t *testing.T) {
	var tb Table[*int]
	if _, _, ok := tb.Held("t1"); ok {
		t.Fatal("a thread never acquired is held")
	}
	var closed atomic.Int32
	first, _ := tb.Acquire("t1", func() (*int, func(), error) { return new(int), func() { closed.Add(1) }, nil })
	sb, ended, ok := tb.Held("t1")
	if !ok || sb != first {
		t.Fatalf("Held = %v, %v; want the acquired sandbox", sb, ok)
	}
	tb.Release("t1") // the first user; Held's use remains
	select {
	case <-ended:
		t.Fatal("ended while Held's use remains")
	default:
	}
	tb.Release("t1")
	select {
	case <-ended:
	default:
		t.Fatal("not ended after the last Release")
	}
	if closed.Load() != 1 {
		t.Fatalf("closed %d times", closed.Load())
	}
}

func TestTableAll(t *testing.T) {
	var tb Table[int]
	if got := tb.All(); len(got) != 0 {
		t.Fatalf("empty table: %v", got)
	}
	for i, th := range []string{"t1", "t2"} {
		if _, err := tb.Acquire(th, func() (int, func(), error) { return i + 1, nil, nil }); err != nil {
			t.Fatal(err)
		}
	}
	tb.Acquire("t1", nil) // a second user: still one sandbox
	got := tb.All()
	if len(got) != 2 || got[0]+got[1] != 3 {
		t.Fatalf("All = %v, want [1 2] in any order", got)
	}
	tb.Release("t2")
	if got := tb.All(); len(got) != 1 || got[0] != 1 {
		t.Fatalf("after t2's release: %v", got)
	}
}
