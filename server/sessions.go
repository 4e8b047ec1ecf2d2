package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path"
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
	stateDir string          // masked as a whole (StateDirMask); its layout is the provider's
	base     *masking.Masker // masks the state dir, for errors before a sandbox exists
	// mounts is the mount table at start-up: a sandbox's mountinfo names
	// host dirs relative to their file system, and those forms are masked
	// too.
	mounts  *masking.Mounts
	hidden  []masking.Pair // host paths in sandboxes that are no mount (NewSessions)
	secrets []string       // values no result shows (NewSessions)

	// removeAnonymous: an anonymous session's thread (HTTP without
	// X-Thread-ID) is removed when the session ends: no one can name it
	// again (SPEC §10; http.anonymous_threads: keep turns it off).
	removeAnonymous bool
	logger          *slog.Logger

	// threadsPerTenant caps the threads a tenant (a token) holds live at
	// once, sessions and stateless leases together (SPEC §16,
	// limits.threads_per_token); 0: no cap. At the cap, reclaim is asked to
	// end one of the tenant's idle leases before the new thread is refused.
	threadsPerTenant int
	reclaim          func(tenant string) bool
	// countCalls: the tool calls using each thread are counted, for the
	// metrics' active sandboxes (counts); off without metrics.
	countCalls bool
	// threadGone, if set, is told of a thread removed for good (an
	// anonymous one, with its session): what it had goes with it (its
	// previews).
	threadGone func(key string)
	// threadReleased, if set, is told when the last user of a thread
	// bound here lets it go (its sandbox is the provider's to close).
	threadReleased func(key string)

	mu       sync.Mutex
	sessions map[string]*binding
	threads  map[string]*threadUse // by thread key, while a session holds it
	tenants  map[string]int        // live threads by tenant
	// ended are sessions that ended lately, by when: a call that was on its
	// way when its session ended (waiting for a call slot) must not make
	// the session a binding again, which nothing would ever end.
	ended     map[string]time.Time
	lastPrune time.Time
	closed    chan struct{} // closed by EndAll: lingering threads let go
	closeOnce sync.Once
	// reclaiming counts, by tenant, the idle leases being ended to make
	// room under the cap; reclaimed is closed (and made anew) as each is
	// done, for the calls that found no idle lease left meanwhile.
	reclaiming map[string]int
	reclaimed  chan struct{}
}

// reclaimStart says one of the tenant's idle leases is about to be ended
// for room under its cap; reclaimDone that it was (or was not after all).
func (r *Sessions) reclaimStart(tenant string) {
	r.mu.Lock()
	r.reclaiming[tenant]++
	r.mu.Unlock()
}

func (r *Sessions) reclaimDone(tenant string) {
	r.mu.Lock()
	if r.reclaiming[tenant]--; r.reclaiming[tenant] <= 0 {
		delete(r.reclaiming, tenant)
	}
	close(r.reclaimed)
	r.reclaimed = make(chan struct{})
	r.mu.Unlock()
}

// endedKeep is how long an ended session's id is refused: longer than any
// call can wait between its session's check and its binding.
const endedKeep = time.Minute

// errSessionEnded answers a call that arrives after its session ended.
var errSessionEnded = errors.New("the session has ended")

// lingerPoll is how often a thread kept for its running jobs, after its
// last session ended, asks whether any still runs.
var lingerPoll = 2 * time.Second

// threadUse is what the sessions holding a thread know of it.
type threadUse struct {
	sessions int    // sessions bound to it
	tenant   string // whose thread it is (a key is one tenant's: see ThreadRef)
	named    bool   // some session named it (X-Thread-ID): it is not anonymous
	existed  bool   // its files were there before an anonymous session made it (Provider.Exists)
	calls    int    // tool calls using it now (only with Sessions.countCalls)
}

// ErrThreadLimit refuses a new thread of a tenant that holds
// limits.threads_per_token live ones.
var ErrThreadLimit = errors.New("too many threads")

// ThreadRef names a session's thread: ID as the client named it, Key as the
// provider knows it (the ID, namespaced by the client's token when tokens
// are configured).
type ThreadRef struct {
	ID  string
	Key string
	// Anonymous: the session's own thread (its id is the session id), not
	// one the client named.
	Anonymous bool
	// Tenant is whose thread it is: the credential of the request (a
	// token's hash; "" without tokens, and on stdio). The tenant's live
	// threads are capped (Sessions.threadsPerTenant).
	Tenant string
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

// NewSessions returns an empty registry. hidden are host paths bound into
// sandboxes that are not a mount of the agent's (the server's binary, run
// there as the supervisor), masked with the rest.
//
// secrets are values no result may show (masking.Masker.Hiding): the
// headers the egress proxy adds to the sandboxes' requests.
func NewSessions(p sandbox.Provider, stateDir string, secrets []string, hidden ...masking.Pair) *Sessions {
	mounts, _ := masking.ReadMounts() // none to read: no such forms to mask
	state := append([]masking.Pair{{Host: stateDir, Virtual: StateDirMask}}, hidden...)
	return &Sessions{
		provider: p,
		stateDir: stateDir,
		hidden:   hidden,
		base:     masking.New(append(state, mounts.Pairs(state)...)...).Hiding(secrets...),
		secrets:  secrets,
		mounts:   mounts,
		sessions: map[string]*binding{},
		threads:  map[string]*threadUse{},
		tenants:  map[string]int{},
		ended:    map[string]time.Time{},
		closed:   make(chan struct{}),

		reclaiming: map[string]int{},
		reclaimed:  make(chan struct{}),
		logger:     slog.New(slog.DiscardHandler),
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
	if !r.countCalls {
		return b, b.calls.Done, nil
	}
	r.mu.Lock()
	use := r.threads[b.thread.Key]
	if use != nil {
		use.calls++
	}
	r.mu.Unlock()
	return b, func() {
		if use != nil {
			r.mu.Lock()
			use.calls--
			r.mu.Unlock()
		}
		b.calls.Done()
	}, nil
}

// counts says how many threads have a sandbox held here (bound: by a
// session, a stateless lease, or the jobs it runs after its session), and
// how many of them a tool call uses now (active; 0 without countCalls).
func (r *Sessions) counts() (bound, active int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, u := range r.threads {
		if u.calls > 0 {
			active++
		}
	}
	return len(r.threads), active
}

func (r *Sessions) get(ctx context.Context, session string, thread ThreadRef, call bool) (*binding, error) {
	for {
		b, again, err := r.getOnce(ctx, session, thread, call)
		if !again {
			return b, err
		}
	}
}

// getOnce is get's one try; again asks for another (room was made under
// the tenant's cap, or is being made).
func (r *Sessions) getOnce(ctx context.Context, session string, thread ThreadRef, call bool) (_ *binding, again bool, _ error) {
	r.mu.Lock()
	b := r.sessions[session]
	if b == nil {
		if _, dead := r.ended[session]; dead {
			r.mu.Unlock()
			return nil, false, errSessionEnded
		}
		if err := sandbox.ValidThreadID(thread.ID); err != nil {
			r.mu.Unlock()
			return nil, false, err
		}
		use := r.threads[thread.Key]
		if use == nil && r.threadsPerTenant > 0 && r.tenants[thread.Tenant] >= r.threadsPerTenant {
			// A new thread past the tenant's cap: one of its idle leases
			// makes room, or the call is refused (never another tenant's).
			r.mu.Unlock()
			if r.reclaim != nil && r.reclaim(thread.Tenant) {
				return nil, true, nil
			}
			// Another call may be ending the tenant's last idle lease right
			// now, for a thread of its own: wait for it, then look again,
			// rather than refuse while room is being made.
			r.mu.Lock()
			pending, done := r.reclaiming[thread.Tenant], r.reclaimed
			r.mu.Unlock()
			if pending > 0 {
				select {
				case <-done:
					return nil, true, nil
				case <-ctx.Done():
					return nil, false, ctx.Err()
				}
			}
			return nil, false, fmt.Errorf("%w: this token already has %d threads with a live sandbox (limits.threads_per_token); "+
				"end a session, or wait until an idle thread is released, then try again", ErrThreadLimit, r.threadsPerTenant)
		}
		b = &binding{thread: thread, ready: make(chan struct{})}
		b.ctx, b.cancel = context.WithCancel(context.Background())
		r.sessions[session] = b
		fresh := use == nil
		if fresh {
			use = &threadUse{tenant: thread.Tenant}
			r.threads[thread.Key] = use
			r.tenants[thread.Tenant]++
		}
		use.sessions++
		use.named = use.named || !thread.Anonymous
		if call {
			b.calls.Add(1) // before the map says b exists to End
		}
		r.mu.Unlock()
		if fresh && thread.Anonymous && r.removeAnonymous {
			// Files there already are not this session's own: they are
			// never removed for it (an error asking says they may be).
			// The answer outlives this call, so this call's cancel does not
			// cut the question short (an API client would answer an error:
			// the thread would be kept for good).
			ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			existed, err := r.provider.Exists(ectx, thread.Key)
			cancel()
			r.mu.Lock()
			use.existed = existed || err != nil
			r.mu.Unlock()
		}
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
		return b, false, b.err
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
		return b, false, b.err
	case <-ctx.Done():
		if call {
			b.calls.Done()
		}
		return nil, false, ctx.Err()
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
	if r.tenants[u.tenant]--; r.tenants[u.tenant] <= 0 {
		delete(r.tenants, u.tenant)
	}
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
	now := time.Now()
	r.ended[session] = now
	if now.Sub(r.lastPrune) > endedKeep/4 {
		r.lastPrune = now
		for id, at := range r.ended {
			if now.Sub(at) > endedKeep {
				delete(r.ended, id)
			}
		}
	}
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
	callsStopped := false
	select {
	case <-stopped:
		callsStopped = true
	default:
	}
	// An anonymous thread no one else holds or named can never be named
	// again: its processes end with it (SPEC §16), whatever is kept of its
	// files — a job left running would be one nobody can see or end.
	r.mu.Lock()
	u := r.threads[b.thread.Key]
	gone := b.thread.Anonymous && u != nil && u.sessions == 1 && !u.named && !u.existed
	r.mu.Unlock()
	if gone && callsStopped {
		r.endJobs(b)
	} else if callsStopped && r.jobsRunningOf(b) {
		// A running job keeps its sandbox live after the session (SPEC
		// §15), and so the thread counts as live for its tenant's cap
		// until the job ends: a token cannot make more live sandboxes by
		// ending sessions that left jobs behind (SPEC §16).
		go r.lingerJobs(b)
		return
	}
	r.release(b, callsStopped)
}

// release gives the binding's use of its thread back: the provider's, and
// the registry's (with its tenant's count); an anonymous thread that was
// its last user's, once its calls have stopped, is removed.
func (r *Sessions) release(b *binding, callsStopped bool) {
	r.provider.Release(b.thread.Key)
	r.mu.Lock()
	last, use := r.dropUse(b.thread.Key)
	r.mu.Unlock()
	if last && r.threadReleased != nil {
		r.threadReleased(b.thread.Key)
	}
	if !callsStopped || !r.removeAnonymous || !b.thread.Anonymous || !last || use.named || use.existed {
		return
	}
	// Its sandbox and files go now, not after an idle time (a container or
	// Pod of a thread no one can name would only wait to be reaped).
	if r.threadGone != nil {
		r.threadGone(b.thread.Key)
	}
	ctx, cancel := context.WithTimeout(context.Background(), discardWait)
	defer cancel()
	if err := r.provider.Discard(ctx, b.thread.Key); err != nil {
		r.logger.Warn("anonymous thread not removed", "thread", b.thread.ID, "err", err)
	}
}

// lingerJobs holds an ended session's thread, counted for its tenant,
// until no job of its sandbox runs (or the registry closes), then lets it
// go as the session's end would have.
func (r *Sessions) lingerJobs(b *binding) {
	t := time.NewTicker(lingerPoll)
	defer t.Stop()
	for {
		select {
		case <-r.closed:
		case <-t.C:
			if r.jobsRunningOf(b) {
				continue
			}
		}
		r.release(b, true)
		return
	}
}

// jobsRunning says whether the sandbox of a session runs a job.
func (r *Sessions) jobsRunning(session string) bool {
	r.mu.Lock()
	b := r.sessions[session]
	r.mu.Unlock()
	if b == nil {
		return false
	}
	return r.jobsRunningOf(b)
}

// jobsRunningOf says whether b's sandbox runs a job (an error asking says
// no: a sandbox whose supervisor does not answer runs nothing worth
// keeping it for).
func (r *Sessions) jobsRunningOf(b *binding) bool {
	select {
	case <-b.ready:
	default:
		return true // still being made: in use
	}
	if b.err != nil {
		return false
	}
	j, ok := b.sb.(sandbox.Jobs)
	if !ok {
		return false
	}
	// A box that does not run (idled out) runs no job: it is not made
	// again only to ask.
	ctx, cancel := context.WithTimeout(sandbox.IfRunning(context.Background()), 5*time.Second)
	defer cancel()
	list, err := j.Jobs(ctx)
	if err != nil {
		return false
	}
	for _, info := range list {
		if info.State == sandbox.JobRunning {
			return true
		}
	}
	return false
}

// discardWait bounds the end of an anonymous thread's jobs and sandbox.
const discardWait = 30 * time.Second

// endJobs kills every running job of the binding's sandbox (its process
// group, with KILL).
func (r *Sessions) endJobs(b *binding) {
	j, ok := b.sb.(sandbox.Jobs)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), discardWait)
	defer cancel()
	if err := sandbox.EndJobs(ctx, j); err != nil {
		r.logger.Warn("anonymous thread's jobs not ended", "thread", b.thread.ID, "err", err)
	}
}

// EndAll releases every session's sandbox, and every thread kept for its
// jobs.
func (r *Sessions) EndAll() {
	r.closeOnce.Do(func() { close(r.closed) })
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

// masker masks the sandbox's host directories, the directory that holds
// its user-data mounts and the state dir, each also relative to its file
// system.
func (r *Sessions) masker(sb sandbox.Sandbox) *masking.Masker {
	var pairs []masking.Pair
	for _, m := range sb.Mounts() {
		pairs = append(pairs, masking.Pair{Host: m.Host, Virtual: m.Virtual})
	}
	if dir := userDataHost(sb.Mounts()); dir != "" {
		pairs = append(pairs, masking.Pair{Host: dir, Virtual: sandbox.UserDataDir})
	}
	if r.stateDir != "" {
		pairs = append(pairs, masking.Pair{Host: r.stateDir, Virtual: StateDirMask})
	}
	pairs = append(pairs, r.hidden...)
	return masking.New(append(pairs, r.mounts.Pairs(pairs)...)...).Hiding(r.secrets...)
}

// userDataHost is the host directory shown as /mnt/user-data, as the
// sandbox's mounts say: the one parent of its mounts at
// /mnt/user-data/<name> from <dir>/<name> ("" when they have none, or
// not one).
func userDataHost(mounts []sandbox.Mount) string {
	dir := ""
	for _, m := range mounts {
		if m.Host == "" || path.Dir(m.Virtual) != sandbox.UserDataDir {
			continue
		}
		parent := filepath.Dir(m.Host)
		if filepath.Base(m.Host) != path.Base(m.Virtual) || dir != "" && dir != parent {
			return ""
		}
		dir = parent
	}
	return dir
}

// StateDirMask is what the agent sees in place of the state dir.
const StateDirMask = "/sandbox-mcp-state"
