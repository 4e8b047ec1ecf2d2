package server

import (
	"context"
	"path/filepath"
	"sync"

	"github.com/sandbox-mcp/sandbox-mcp/masking"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// Sessions binds MCP sessions to threads and their sandboxes. A session's
// sandbox is acquired on its first tool call and released when the session
// ends; the thread's files stay.
type Sessions struct {
	provider sandbox.Provider
	stateDir string
	base     *masking.Masker // masks the state dir, for errors before a sandbox exists
	// mounts is the mount table at start-up: a sandbox's mountinfo names
	// host dirs relative to their file system, and those forms are masked
	// too.
	mounts *masking.Mounts

	mu       sync.Mutex
	sessions map[string]*binding
}

// ThreadRef names a session's thread: ID as the client named it, Key as the
// provider knows it (the ID, namespaced by the client's token when tokens
// are configured).
type ThreadRef struct {
	ID  string
	Key string
}

// binding is one session's thread and sandbox.
type binding struct {
	thread ThreadRef
	ctx    context.Context // cancelled when the session ends: its calls stop
	cancel context.CancelFunc
	ready  chan struct{} // closed once sb/mask/err are set
	sb     sandbox.Sandbox
	mask   *masking.Masker
	err    error
}

// NewSessions returns an empty registry.
func NewSessions(p sandbox.Provider, stateDir string) *Sessions {
	mounts, _ := masking.ReadMounts() // none to read: no such forms to mask
	state := []masking.Pair{{Host: stateDir, Virtual: StateDirMask}}
	return &Sessions{
		provider: p,
		stateDir: stateDir,
		base:     masking.New(append(state, mounts.Pairs(state)...)...),
		mounts:   mounts,
		sessions: map[string]*binding{},
	}
}

// Get returns the session's binding, acquiring the thread's sandbox on the
// session's first call. A session keeps the thread of its first call.
func (r *Sessions) Get(ctx context.Context, session string, thread ThreadRef) (*binding, error) {
	r.mu.Lock()
	b := r.sessions[session]
	if b == nil {
		if err := sandbox.ValidThreadID(thread.ID); err != nil {
			r.mu.Unlock()
			return nil, err
		}
		b = &binding{thread: thread, ready: make(chan struct{})}
		b.ctx, b.cancel = context.WithCancel(context.Background())
		r.sessions[session] = b
		r.mu.Unlock()
		b.sb, b.err = r.provider.Acquire(ctx, thread.Key)
		if b.err == nil {
			b.mask = r.masker(b.sb)
		} else {
			r.mu.Lock()
			delete(r.sessions, session) // the next call tries again
			r.mu.Unlock()
		}
		close(b.ready)
		return b, b.err
	}
	r.mu.Unlock()
	select {
	case <-b.ready:
		return b, b.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// End releases the session's sandbox.
func (r *Sessions) End(session string) {
	r.mu.Lock()
	b := r.sessions[session]
	delete(r.sessions, session)
	r.mu.Unlock()
	if b == nil {
		return
	}
	b.cancel()
	<-b.ready
	if b.err == nil {
		r.provider.Release(b.thread.Key)
	}
}

// EndAll releases every session's sandbox.
func (r *Sessions) EndAll() {
	r.mu.Lock()
	ids := make([]string, 0, len(r.sessions))
	for id := range r.sessions {
		ids = append(ids, id)
	}
	r.mu.Unlock()
	for _, id := range ids {
		r.End(id)
	}
}

// masker masks the sandbox's host directories, the thread's directory and
// the state dir, each also relative to its file system.
func (r *Sessions) masker(sb sandbox.Sandbox) *masking.Masker {
	var pairs []masking.Pair
	for _, m := range sb.Mounts() {
		pairs = append(pairs, masking.Pair{Host: m.Host, Virtual: m.Virtual})
	}
	if r.stateDir != "" {
		pairs = append(pairs,
			masking.Pair{Host: filepath.Join(r.stateDir, "threads", sb.Thread(), "user-data"), Virtual: sandbox.UserDataDir},
			masking.Pair{Host: r.stateDir, Virtual: StateDirMask},
		)
	}
	return masking.New(append(pairs, r.mounts.Pairs(pairs)...)...)
}

// StateDirMask is what the agent sees in place of the state dir.
const StateDirMask = "/sandbox-mcp-state"
