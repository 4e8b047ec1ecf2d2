package server

import (
	"context"
	"errors"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

func TestAuthorizationLine(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		head        string
		value       string
		found, done bool
	}{
		{"GET / HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer abc\r\n\r\n", "Bearer abc", true, true},
		{"GET / HTTP/1.1\r\nauthorization:   Bearer abc  \r\n", "Bearer abc", true, true},
		{"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "", false, true},
		{"GET / HTTP/1.1\r\nHost: x\r\nAuthoriz", "", false, false},              // more to come
		{"GET / HTTP/1.1\r\nAuthorization: Bearer ab", "", false, false},         // the line is not whole yet
		{"GET / HTTP/1.1\r\n\r\nAuthorization: Bearer abc\r\n", "", false, true}, // in the body: not a header
		{"", "", false, false},
	} {
		v, found, done := authorizationLine([]byte(tc.head))
		if v != tc.value || found != tc.found || done != tc.done {
			t.Errorf("authorizationLine(%q) = %q, %v, %v; want %q, %v, %v", tc.head, v, found, done, tc.value, tc.found, tc.done)
		}
	}
}

// The share keeps its newest connections: past the cap the oldest silent
// one goes (never one younger than the grace), then the oldest.
func TestUnauthConnsEvictOldestSilent(t *testing.T) {
	t.Parallel()
	u := &unauthConns{max: 2, valid: func(h http.Header) bool { return h.Get("Authorization") == "Bearer ok" }}
	conn := func(age time.Duration, spoke bool) *limitedConn {
		a, b := net.Pipe()
		t.Cleanup(func() { a.Close(); b.Close() })
		c := &limitedConn{Conn: a, release: func() {}}
		u.add(c)
		u.mu.Lock()
		c.born = time.Now().Add(-age)
		u.mu.Unlock()
		c.spoke.Store(spoke)
		return c
	}
	speaking := conn(3*time.Second, true)
	silent := conn(2*time.Second, false)
	young := conn(0, false) // past the cap: the oldest silent one goes, not the older speaking one
	if silent.elem != nil || speaking.elem == nil || young.elem == nil {
		t.Fatalf("after a third: silent in the share %v, speaking %v, young %v; want only the silent one gone",
			silent.elem != nil, speaking.elem != nil, young.elem != nil)
	}
	young2 := conn(0, false) // no silent one past its grace: the oldest past it goes
	if speaking.elem != nil || young.elem == nil || young2.elem == nil {
		t.Fatal("after a fourth: want the speaking one gone, the young ones kept")
	}
	young3 := conn(0, false) // all young: the share overflows, no one goes
	if young.elem == nil || young2.elem == nil || young3.elem == nil || u.list.Len() != 3 {
		t.Fatal("a connection younger than the grace was taken")
	}
	// Every slot taken: evictOne takes the oldest silent one, whatever its age.
	if !u.evictOne() || young.elem != nil || young2.elem == nil {
		t.Error("evictOne did not take the oldest silent (young) connection")
	}
	speaking = young2
	// A connection that authenticates leaves the share.
	speaking.authenticated()
	if speaking.elem != nil || u.list.Len() != 1 {
		t.Errorf("after authenticating: %d in the share, want 1", u.list.Len())
	}
	// peek authenticates a connection from its first request's headers.
	c := conn(0, false)
	c.peek([]byte("GET /mcp HTTP/1.1\r\nAuthoriza"))
	if c.elem == nil {
		t.Fatal("authenticated before the header was whole")
	}
	c.peek([]byte("tion: Bearer ok\r\n\r\n"))
	if c.elem != nil {
		t.Error("a valid token in the first request's headers left the connection in the share")
	}
	bad := conn(0, false)
	bad.peek([]byte("GET /mcp HTTP/1.1\r\nAuthorization: Bearer nope\r\n\r\n"))
	if bad.elem == nil {
		t.Error("an invalid token took the connection out of the share")
	}
}

// fakeProvider hands out fakeBoxes and counts what is held; the threads
// in existing have files already, and discarded lists Discard's.
type fakeProvider struct {
	mu        sync.Mutex
	held      map[string]int
	boxes     map[string]*fakeBox
	existing  map[string]bool
	discarded []string
}

func (p *fakeProvider) Exists(ctx context.Context, thread string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err // as an API client answers
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.existing[thread], nil
}

func (p *fakeProvider) Discard(_ context.Context, thread string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.discarded = append(p.discarded, thread)
	return nil
}

func (p *fakeProvider) discards() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.discarded)
}

func (p *fakeProvider) Name() string { return "fake" }
func (p *fakeProvider) Acquire(_ context.Context, thread string) (sandbox.Sandbox, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held == nil {
		p.held, p.boxes = map[string]int{}, map[string]*fakeBox{}
	}
	p.held[thread]++
	if p.boxes[thread] == nil {
		p.boxes[thread] = &fakeBox{thread: thread}
	}
	return p.boxes[thread], nil
}
func (p *fakeProvider) Release(thread string) { p.mu.Lock(); p.held[thread]--; p.mu.Unlock() }
func (p *fakeProvider) Close() error          { return nil }
func (p *fakeProvider) holds(thread string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.held[thread]
}

// fakeBox is a sandbox whose one job runs while running is set.
type fakeBox struct {
	thread  string
	running atomic.Bool
}

func (b *fakeBox) Thread() string          { return b.thread }
func (b *fakeBox) Mounts() []sandbox.Mount { return nil }
func (b *fakeBox) FS() sandbox.FS          { return nil }
func (b *fakeBox) Exec(context.Context, sandbox.ExecRequest) (sandbox.ExecResult, error) {
	return sandbox.ExecResult{}, nil
}
func (b *fakeBox) StartJob(context.Context, sandbox.JobRequest) (sandbox.JobInfo, error) {
	b.running.Store(true)
	return sandbox.JobInfo{ID: "j1", State: sandbox.JobRunning}, nil
}
func (b *fakeBox) JobOutput(context.Context, string, int64, time.Duration) (sandbox.JobOutput, error) {
	return sandbox.JobOutput{}, nil
}
func (b *fakeBox) PeekJobOutput(context.Context, string, int64, time.Duration) (sandbox.JobOutput, error) {
	return sandbox.JobOutput{}, nil
}
func (b *fakeBox) JobInput(context.Context, string, []byte, bool) (sandbox.JobInfo, error) {
	return sandbox.JobInfo{}, nil
}
func (b *fakeBox) KillJob(context.Context, string, string) (sandbox.JobInfo, error) {
	b.running.Store(false)
	return sandbox.JobInfo{ID: "j1", State: sandbox.JobKilled}, nil
}
func (b *fakeBox) ResizeJob(context.Context, string, sandbox.TermSize) (sandbox.JobInfo, error) {
	return sandbox.JobInfo{}, sandbox.ErrJobNoTTY
}
func (b *fakeBox) Jobs(context.Context) ([]sandbox.JobInfo, error) {
	if b.running.Load() {
		return []sandbox.JobInfo{{ID: "j1", State: sandbox.JobRunning}}, nil
	}
	return nil, nil
}

// A call on its way when its session ended never makes the session a
// binding again (the red team's race: a job started then ran on, its
// anonymous thread never removed).
func TestSessionsEndedSessionNotBoundAgain(t *testing.T) {
	t.Parallel()
	p := &fakeProvider{}
	r := NewSessions(p, "", nil)
	th := ThreadRef{ID: "s1", Key: "s1", Anonymous: true}
	_, done, err := r.Call(t.Context(), "s1", th)
	if err != nil {
		t.Fatal(err)
	}
	done()
	r.End("s1")
	if _, _, err := r.Call(t.Context(), "s1", th); !errors.Is(err, errSessionEnded) {
		t.Fatalf("a call of an ended session: %v, want %v", err, errSessionEnded)
	}
	if n := p.holds("s1"); n != 0 {
		t.Fatalf("the ended session's thread is held %d times", n)
	}
}

// A thread whose job runs stays live for its tenant after its session
// ends, until the job ends: ending sessions does not make room under
// limits.threads_per_token (the red team's F1).
func TestSessionsJobsKeepTheThreadCounted(t *testing.T) {
	old := lingerPoll
	lingerPoll = 20 * time.Millisecond
	defer func() { lingerPoll = old }()
	p := &fakeProvider{}
	r := NewSessions(p, "", nil)
	r.threadsPerTenant = 2
	defer r.EndAll()
	ref := func(id string) ThreadRef { return ThreadRef{ID: id, Key: id, Tenant: "b"} }
	b1, done, err := r.Call(t.Context(), "sess-1", ref("t1"))
	if err != nil {
		t.Fatal(err)
	}
	b1.sb.(*fakeBox).StartJob(t.Context(), sandbox.JobRequest{})
	done()
	r.End("sess-1") // its job runs on
	if _, done, err := r.Call(t.Context(), "sess-2", ref("t2")); err != nil {
		t.Fatal(err)
	} else {
		done()
	}
	if _, _, err := r.Call(t.Context(), "sess-3", ref("t3")); !errors.Is(err, ErrThreadLimit) {
		t.Fatalf("a third thread with one live by its job and one by its session: %v, want %v", err, ErrThreadLimit)
	}
	if p.holds("t1") != 1 {
		t.Fatalf("t1, whose job runs, is held %d times, want 1", p.holds("t1"))
	}
	b1.sb.(*fakeBox).KillJob(t.Context(), "j1", "KILL")
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, done, err := r.Call(t.Context(), "sess-3", ref("t3"))
		if err == nil {
			done()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("t3 still refused 10 s after t1's job ended: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if p.holds("t1") != 0 {
		t.Fatalf("t1 is held %d times after its job ended", p.holds("t1"))
	}
}

// A new thread at its tenant's cap, finding no idle lease left because
// another call is ending the last one, waits for that end and takes the
// room, rather than be refused while room is being made (the flood of
// sixteen calls at once was refused 436 times of 3200).
func TestSessionsWaitForRoomBeingMade(t *testing.T) {
	t.Parallel()
	p := &fakeProvider{}
	r := NewSessions(p, "", nil)
	r.threadsPerTenant = 1
	defer r.EndAll()
	ref := func(id string) ThreadRef { return ThreadRef{ID: id, Key: id, Tenant: "b"} }
	_, done, err := r.Call(t.Context(), "lease-1", ref("t1"))
	if err != nil {
		t.Fatal(err)
	}
	done()
	// Another call took the idle lease: it ends it a moment later.
	r.reclaim = func(string) bool { return false }
	r.reclaimStart("b")
	go func() {
		time.Sleep(100 * time.Millisecond)
		r.End("lease-1")
		r.reclaimDone("b")
	}()
	if _, done, err := r.Call(t.Context(), "lease-2", ref("t2")); err != nil {
		t.Fatalf("a new thread while room is being made: %v", err)
	} else {
		done()
	}
	// With nothing being made, the call is refused.
	if _, _, err := r.Call(t.Context(), "lease-3", ref("t3")); !errors.Is(err, ErrThreadLimit) {
		t.Fatalf("a new thread at the cap, no room being made: %v, want %v", err, ErrThreadLimit)
	}
}

// A connection's place in its token's share goes back when it closes, and
// a request still served on a connection already closed counts nothing
// (its count would never go back).
func TestTokenConnsClaimAndDrop(t *testing.T) {
	t.Parallel()
	tc := &tokenConns{share: 1, per: map[string]int{}}
	a, b := &limitedConn{tokens: tc}, &limitedConn{tokens: tc}
	if !tc.claim(a, "x") || tc.claim(b, "x") {
		t.Fatal("want the first connection in the share, the second refused")
	}
	if !tc.claim(a, "x") {
		t.Fatal("a connection already counted was refused")
	}
	tc.drop(a)
	if !tc.claim(b, "x") {
		t.Fatal("the place did not come back when the first closed")
	}
	c := &limitedConn{tokens: tc}
	tc.drop(c) // closed before its request claimed
	if !tc.claim(c, "y") || tc.per["y"] != 0 {
		t.Fatalf("a closed connection counted: %v", tc.per)
	}
}
