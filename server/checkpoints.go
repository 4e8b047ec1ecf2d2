package server

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/checkpoint"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/tools"
)

// CheckpointsConfig is the checkpoints section of the configuration
// (SPEC §18), declared as HTTPConfig's keys are.
type CheckpointsConfig struct {
	// Auto saves a checkpoint before every call that may change files
	// (tools.Tool.ChangesFiles) when anything changed since the last.
	Auto *bool `yaml:"auto" default:"true"`
	// MaxBytes bounds each thread's checkpoints (default 1 GiB): after a
	// save the oldest are pruned until the store holds at most this many
	// bytes (the newest is always kept); 0: no bound.
	MaxBytes *int64 `yaml:"max_bytes" default:"1073741824"`
}

// Validate fills the defaults and refuses a negative bound, naming its key.
func (c *CheckpointsConfig) Validate() error { return settle("checkpoints", c) }

// autoSaveTimeout bounds one automatic checkpoint.
const autoSaveTimeout = 2 * time.Minute

// autoCheckpoints takes the automatic checkpoints (SPEC §18: "before every
// call that may change files, when anything changed since the last"), and
// keeps them off the calls' time. Per thread, the server knows what may
// have changed its files since its last save:
//
//   - a call that may change files ended (dirty): a save starts at once,
//     in the background, so that the next call usually finds it done and
//     nothing left to save — the checkpoint of the state after call N is
//     the one before call N+1;
//   - a job may run (jobs): it writes whenever it likes, so every call
//     that may change files saves first (cheap: the engine reads only what
//     changed) until no job runs any more;
//   - this process never saved the thread (saved false): another process
//     or a person may have changed its files since, so the first call
//     saves first.
//
// Before a call that may change files, the server waits for the
// thread's save under way and saves then only when one of these says so.
// What the server cannot see — a person editing the files between two
// calls of a thread this process already saved, another server process
// on the same thread — waits for the next save.
//
// A failed automatic checkpoint never fails the call: it is logged (a
// warning the first time for a thread, then at debug level), and the next
// call tries again.
type autoCheckpoints struct {
	on       bool
	maxBytes int64
	log      *slog.Logger
	stop     context.Context // the server's: ends background saves at shutdown

	mu      sync.Mutex
	threads map[string]*threadCheckpoints // by thread key
}

// threadCheckpoints is one thread's state.
type threadCheckpoints struct {
	sem chan struct{} // one save at a time: held by a save, sync or background
	// writes: the thread's calls that may change files hold it shared, an
	// Exclusive one (restore) alone (gate). In this process only: a
	// restore from the command line, or from another server on the same
	// state dir, is ordered with writes by the per-file locks alone.
	writes sync.RWMutex

	mu      sync.Mutex
	saved   bool          // this process saved the thread (since it was bound)
	dirty   bool          // a call that may change files ended since the last save began
	jobs    bool          // a job may run
	pending bool          // a background save is started or queued
	after   string        // what the dirty state is "after" (the last call ended here); "": unknown
	bg      chan struct{} // closed when the background save started last ends
	warned  bool          // a failure was logged as a warning
}

func newAutoCheckpoints(cfg CheckpointsConfig, log *slog.Logger, stop context.Context) *autoCheckpoints {
	cfg.Validate()
	return &autoCheckpoints{on: *cfg.Auto, maxBytes: *cfg.MaxBytes, log: log, stop: stop, threads: map[string]*threadCheckpoints{}}
}

func (a *autoCheckpoints) thread(key string) *threadCheckpoints {
	a.mu.Lock()
	defer a.mu.Unlock()
	t := a.threads[key]
	if t == nil {
		t = &threadCheckpoints{sem: make(chan struct{}, 1)}
		a.threads[key] = t
	}
	return t
}

// gate orders the call with the thread's other calls that may change
// files (threadCheckpoints.writes), whether or not automatic checkpoints
// are on; the returned func ends its hold. An Exclusive call waits for
// the calls in flight (a bash command may run for minutes) as long as its
// ctx lets it: the error then says what it waited for.
func (a *autoCheckpoints) gate(ctx context.Context, c *call) (func(), error) {
	if !c.tool.ChangesFiles || c.b == nil || c.err != nil {
		return func() {}, nil
	}
	t := a.thread(c.b.thread.Key)
	if !c.tool.Exclusive {
		t.writes.RLock()
		return t.writes.RUnlock, nil
	}
	got := make(chan struct{})
	go func() { t.writes.Lock(); close(got) }()
	select {
	case <-got:
		return t.writes.Unlock, nil
	case <-ctx.Done():
		go func() { <-got; t.writes.Unlock() }()
		return nil, fmt.Errorf("%s waited for the thread's calls that may change files (write_file, str_replace, bash) to end: %w", c.tool.Def.Name, context.Cause(ctx))
	}
}

// drop forgets a thread no one holds any more: its sandbox (and the
// store's stat cache with it) is gone, and what happens to its files
// until it is bound again is not known here.
func (a *autoCheckpoints) drop(key string) {
	a.mu.Lock()
	delete(a.threads, key)
	a.mu.Unlock()
}

// takes says whether the call's tool and sandbox get automatic checkpoints.
func (a *autoCheckpoints) takes(c *call) (tools.Checkpointer, bool) {
	if !a.on || !c.tool.ChangesFiles || c.b == nil || c.err != nil {
		return nil, false
	}
	cp, ok := c.b.sb.(tools.Checkpointer)
	return cp, ok
}

// before saves a checkpoint before the call when anything may have
// changed since the last: it waits for the thread's save under way, then
// saves if the thread is dirty, may run a job, or was never saved here.
func (a *autoCheckpoints) before(ctx context.Context, c *call) {
	cp, ok := a.takes(c)
	if !ok {
		return
	}
	t := a.thread(c.b.thread.Key)
	select {
	case t.sem <- struct{}{}:
	case <-ctx.Done():
		return
	}
	defer func() { <-t.sem }()
	t.mu.Lock()
	need, jobs := !t.saved || t.dirty || t.jobs, t.jobs
	// The state saved now is the one the last call left, when it ended
	// here and nothing else may have written since: named after that call,
	// whether its background save or this call gets here first.
	message := "before " + callSummary(c)
	if t.after != "" && !t.jobs {
		message = t.after
	}
	t.dirty, t.after = false, ""
	t.mu.Unlock()
	if !need {
		return
	}
	if jobs && !jobsRun(ctx, c.b.sb) {
		t.mu.Lock()
		t.jobs = false // ended: this save holds what they wrote
		t.mu.Unlock()
	}
	a.save(ctx, t, cp, c.b.thread.ID, message)
}

// after notes that the call may have changed files (and started a job),
// and starts the save that holds its changes, in the background: the
// next call's before finds it done.
func (a *autoCheckpoints) after(c *call, res *tools.Result) {
	cp, ok := a.takes(c)
	if !ok {
		return
	}
	t := a.thread(c.b.thread.Key)
	summary := "after " + callSummary(c)
	t.mu.Lock()
	t.dirty, t.after = true, summary
	if startedJob(c, res) || c.tool.Def.Name == "bash_input" {
		t.jobs = true
	}
	start := !t.pending
	t.pending = true
	var bg chan struct{}
	if start {
		bg = make(chan struct{})
		t.bg = bg
	}
	t.mu.Unlock()
	if !start {
		return
	}
	// The save counts as a call of the session: its end (and an
	// anonymous thread's removal) waits for it, and cancels it.
	b := c.b
	b.calls.Add(1)
	go func() {
		defer b.calls.Done()
		defer close(bg)
		ctx, cancel := context.WithTimeout(b.ctx, autoSaveTimeout)
		defer cancel()
		defer context.AfterFunc(a.stop, cancel)()
		select {
		case t.sem <- struct{}{}:
		case <-ctx.Done():
			t.mu.Lock()
			t.pending = false
			t.mu.Unlock()
			return
		}
		defer func() { <-t.sem }()
		t.mu.Lock()
		t.pending = false
		dirty, message := t.dirty, t.after
		t.dirty, t.after = false, ""
		t.mu.Unlock()
		if message == "" {
			message = summary
		}
		if dirty {
			a.save(ctx, t, cp, b.thread.ID, message)
		}
	}()
}

// settle waits, before a checkpoint tool runs (tools.Tool.UsesCheckpoints),
// for the thread's background save: what it lists, diffs or restores
// then counts the last call's changes.
func (a *autoCheckpoints) settle(ctx context.Context, c *call) {
	if !a.on || !c.tool.UsesCheckpoints || c.b == nil || c.err != nil {
		return
	}
	a.mu.Lock()
	t := a.threads[c.b.thread.Key]
	a.mu.Unlock()
	if t == nil {
		return
	}
	t.mu.Lock()
	bg := t.bg
	t.mu.Unlock()
	if bg != nil {
		select {
		case <-bg:
		case <-ctx.Done():
		}
	}
}

// save takes one automatic checkpoint; a failure leaves the thread dirty
// for the next call to try again.
func (a *autoCheckpoints) save(ctx context.Context, t *threadCheckpoints, cp tools.Checkpointer, thread, message string) {
	res, err := cp.SaveCheckpoint(ctx, checkpoint.SaveOptions{Message: message, Auto: true}, a.maxBytes)
	t.mu.Lock()
	defer t.mu.Unlock()
	if err != nil && res.Info.ID == "" {
		t.dirty = true // and the next save is named after its own call
		level := slog.LevelDebug
		if !t.warned && ctx.Err() == nil {
			level, t.warned = slog.LevelWarn, true
		}
		a.log.Log(ctx, level, "automatic checkpoint failed; the call goes on", "thread", thread, "err", err)
		return
	}
	if err != nil {
		a.log.Warn("automatic checkpoint saved, prune failed", "thread", thread, "checkpoint", res.Info.ID, "err", err)
	}
	t.saved = true
	if res.Saved {
		a.log.Debug("automatic checkpoint", "thread", thread, "checkpoint", res.Info.ID, "changed", res.Info.Changed())
	}
}

// jobsRun says whether a job of the sandbox runs (an error asking says
// yes: the save is taken anyway, and the next call asks again).
func jobsRun(ctx context.Context, sb sandbox.Sandbox) bool {
	j, ok := sb.(sandbox.Jobs)
	if !ok {
		return false
	}
	list, err := j.Jobs(ctx)
	if err != nil {
		return true
	}
	for _, info := range list {
		if info.State == sandbox.JobRunning {
			return true
		}
	}
	return false
}

// callSummary names a call in a checkpoint's message: the tool and what it
// works on (bash's command, cut to one short line; a file's path).
func callSummary(c *call) string {
	args := c.req.GetArguments()
	for _, k := range []string{"command", "path", "job", "id"} {
		if v, ok := args[k].(string); ok && v != "" {
			v = strings.Join(strings.Fields(v), " ")
			if len(v) > 80 {
				v = strings.ToValidUTF8(v[:80], "") + "…"
			}
			return fmt.Sprintf("%s: %s", c.tool.Def.Name, v)
		}
	}
	return c.tool.Def.Name
}
