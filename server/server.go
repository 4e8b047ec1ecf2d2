package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"
	"go.opentelemetry.io/otel/trace"

	"github.com/sandbox-mcp/sandbox-mcp/audit"
	"github.com/sandbox-mcp/sandbox-mcp/masking"
	"github.com/sandbox-mcp/sandbox-mcp/metrics"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/terminal"
	"github.com/sandbox-mcp/sandbox-mcp/tools"
)

// Config is what the server is made of.
type Config struct {
	Provider sandbox.Provider
	Audit    audit.Sink
	Logger   *slog.Logger
	Limits   tools.Limits
	// StateDir is masked, whole, out of what the agent sees; what is in it
	// is the provider's.
	StateDir string
	Version  string
	// MaxStdioLine caps one JSON-RPC message on stdin (default 128 MiB: a
	// write_file of the largest file an edit takes, 64 MiB, escaped).
	MaxStdioLine int
	// HTTP: the server serves HTTP (ServeHTTP) with these settings; nil:
	// stdio only.
	HTTP *HTTPConfig
	// Bounds bound every tenant of the HTTP server (limits section).
	Bounds Bounds
	// Skills: a skills dir is shown read-only at /mnt/skills (the
	// instructions say so only then).
	Skills bool
	// Hidden are host paths that a sandbox may show and that are not a
	// mount of the agent's — the binary bound into it as its supervisor —
	// with what the agent sees instead (SPEC §16: masked like the rest).
	Hidden []masking.Pair
	// Secrets are values no result shows, wherever they come from (a
	// server that echoes a header): the egress proxy's injected headers
	// (SPEC §17).
	Secrets []string
	// Metrics, if set, is told of every tool call and asked at each scrape
	// what the server holds (metrics.go); nil: no metrics, and nothing on
	// the call path but a nil check.
	Metrics *metrics.Metrics
	// Network is the sandboxes' network policy, as sandbox_info tells it.
	Network tools.Network
	// Tracer, if set, makes a span of every tool call, a child of the
	// caller's span its request names, and its context carries the span
	// to the sandbox (traces.go); nil: no traces, and nothing on the call
	// path but a nil check.
	Tracer trace.TracerProvider
	// Checkpoints: the automatic checkpoints and the bound of every
	// thread's (SPEC §18; checkpoints.go). Unset: the defaults.
	Checkpoints CheckpointsConfig
}

// Server is the MCP server.
type Server struct {
	cfg       Config
	http      *httpSettings // nil: no HTTP
	stateless bool          // MCP 2026-07-28 served (over HTTP): HTTPConfig.Stateless
	mcp       *mcpserver.MCPServer
	sessions  *Sessions
	toolOrder map[string]int // each tool's place in tools.All(): tools/list's order

	owners    sync.Map          // session id -> credential it was made with (HTTP)
	sessionN  sessionCount      // sessions registered or being made, in all and per credential
	leases    leases            // the sandboxes of stateless requests (HTTP, 2026-07-28)
	listeners listeners         // their subscriptions/listen streams, by thread
	previews  *previews         // the sandboxes' exposed ports (expose_port)
	tasks     taskJobs          // what MCP tasks are made of (tasks.go)
	tracing   *tracing          // the calls' spans; nil: no traces
	terminals *terminal.Screens // the screens of terminal jobs (bash tty: true)
	auto      *autoCheckpoints  // the automatic checkpoints (checkpoints.go)

	inflight  atomic.Int64    // tool calls running
	open      atomic.Int64    // sessions registered (metrics)
	calls     *fairBudget     // caps the tool calls running at once (HTTP); nil: no cap
	stopCalls context.Context // cancelled to stop every call at once (shutdown)
	stopAll   context.CancelFunc
	// forks: the threads this process made or found to be a fork, by
	// key, and their origin ("SRC@ID" by keys): X-Thread-Fork (fork.go).
	forks sync.Map
}

// New builds the server and registers every tool.
func New(cfg Config) *Server {
	if cfg.MaxStdioLine <= 0 {
		cfg.MaxStdioLine = 128 << 20
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Audit == nil {
		cfg.Audit = audit.Discard{}
	}
	s := &Server{cfg: cfg, sessions: NewSessions(cfg.Provider, cfg.StateDir, cfg.Secrets, cfg.Hidden...), tasks: jobTasks{}}
	s.sessions.logger = cfg.Logger
	s.previews = newPreviews(cfg.Logger)
	s.terminals = terminal.NewScreens(terminal.DefaultScreens, terminal.DefaultCells)
	s.sessions.threadGone = s.previews.dropThread
	if cfg.HTTP != nil {
		s.http = newHTTPSettings(*cfg.HTTP, cfg.Bounds, cfg.Logger)
		s.stateless = *s.http.Stateless
		s.calls = newFairBudget(int64(s.http.MaxCalls), len(s.http.tokens))
		s.sessions.removeAnonymous = s.http.AnonymousThreads != "keep"
		s.sessions.threadsPerTenant = s.http.threadsPerToken
		s.sessions.reclaim = s.reclaimLease
	}
	s.sessions.countCalls = cfg.Metrics != nil
	cfg.Metrics.Observe(s.metricsState)
	s.stopCalls, s.stopAll = context.WithCancel(context.Background())
	s.auto = newAutoCheckpoints(cfg.Checkpoints, cfg.Logger, s.stopCalls)
	s.sessions.threadReleased = s.auto.drop
	hooks := &mcpserver.Hooks{}
	if cfg.Tracer != nil {
		s.tracing = newTracing(cfg.Tracer, cfg.Version, hooks)
	}
	// A session's end (stdin closed, DELETE, SSE disconnect, idle TTL)
	// stops its calls and releases its sandbox; the thread's files stay,
	// but for an anonymous one's (Sessions.End).
	hooks.AddOnRegisterSession(func(ctx context.Context, cs mcpserver.ClientSession) {
		cred, _ := ctx.Value(credentialKey{}).(string)
		s.sessionN.register(ctx, cred)
		if _, again := s.owners.Swap(cs.SessionID(), cred); !again {
			s.open.Add(1)
		}
	})
	hooks.AddOnUnregisterSession(func(_ context.Context, cs mcpserver.ClientSession) {
		if cred, ok := s.owners.LoadAndDelete(cs.SessionID()); ok {
			s.open.Add(-1)
			s.sessionN.unregister(cred.(string))
		}
		s.sessions.End(cs.SessionID())
	})
	hooks.AddAfterInitialize(hideTasksFromSessions)
	instructions := "Tools work in a sandbox: files under /mnt/user-data/{workspace,uploads,outputs} " +
		"(workspace is the working directory)."
	if cfg.Skills {
		instructions = strings.TrimSuffix(instructions, ".") + ", skills read-only under /mnt/skills."
	}
	// A provider that runs no commands in its configuration: bash stays
	// listed (a call answers SPEC §12's error naming --allow-host-bash), but
	// its description and the instructions say it is off and why, so that an
	// agent does not learn it by failing.
	off := bashDisabled(cfg.Provider)
	var reason string
	if off != nil {
		reason = strings.TrimPrefix(off.Error(), sandbox.ErrBashDisabled.Error()+": ")
		instructions += " bash is off: " + reason + "."
		cfg.Logger.Info("bash is off", "reason", off.Error())
	}
	s.mcp = mcpserver.NewMCPServer("sandbox-mcp", cfg.Version,
		mcpserver.WithHooks(hooks),
		mcpserver.WithToolCapabilities(false),
		mcpserver.WithResourceCapabilities(false, true),
		mcpserver.WithInstructions(instructions),
		mcpserver.WithIcons(tools.Icon("sandbox")),
		mcpserver.WithToolFilter(s.toolsFor),
		mcpserver.WithExtensions(map[string]any{tasksExtension: map[string]any{}}),
	)
	s.toolOrder = map[string]int{}
	for i, t := range tools.All() {
		s.toolOrder[t.Def.Name] = i
		if t.RunsCommands && off != nil {
			t.Def.Description = "OFF in this server: " + reason + ". Calls answer an error saying so; " +
				"use the file tools (read_file, write_file, str_replace, ls, glob, grep) instead."
		}
		// Every tool takes the thread as an argument too, mirrored into the
		// Mcp-Param-Thread header on 2026-07-28 (x-mcp-header) so that a
		// router can see it without reading the body.
		if s.stateless {
			t.Def.InputSchema.Properties["thread"] = map[string]any{
				"type":         "string",
				"description":  "The thread (its files and sandbox) this call works in, when the " + ThreadHeader + " header does not name one.",
				"x-mcp-header": "Thread",
			}
		}
		s.mcp.AddTool(t.Def, s.handler(t))
	}
	s.registerResources(hooks)
	return s
}

// maskFacts is structured content with every string in it masked, as the
// text is: facts carry what came from the sandbox too (a job's command).
// It is the JSON a client would get, as generic values.
func maskFacts(v any, mask func(string) string) any {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	var out any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber() // numbers as they were: a size past 2^53 stays exact
	if err := dec.Decode(&out); err != nil {
		return nil
	}
	var walk func(any) any
	walk = func(v any) any {
		switch v := v.(type) {
		case string:
			return mask(v)
		case []any:
			for i := range v {
				v[i] = walk(v[i])
			}
		case map[string]any:
			for k := range v {
				v[k] = walk(v[k])
			}
		}
		return v
	}
	return walk(out)
}

// toolsFor is the tool list a request gets: in the order of tools.All()
// (mcp-go's is by name), the most used first, and — for a session (any
// revision before 2026-07-28) — without the thread argument, which there
// can only repeat the session's own thread: an agent shown it would fill
// it in, and get an error for a thread name it made up. No pagination
// limit is set: mcp-go's cursors assume a list sorted by name.
func (s *Server) toolsFor(ctx context.Context, list []mcp.Tool) []mcp.Tool {
	slices.SortStableFunc(list, func(a, b mcp.Tool) int { return s.toolOrder[a.Name] - s.toolOrder[b.Name] })
	if mcpserver.IsModernRequest(ctx) {
		return list
	}
	out := make([]mcp.Tool, len(list))
	for i, t := range list {
		if _, ok := t.InputSchema.Properties["thread"]; ok {
			props := make(map[string]any, len(t.InputSchema.Properties))
			for k, v := range t.InputSchema.Properties {
				if k != "thread" {
					props[k] = v
				}
			}
			t.InputSchema.Properties = props
		}
		out[i] = t
	}
	return out
}

// bashDisabled asks a provider that can tell (local: no isolation and no
// --allow-host-bash) why it runs no commands; nil when it runs them.
func bashDisabled(p sandbox.Provider) error {
	if b, ok := p.(interface{ BashDisabled() error }); ok {
		return b.BashDisabled()
	}
	return nil
}

// MCP is the underlying mcp-go server (for transports).
func (s *Server) MCP() *mcpserver.MCPServer { return s.mcp }

// Close stops every call, releases every session's sandbox and closes the
// audit log.
func (s *Server) Close() error {
	s.stopAll()
	s.previews.closeAll()
	s.sessions.EndAll()
	return s.cfg.Audit.Close()
}

// handler wraps a tool: bind the session's sandbox, run, mask, audit.
// Whatever happens, the client gets a tool result, never a Go error: a
// step that fails makes the error the call's result, and the call is
// audited all the same.
func (s *Server) handler(t tools.Tool) mcpserver.ToolHandlerFunc {
	counted := s.cfg.Metrics.Tool(t.Def.Name) // nil without metrics
	spanName := "tools/call " + t.Def.Name    // its calls' spans (traces.go)
	return func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		c := &call{tool: t, req: req, start: time.Now(), outcome: audit.Error}
		if counted != nil {
			defer func() { counted.Done(c.outcome, time.Since(c.start)) }()
		}
		if s.tracing != nil {
			defer s.tracing.end(ctx, c) // the request's context: what it says, and the key of its JSON-RPC id
			ctx = s.tracing.start(ctx, c, spanName)
		}
		ctx, cancel := endWithRequest(ctx)
		defer cancel()
		defer keepBody(ctx)()
		free, busy := s.claimSlot(ctx)
		defer free()
		c.fail(busy)
		s.inflight.Add(1)
		defer s.inflight.Add(-1)
		s.takeThreadArgument(ctx, c)
		s.forkThread(ctx, c)
		defer s.bindThread(ctx, c)()
		if c.span != nil {
			c.bound()
		}
		if err := s.auditBegin(c); err != nil {
			return mcp.NewToolResultError("Error: " + err.Error() + ": the call was not run"), nil
		}
		res := s.callTool(ctx, c)
		maskResult(res, c.mask)
		s.offerTask(ctx, c, res)
		if counted != nil && startedJob(c, res) {
			s.cfg.Metrics.JobStarted(c.ev.Provider)
		}
		if err := s.auditRecord(c, res); err != nil {
			return mcp.NewToolResultError("Error: " + err.Error() + ": the call ran, its result is withheld"), nil
		}
		return res.CallToolResult, nil
	}
}

// call is one tool call on its way through the handler's steps.
type call struct {
	tool  tools.Tool
	req   mcp.CallToolRequest
	start time.Time
	ev    audit.Event
	b     *binding            // the call's thread and sandbox, once bound
	mask  func(string) string // what the agent may see of a string
	err   error               // the first step that failed: the call's result, the tool not run
	// outcome is the call's, as its audit line says it once written; an
	// error until then (a call whose line cannot be written answers one).
	outcome string
	span    trace.Span // the call's span (traces.go); nil: no traces
}

// fail notes why the tool is not run, unless a step before said so.
func (c *call) fail(err error) {
	if c.err == nil {
		c.err = err
	}
}

// endWithRequest: on 2026-07-28 HTTP only the end of the HTTP request
// carrying the call stops it. mcp-go keys a stateless request's
// notifications/cancelled by its JSON-RPC id alone (no session), so any
// client could cancel any other's request 1; the closed response stream
// is the only cancellation.
func endWithRequest(ctx context.Context) (context.Context, context.CancelFunc) {
	rc, ok := ctx.Value(httpRequestCtxKey{}).(context.Context)
	if !ok || !mcpserver.IsModernRequest(ctx) {
		return ctx, func() {}
	}
	c, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(rc, cancel)
	return c, func() { stop(); cancel() }
}

// keepBody keeps the request's bytes counted until the call ends, for a
// call carried by a request whose handler already answered (SSE); it
// returns what lets them go.
func keepBody(ctx context.Context) func() {
	if hold, ok := ctx.Value(bodyHoldKey{}).(*bodyHold); ok && hold.ref() {
		return hold.unref
	}
	return func() {}
}

// claimSlot takes one of the credential's slots of the calls running at
// once (HTTP), or says the server is busy; free gives it back.
func (s *Server) claimSlot(ctx context.Context) (free func(), busy error) {
	if s.calls == nil {
		return func() {}, nil
	}
	cred, _ := ctx.Value(credentialKey{}).(string)
	if !s.calls.acquire(ctx, cred, 1) {
		return func() {}, errors.New("server busy: too many tool calls running; try again shortly")
	}
	return func() { s.calls.release(cred, 1) }, nil
}

// takeThreadArgument moves a stateless server's thread argument out of the
// call's request (threadArgument); in a session it may only repeat the
// session's thread, which the first request's header fixed.
func (s *Server) takeThreadArgument(ctx context.Context, c *call) {
	if !s.stateless {
		return
	}
	named := strings.TrimSpace(c.req.Header.Get(ThreadHeader)) != ""
	req, byArg, err := threadArgument(c.req)
	if err == nil && byArg && !named && !mcpserver.IsModernRequest(ctx) {
		err = errors.New("the thread argument names the thread of a stateless (2026-07-28) request; " +
			"this session's thread was fixed when it started (the " + ThreadHeader + " header of its first request)")
	}
	c.req = req
	c.fail(err)
}

// bindThread names the call's session and thread, and binds the session
// (or, on 2026-07-28, the thread's lease) to the thread's sandbox: c.b,
// and c.mask for what it shows. It returns what lets the binding go, once
// the call is done.
func (s *Server) bindThread(ctx context.Context, c *call) (done func()) {
	session, thread := s.identify(ctx, c.req.Header)
	c.ev = audit.Event{Session: session, Thread: thread.ID, Provider: s.cfg.Provider.Name(), Tool: c.tool.Def.Name}
	c.mask = s.sessions.base.Mask // the thread's dirs are under the state dir
	if c.err != nil {
		return func() {}
	}
	give := func() {}
	if session == "" && mcpserver.IsModernRequest(ctx) {
		// 2026-07-28 has no sessions: every request names its thread and
		// holds its sandbox for the call only.
		var err error
		if session, give, err = s.modernSession(thread); err != nil {
			c.fail(err)
			return func() {}
		}
	}
	b, release, err := s.sessions.Call(ctx, session, thread)
	if err != nil {
		c.fail(err)
		return give
	}
	c.b, c.mask = b, b.mask.Mask
	c.ev.Thread, c.ev.Sandbox = b.thread.ID, b.sb.Thread()
	return func() { release(); give() }
}

// auditBegin writes the first half of the call's audit line. The audit
// fails closed (SPEC §9): a call whose line cannot be written is not run.
func (s *Server) auditBegin(c *call) error {
	c.ev.Args = auditArgs(c.req.GetArguments(), c.mask)
	ev, err := s.cfg.Audit.Begin(c.ev)
	c.ev = ev
	if err != nil {
		s.cfg.Logger.Error("audit log cannot be written: call refused", "tool", c.tool.Def.Name, "thread", ev.Thread, "err", err)
	}
	return err
}

// callTool runs the tool in the bound sandbox, or answers why it cannot.
// The call stops when its request is cancelled, when its session ends (SSE
// does not cancel handlers on disconnect) or at shutdown.
func (s *Server) callTool(ctx context.Context, c *call) *tools.Result {
	if c.err != nil {
		return toolsFail(c.err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(c.b.ctx, cancel)()
	defer context.AfterFunc(s.stopCalls, cancel)()
	env := &tools.Env{Sandbox: c.b.sb, Limits: s.cfg.Limits, Mask: c.b.mask.Mask, Progress: s.progress(ctx, c.req), Network: s.cfg.Network, Tasks: takesTasks(ctx), Terminals: s.terminals,
		CheckpointMaxBytes: s.auto.maxBytes}
	// Previews are the HTTP server's when the call came over HTTP (the
	// guard named its URL), else stdio's loopback listener's.
	base, _ := ctx.Value(previewBaseKey{}).(string)
	env.Previews = previewScope{p: s.previews, thread: c.b.thread, sb: c.b.sb, base: base}
	ungate, err := s.auto.gate(ctx, c)
	if err != nil {
		return toolsFail(err)
	}
	s.auto.before(ctx, c)
	s.auto.settle(ctx, c)
	res := s.run(ctx, c.tool, env, c.req)
	ungate()
	s.auto.after(c, res)
	if slices.ContainsFunc(res.Changed, func(p string) bool { return sandbox.Within(p, sandbox.OutputsDir) }) {
		s.outputsChanged(ctx, c.b.thread.Key)
	}
	return res
}

// maskResult masks every string of the result: its text, and its
// structured content.
func maskResult(res *tools.Result, mask func(string) string) {
	for i, c := range res.Content {
		if tc, ok := c.(mcp.TextContent); ok {
			tc.Text = mask(tc.Text)
			res.Content[i] = tc
		}
	}
	if res.StructuredContent != nil {
		res.StructuredContent = maskFacts(res.StructuredContent, mask)
	}
}

// auditRecord completes the call's audit line. No line, no result: a call
// whose line cannot be written ran, but what it answered does not reach
// the client unrecorded.
func (s *Server) auditRecord(c *call, res *tools.Result) error {
	ev := c.ev
	ev.Time, ev.DurationMS = c.start.UTC(), time.Since(c.start).Milliseconds()
	ev.Outcome = outcome(res)
	ev.ExitCode, ev.Truncated = res.ExitCode, res.Truncated
	for _, rc := range res.Content {
		switch rc := rc.(type) {
		case mcp.TextContent:
			ev.BytesOut += len(rc.Text)
			if res.IsError {
				ev.Error = rc.Text
			}
		case mcp.ImageContent:
			ev.BytesOut += len(rc.Data)
		}
	}
	err := s.cfg.Audit.Record(ev)
	if err != nil {
		s.cfg.Logger.Error("audit log write failed: result withheld", "tool", c.tool.Def.Name, "thread", ev.Thread, "err", err)
		return err
	}
	c.outcome = ev.Outcome
	return nil
}

// threadArgument moves the call's thread argument, if any, out of the
// arguments (the tools do not take it) into the request's thread header:
// the header names the thread as before. Both naming different threads is
// an error.
func threadArgument(req mcp.CallToolRequest) (_ mcp.CallToolRequest, given bool, _ error) {
	args := req.GetArguments()
	v, ok := args["thread"]
	if !ok {
		return req, false, nil
	}
	rest := make(map[string]any, len(args))
	for k, a := range args {
		if k != "thread" {
			rest[k] = a
		}
	}
	req.Params.Arguments = rest
	if v == nil {
		return req, false, nil
	}
	id, isString := v.(string)
	if !isString {
		return req, true, errors.New("argument \"thread\" must be a string")
	}
	if err := sandbox.ValidThreadID(id); err != nil {
		return req, true, fmt.Errorf("argument \"thread\": %w", err)
	}
	if h := strings.TrimSpace(req.Header.Get(ThreadHeader)); h != "" && h != id {
		return req, true, fmt.Errorf("argument \"thread\" (%s) and the %s header (%s) name different threads", id, ThreadHeader, h)
	}
	req.Header = req.Header.Clone()
	if req.Header == nil {
		req.Header = http.Header{}
	}
	req.Header.Set(ThreadHeader, id)
	return req, true, nil
}

// httpRequestCtxKey holds the context of the HTTP request carrying a call.
type httpRequestCtxKey struct{}

// errNoThread answers a stateless (2026-07-28) request that names no thread.
var errNoThread = errors.New("no thread named: this connection has no session, so every request names its thread " +
	"with the " + ThreadHeader + " header or the thread argument")

// modernSession is the registry session of a stateless request: the
// thread's lease (leases); done gives it back.
func (s *Server) modernSession(thread ThreadRef) (session string, done func(), err error) {
	if thread.Anonymous || thread.ID == "" {
		return "", nil, errNoThread
	}
	session, done = s.leases.take(thread.Key, thread.Tenant)
	return session, done, nil
}

// reclaimLease ends the tenant's least recently used lease that no request
// uses and whose sandbox runs no job, making room under the tenant's cap
// of live threads; it reports whether it ended one. (A lease only keeps a
// thread's sandbox open between requests: ending it loses nothing.)
func (s *Server) reclaimLease(tenant string) bool {
	for _, key := range s.leases.idle(tenant) {
		if s.sessions.jobsRunning(key) {
			continue
		}
		// Counted before the lease leaves the table: a call that finds no
		// idle lease left waits for this one's end rather than refuse.
		s.sessions.reclaimStart(tenant)
		if s.leases.drop(key) {
			s.sessions.End(key)
			s.sessions.reclaimDone(tenant)
			return true
		}
		s.sessions.reclaimDone(tenant)
	}
	return false
}

// threadResolver picks the thread of a session's first request that needs
// one. The transport that carries a request gives it, in the request's
// context (withThreads): the thread is a function of the request, and one
// Server may serve stdio and HTTP at once.
type threadResolver func(session string, header http.Header) ThreadRef

type threadResolverKey struct{}

// withThreads gives the requests of ctx their thread resolver.
func withThreads(ctx context.Context, r threadResolver) context.Context {
	return context.WithValue(ctx, threadResolverKey{}, r)
}

// identify names the session of a request and the thread it asks for; a
// request no transport named a thread for gets none (its call fails on
// the thread id).
func (s *Server) identify(ctx context.Context, header http.Header) (string, ThreadRef) {
	session := ""
	if cs := mcpserver.ClientSessionFromContext(ctx); cs != nil {
		session = cs.SessionID()
	}
	threads, _ := ctx.Value(threadResolverKey{}).(threadResolver)
	if threads == nil {
		return session, ThreadRef{}
	}
	return session, threads(session, header)
}

// run calls the tool, turning a panic into an error result.
func (s *Server) run(ctx context.Context, t tools.Tool, env *tools.Env, req mcp.CallToolRequest) (res *tools.Result) {
	defer func() {
		if p := recover(); p != nil {
			s.cfg.Logger.Error("tool panicked", "tool", t.Def.Name, "panic", p, "stack", string(debug.Stack()))
			res = toolsFail(fmt.Errorf("internal error in %s", t.Def.Name))
		}
	}()
	res = t.Handle(ctx, env, req)
	if res == nil || res.CallToolResult == nil {
		res = toolsFail(fmt.Errorf("internal error in %s: no result", t.Def.Name))
	}
	return res
}

func toolsFail(err error) *tools.Result {
	return &tools.Result{CallToolResult: mcp.NewToolResultError("Error: " + err.Error())}
}

func outcome(r *tools.Result) string {
	switch {
	case r.Denied:
		return audit.Denied
	case r.TimedOut:
		return audit.Timeout
	case r.IsError:
		return audit.Error
	}
	return audit.OK
}

// contentArgs hold file content: the audit log keeps their size and hash
// only. secretArgs may hold a secret (a password typed at a job's prompt),
// which an unsalted hash would give away to a dictionary: their size only.
var (
	contentArgs = map[string]bool{"content": true, "old_str": true, "new_str": true}
	secretArgs  = map[string]bool{"input": true}
)

func auditArgs(args map[string]any, mask func(string) string) map[string]any {
	out := make(map[string]any, len(args))
	for k, v := range args {
		s, isString := v.(string)
		switch {
		case secretArgs[k] && isString:
			out[k] = audit.Content{Size: len(s)}
		case secretArgs[k]:
			out[k] = "(not a string)"
		case contentArgs[k] && isString:
			out[k] = audit.Summarize(s)
		case contentArgs[k]:
			out[k] = "(not a string)"
		case isString:
			out[k] = mask(s)
		default:
			out[k] = v
		}
	}
	return out
}

// progress returns the function that sends progress notifications for this
// call, or nil when the client gave no progress token.
func (s *Server) progress(ctx context.Context, req mcp.CallToolRequest) func(float64, string) {
	if req.Params.Meta == nil || req.Params.Meta.ProgressToken == nil {
		return nil
	}
	token := req.Params.Meta.ProgressToken
	return func(p float64, msg string) {
		params := map[string]any{"progressToken": token, "progress": p}
		if msg != "" {
			params["message"] = msg
		}
		if err := s.mcp.SendNotificationToClient(ctx, "notifications/progress", params); err != nil {
			s.cfg.Logger.Debug("progress notification not sent", "err", err)
		}
	}
}
