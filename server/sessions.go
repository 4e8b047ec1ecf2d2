package server

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/masking"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// Sessions binds MCP sessions to threads and their sandboxes. A session's
// sandbox is acquired on its first tool call and released when the session
// ends; the thread's files stay, but for an anonymous one (see End).
type Sessions struct {
	provider sandbox.Provider
	stateDir string
	base     *masking.Masker // masks the state dir, for errors before a sandbox exists
	// mounts is the mount table at start-up: a sandbox's mountinfo names
	// host dirs relative to their file system, and those forms are masked
	// too.
	mounts *masking.Mounts

	// removeAnonymous: an anonymous session's thread (HTTP without
	// X-Thread-ID) is removed when the session ends: no one can name it
	// again (SPEC §10; http.anonymous_threads: keep turns it off).
	removeAnonymous bool
	logger          *slog.Logger

	mu       sync.Mutex
	sessions map[string]*binding
	threads  map[string]*threadUse // by thread key, while a session holds it
}

// threadUse is what the sessions holding a thread know of it.
type threadUse struct {
	sessions int  // sessions bound to it
	named    bool // some session named it (X-Thread-ID): it is not anonymous
	existed  bool // its directory was there before an anonymous session made it
}

// ThreadRef names a session's thread: ID as the client named it, Key as the
// provider knows it (the ID, namespaced by the client's token when tokens
// are configured).
type ThreadRef struct {
	ID  string
	Key string
	// Anonymous: the session's own thread (its id is the session id), not
	// one the client named.
	Anonymous bool
}

// binding is one session's thread and sandbox.
type binding struct {
	thread ThreadRef
	ctx    context.Context // cancelled when the session ends: its calls stop
	cancel context.CancelFunc
	ready  chan struct{}  // closed once sb/mask/err are set
	calls  sync.WaitGroup // tool calls using the binding
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
		threads:  map[string]*threadUse{},
		logger:   slog.New(slog.DiscardHandler),
	}
}

// Get returns the session's binding, acquiring the thread's sandbox on the
// session's first call. A session keeps the thread of its first call.
func (r *Sessions) Get(ctx context.Context, session string, thread ThreadRef) (*binding, error) {
	return r.get(ctx, session, thread, false)
}

// Call is Get for a tool call: the session's end waits for the call (done)
// before it releases the sandbox and removes an anonymous thread.
func (r *Sessions) Call(ctx context.Context, session string, thread ThreadRef) (b *binding, done func(), err error) {
	b, err = r.get(ctx, session, thread, true)
	if err != nil {
		return nil, nil, err
	}
	return b, b.calls.Done, nil
}

func (r *Sessions) get(ctx context.Context, session string, thread ThreadRef, call bool) (*binding, error) {
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
		use := r.threads[thread.Key]
		if use == nil {
			use = &threadUse{}
			r.threads[thread.Key] = use
			if thread.Anonymous && r.stateDir != "" {
				// A thread directory there already is not this session's
				// own: it is never removed for it.
				_, err := os.Lstat(filepath.Join(r.stateDir, "threads", filepath.FromSlash(thread.Key)))
				use.existed = !errors.Is(err, fs.ErrNotExist)
			}
		}
		use.sessions++
		use.named = use.named || !thread.Anonymous
		if call {
			b.calls.Add(1) // before the map says b exists to End
		}
		r.mu.Unlock()
		b.sb, b.err = r.provider.Acquire(ctx, thread.Key)
		if b.err == nil {
			b.mask = r.masker(b.sb)
		} else {
			r.mu.Lock()
			if r.sessions[session] == b {
				delete(r.sessions, session) // the next call tries again
			}
			r.dropUse(thread.Key)
			r.mu.Unlock()
		}
		close(b.ready)
		if b.err != nil && call {
			b.calls.Done()
		}
		return b, b.err
	}
	if call {
		b.calls.Add(1) // under r.mu: End, which removes b first, waits for it
	}
	r.mu.Unlock()
	select {
	case <-b.ready:
		if b.err != nil && call {
			b.calls.Done()
		}
		return b, b.err
	case <-ctx.Done():
		if call {
			b.calls.Done()
		}
		return nil, ctx.Err()
	}
}

// dropUse forgets one session of the thread; it reports whether that was
// the last and what was known of the thread. r.mu is held.
func (r *Sessions) dropUse(key string) (last bool, use threadUse) {
	u := r.threads[key]
	if u == nil {
		return false, threadUse{}
	}
	if u.sessions--; u.sessions > 0 {
		return false, *u
	}
	delete(r.threads, key)
	return true, *u
}

// callsStopWait bounds how long a session's end waits for its calls,
// cancelled, to return.
const callsStopWait = 10 * time.Second

// End stops the session's calls, waits for them, releases its sandbox and,
// for an anonymous thread no one else holds or named, removes the
// thread's files.
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
	if b.err != nil {
		return // Get already forgot it
	}
	stopped := make(chan struct{})
	go func() { b.calls.Wait(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(callsStopWait):
		r.logger.Warn("a session's calls did not stop; its thread is kept", "thread", b.thread.ID)
	}
	r.provider.Release(b.thread.Key)
	r.mu.Lock()
	last, use := r.dropUse(b.thread.Key)
	r.mu.Unlock()
	select {
	case <-stopped:
	default:
		return
	}
	if !r.removeAnonymous || !b.thread.Anonymous || !last || use.named || use.existed {
		return
	}
	if err := r.removeThread(b.thread.Key); err != nil {
		r.logger.Warn("anonymous thread not removed", "thread", b.thread.ID, "err", err)
	}
}

// removeThread removes threads/<key> under the state dir, confined there
// (os.Root: no symlink leads out).
func (r *Sessions) removeThread(key string) error {
	if r.stateDir == "" {
		return nil
	}
	if err := sandbox.ValidThreadKey(key); err != nil {
		return err
	}
	root, err := os.OpenRoot(filepath.Join(r.stateDir, "threads"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer root.Close()
	return root.RemoveAll(filepath.FromSlash(key))
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
