package testkit

import (
	"sync"
	"testing"
	"time"
)

func TestBufferTake(t *testing.T) {
	t.Parallel()
	var b Buffer
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() { b.Write([]byte("ab")) })
	}
	wg.Wait()
	if got := b.Take(); got != "abababababababab" {
		t.Fatalf("Take = %q", got)
	}
	if got := b.String(); got != "" {
		t.Fatalf("after Take: %q", got)
	}
}

func TestPoll(t *testing.T) {
	t.Parallel()
	n := 0
	if !Poll(time.Minute, time.Millisecond, func() bool { n++; return n == 3 }) || n != 3 {
		t.Fatalf("a condition that holds on the third call: n = %d", n)
	}
	if Poll(10*time.Millisecond, time.Millisecond, func() bool { return false }) {
		t.Fatal("a condition that never holds held")
	}
}
