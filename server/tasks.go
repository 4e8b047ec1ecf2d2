package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"

	"github.com/sandbox-mcp/sandbox-mcp/audit"
	"github.com/sandbox-mcp/sandbox-mcp/tools"
)

// MCP tasks (SPEC §20): the io.modelcontextprotocol/tasks extension
// (SEP-2663, github.com/modelcontextprotocol/ext-tasks), served on our
// side until mcp-go serves it (its issue #980). Everything of the
// extension's wire is in this file: the routing of tasks/get, tasks/update
// and tasks/cancel before mcp-go sees them (stdio.go, http.go), the
// answer of a bash call that goes on as a task, and the shapes. What a
// task is made of — a job of the caller's sandbox — is behind taskJobs.
// When mcp-go has the extension, its task store gets taskJobs behind it,
// and this wire goes.
//
// Where it applies: to MCP 2026-07-28 requests (stdio, and stateless
// Streamable HTTP) that list the extension in their own client
// capabilities (params._meta["io.modelcontextprotocol/clientCapabilities"]
// .extensions). SEP-2663 does not define it for the session revisions
// (2025-xx): their requests are served as if they had declared nothing,
// whatever their initialize or _meta says, and their tasks/* are method
// not found. The server lists the extension in server/discover's
// capabilities, not in a session's initialize result.
//
// Choices within the extension:
//   - The task id is the job's (j1, j2, …: SPEC §20 "same id"), resolved
//     in the thread the request names and its token owns — as bash_output
//     resolves it — never as a bearer token: another thread's or token's
//     guess names nothing of the first.
//   - State is the job's: working while it runs (statusMessage: the last
//     lines of its output, masked); completed once it ended, its result the
//     CallToolResult the bash call would have answered had it waited;
//     cancelled when a kill request (tasks/cancel, bash_kill) ended it;
//     never failed (a tool error is a completed result; the job table
//     holds no JSON-RPC failure).
//   - tasks/update writes stdin: inputResponses {"stdin": {"action":
//     "accept", "content": {"input": "text", "close": false}}} — an
//     ElicitResult under a standing key, within the schema; "decline" or
//     "cancel" closes stdin. The task never asks (no inputRequests, never
//     input_required): "stdin" is the one key it takes, any other is an
//     error, as is any other shape.
//   - ttlMs null while the job runs (a job has no deadline); once it
//     ended, its run plus taskKeepAfterEnd. pollIntervalMs taskPollInterval.
//   - tasks/get, tasks/update and tasks/cancel are audited as tool calls
//     are (one line each, tool "tasks/get", …), counted in the calls
//     running at once, and hold the thread's sandbox as a call does.
const (
	tasksExtension = "io.modelcontextprotocol/tasks"
	// taskPollInterval (ms): bash's progress comes once a second, so does
	// a task's news.
	taskPollInterval = 1000
	// taskKeepAfterEnd is how long an ended task is promised to answer:
	// the sandbox may be stopped after its idle time (10 minutes by
	// default) and its ended jobs forgotten then.
	taskKeepAfterEnd = 10 * time.Minute
	// stdinKey is the inputResponses key of a task's stdin.
	stdinKey = "stdin"
)

// Methods of the extension.
const (
	methodTasksGet    = "tasks/get"
	methodTasksUpdate = "tasks/update"
	methodTasksCancel = "tasks/cancel"
)

// isTaskMethod: a method this file serves.
func isTaskMethod(method string) bool {
	return method == methodTasksGet || method == methodTasksUpdate || method == methodTasksCancel
}

// taskJobs is what tasks are made of: the jobs of the caller's sandbox.
type taskJobs interface {
	Read(ctx context.Context, env *tools.Env, id string) (tools.JobTask, error)
	Input(ctx context.Context, env *tools.Env, id, input string, close bool) error
	Cancel(ctx context.Context, env *tools.Env, id string) error
}

// jobTasks is taskJobs over tools' job tasks.
type jobTasks struct{}

func (jobTasks) Read(ctx context.Context, env *tools.Env, id string) (tools.JobTask, error) {
	return tools.ReadTask(ctx, env, id)
}

func (jobTasks) Input(ctx context.Context, env *tools.Env, id, input string, close bool) error {
	return tools.TaskInput(ctx, env, id, input, close)
}

func (jobTasks) Cancel(ctx context.Context, env *tools.Env, id string) error {
	return tools.CancelTask(ctx, env, id)
}

// taskWire is a task on the wire: a CreateTaskResult (resultType "task"),
// or a tasks/get result (a DetailedTask, resultType "complete").
type taskWire struct {
	Meta           map[string]any `json:"_meta,omitempty"`
	ResultType     mcp.ResultType `json:"resultType"`
	TaskID         string         `json:"taskId"`
	Status         string         `json:"status"`
	StatusMessage  string         `json:"statusMessage,omitempty"`
	CreatedAt      string         `json:"createdAt"`
	LastUpdatedAt  string         `json:"lastUpdatedAt"`
	TTLMs          *int64         `json:"ttlMs"` // null: no limit
	PollIntervalMs int64          `json:"pollIntervalMs,omitempty"`
	// Result: a completed task's CallToolResult.
	Result *mcp.CallToolResult `json:"result,omitempty"`
}

// ackWire answers tasks/update and tasks/cancel: an empty result.
type ackWire struct {
	Meta       map[string]any `json:"_meta,omitempty"`
	ResultType mcp.ResultType `json:"resultType"`
}

// taskTime is a time on the wire: ISO 8601, UTC, milliseconds.
func taskTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

// taskWire is t as the wire says it, with resultType rt.
func (s *Server) taskWire(t tools.JobTask, rt mcp.ResultType) *taskWire {
	w := &taskWire{Meta: s.resultMeta(), ResultType: rt, TaskID: t.ID, Status: t.State, StatusMessage: t.Message,
		CreatedAt: taskTime(t.Created), LastUpdatedAt: taskTime(t.Updated), PollIntervalMs: taskPollInterval}
	if t.State != tools.TaskWorking {
		ttl := (t.Updated.Sub(t.Created) + taskKeepAfterEnd).Milliseconds()
		w.TTLMs = &ttl
	}
	if t.Result != nil {
		r := *t.Result.CallToolResult // what the call would have answered, on 2026-07-28
		r.ResultType = mcp.ResultTypeComplete
		w.Result = &r
	}
	return w
}

// resultMeta is the _meta of every result of ours: the server says who it
// is, as mcp-go's 2026-07-28 results do.
func (s *Server) resultMeta() map[string]any {
	return map[string]any{mcp.MetaKeyServerInfo: mcp.Implementation{Name: "sandbox-mcp", Version: s.cfg.Version}}
}

// taskAnswer is where a call that goes on as a task leaves its
// CreateTaskResult for the transport that carries the call, which answers
// it in place of the CallToolResult mcp-go gives (mcp-go's handlers answer
// only those). Its presence in a request's context says the transport can.
type taskAnswer struct {
	mu   sync.Mutex
	task *taskWire
}

type taskAnswerKey struct{}

// withTaskAnswer gives a request's context the place of its task answer.
func withTaskAnswer(ctx context.Context) (context.Context, *taskAnswer) {
	a := &taskAnswer{}
	return context.WithValue(ctx, taskAnswerKey{}, a), a
}

func (a *taskAnswer) set(t *taskWire) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.task = t
}

func (a *taskAnswer) get() *taskWire {
	if a == nil {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.task
}

// answer is resp, a tools/call's response, with its task as its result
// when the call went on as one.
func (a *taskAnswer) answer(resp mcp.JSONRPCMessage) mcp.JSONRPCMessage {
	t := a.get()
	r, ok := resp.(mcp.JSONRPCResponse)
	if t == nil || !ok {
		return resp
	}
	r.Result = t
	return r
}

// takesTasks: the request carrying a tool call takes a task for an
// answer — it is a 2026-07-28 request that lists the extension in its
// client capabilities, on a transport that can answer one.
func takesTasks(ctx context.Context) bool {
	if ctx.Value(taskAnswerKey{}) == nil {
		return false
	}
	return declaresTasks(mcpserver.RequestProtocolInfoFromContext(ctx))
}

// declaresTasks: a modern request's client capabilities list the
// extension.
func declaresTasks(info *mcpserver.RequestProtocolInfo) bool {
	if info == nil || !info.Modern || info.ClientCapabilities == nil {
		return false
	}
	_, ok := info.ClientCapabilities.Extensions[tasksExtension]
	return ok
}

// offerTask readies the answer of a call that went on as a task
// (Result.Task): the task as it is now, a CreateTaskResult, which the
// transport answers in place of res. res stays the call's for its audit
// line; should the task not be read (its job gone already), the client
// gets res, §15's answer, which it takes as well.
func (s *Server) offerTask(ctx context.Context, c *call, res *tools.Result) {
	a, _ := ctx.Value(taskAnswerKey{}).(*taskAnswer)
	if a == nil || res.Task == "" || c.b == nil {
		return
	}
	t, err := s.tasks.Read(ctx, s.taskEnv(c), res.Task)
	if err != nil {
		s.cfg.Logger.Warn("a call went on as a task that cannot be read: answered as a job", "task", res.Task, "thread", c.ev.Thread, "err", err)
		return
	}
	t.Message = c.mask(t.Message)
	a.set(s.taskWire(t, "task"))
}

// taskEnv is what a task operation works with: the call's sandbox.
func (s *Server) taskEnv(c *call) *tools.Env {
	return &tools.Env{Sandbox: c.b.sb, Limits: s.cfg.Limits, Mask: c.b.mask.Mask, Network: s.cfg.Network}
}

// hideTasksFromSessions keeps the extension out of a session's initialize
// result: it applies to 2026-07-28 requests only (SEP-2663), which
// discover it. The result's capabilities are a copy; the server's stay.
func hideTasksFromSessions(_ context.Context, _ any, _ *mcp.InitializeRequest, res *mcp.InitializeResult) {
	if res == nil || res.Capabilities.Extensions == nil {
		return
	}
	ext := make(map[string]any, len(res.Capabilities.Extensions))
	for k, v := range res.Capabilities.Extensions {
		if k != tasksExtension {
			ext[k] = v
		}
	}
	if len(ext) == 0 {
		ext = nil
	}
	res.Capabilities.Extensions = ext
}

// taskRequest is a tasks/* request as it comes.
type taskRequest struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      mcp.RequestId   `json:"id"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params"`
}

// taskParams are its params; what they hold is checked one by one, for
// errors that name it.
type taskParams struct {
	TaskID         json.RawMessage `json:"taskId"`
	InputResponses json.RawMessage `json:"inputResponses"`
	Thread         json.RawMessage `json:"thread"`
	Meta           json.RawMessage `json:"_meta"`
}

// taskError is a JSON-RPC error of a tasks/* request.
type taskError struct {
	code int
	msg  string
	data any
}

func (e *taskError) Error() string { return e.msg }

func taskErrorf(code int, format string, args ...any) *taskError {
	return &taskError{code: code, msg: fmt.Sprintf(format, args...)}
}

// taskMessage answers a tasks/get, tasks/update or tasks/cancel request
// (raw), that came with header over HTTP (nil: stdio). Every error is one
// line, the method first.
func (s *Server) taskMessage(ctx context.Context, header http.Header, raw []byte) mcp.JSONRPCMessage {
	var req taskRequest
	if err := json.Unmarshal(raw, &req); err != nil {
		return mcp.NewJSONRPCError(mcp.NewRequestId(nil), mcp.PARSE_ERROR, "Failed to parse message", nil)
	}
	res, err := s.answerTask(ctx, header, req)
	if err != nil {
		var te *taskError
		if !errors.As(err, &te) {
			te = &taskError{code: mcp.INTERNAL_ERROR, msg: err.Error()}
		}
		return mcp.NewJSONRPCError(req.ID, te.code, req.Method+": "+oneLine(te.msg), te.data)
	}
	return mcp.NewJSONRPCResultResponse(req.ID, res)
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", " ")), " ")
}

// answerTask checks a request of the extension and runs it.
func (s *Server) answerTask(ctx context.Context, header http.Header, req taskRequest) (any, error) {
	if req.JSONRPC != mcp.JSONRPC_VERSION {
		return nil, taskErrorf(mcp.INVALID_REQUEST, "invalid JSON-RPC version")
	}
	var p taskParams
	if len(req.Params) == 0 || json.Unmarshal(req.Params, &p) != nil {
		return nil, taskErrorf(mcp.INVALID_PARAMS, "params: want an object with taskId")
	}
	var meta *mcp.Meta
	if len(p.Meta) > 0 && json.Unmarshal(p.Meta, &meta) != nil {
		return nil, taskErrorf(mcp.INVALID_PARAMS, "params._meta: not an object")
	}
	info, err := taskProtocol(meta)
	if err != nil {
		return nil, err
	}
	var id string
	if json.Unmarshal(p.TaskID, &id) != nil || id == "" {
		return nil, taskErrorf(mcp.INVALID_PARAMS, "params.taskId: a string is required")
	}
	if header != nil {
		if err := taskHeaders(header, info.ProtocolVersion, req.Method, id); err != nil {
			return nil, err
		}
	}
	var input string
	var closeInput bool
	if req.Method == methodTasksUpdate {
		if input, closeInput, err = stdinResponse(p.InputResponses); err != nil {
			return nil, err
		}
	}
	ctx = mcpserver.WithRequestProtocolInfo(ctx, info)
	args := map[string]any{"taskId": id}
	if req.Method == methodTasksUpdate {
		args["input"], args["close"] = input, closeInput
	}
	if len(p.Thread) > 0 {
		var thread any
		json.Unmarshal(p.Thread, &thread)
		args["thread"] = thread
	}
	return s.runTask(ctx, header, req.Method, args, func(ctx context.Context, env *tools.Env, c *call) (any, *tools.Result, error) {
		switch req.Method {
		case methodTasksGet:
			t, err := s.tasks.Read(ctx, env, id)
			if err != nil {
				return nil, nil, err
			}
			t.Message = c.mask(t.Message)
			if t.Result != nil {
				maskResult(t.Result, c.mask)
			}
			rec := t.Result
			if rec == nil {
				rec = &tools.Result{CallToolResult: mcp.NewToolResultText(t.State + ": " + t.Message)}
			}
			return s.taskWire(t, mcp.ResultTypeComplete), rec, nil
		case methodTasksUpdate:
			if err := s.tasks.Input(ctx, env, id, input, closeInput); err != nil {
				return nil, nil, err
			}
		default:
			if err := s.tasks.Cancel(ctx, env, id); err != nil {
				return nil, nil, err
			}
		}
		return &ackWire{Meta: s.resultMeta(), ResultType: mcp.ResultTypeComplete}, &tools.Result{CallToolResult: mcp.NewToolResultText("ok")}, nil
	})
}

// taskProtocol is the request's protocol as its _meta says it: a
// 2026-07-28 request (or later) that declares the extension.
func taskProtocol(meta *mcp.Meta) (*mcpserver.RequestProtocolInfo, error) {
	version := meta.ProtocolVersion()
	if !mcp.IsModernProtocol(version) {
		return nil, taskErrorf(mcp.METHOD_NOT_FOUND, "the tasks extension (%s) is served to MCP %s requests only; "+
			"this one speaks an earlier revision, where it is not defined (SEP-2663)", tasksExtension, mcp.ProtocolVersion20260728)
	}
	if !mcp.IsValidProtocolVersion(version) {
		e := mcp.UnsupportedProtocolVersionError{Version: version, Supported: mcp.ValidProtocolVersions}
		return nil, &taskError{code: mcp.UNSUPPORTED_PROTOCOL_VERSION, msg: e.Error(), data: mcp.UnsupportedProtocolVersionData{Supported: e.Supported, Requested: version}}
	}
	info := &mcpserver.RequestProtocolInfo{Modern: true, ProtocolVersion: version, ClientInfo: meta.ClientInfo(), ClientCapabilities: meta.ClientCapabilities()}
	if info.ClientCapabilities == nil {
		return nil, taskErrorf(mcp.INVALID_PARAMS, "missing or invalid _meta field %s", mcp.MetaKeyClientCapabilities)
	}
	if !declaresTasks(info) {
		return nil, &taskError{code: mcp.MISSING_REQUIRED_CLIENT_CAPABILITY,
			msg:  fmt.Sprintf("missing required client capability: extensions[%q] in _meta[%q]", tasksExtension, mcp.MetaKeyClientCapabilities),
			data: map[string]any{"requiredCapabilities": map[string]any{"extensions": map[string]any{tasksExtension: map[string]any{}}}}}
	}
	return info, nil
}

// taskHeaders checks a Streamable HTTP request's headers against its body
// (SEP-2243, and the extension's Mcp-Name: the task id).
func taskHeaders(h http.Header, version, method, id string) error {
	mismatch := func(format string, args ...any) error {
		return taskErrorf(mcp.HEADER_MISMATCH, "header mismatch: "+format, args...)
	}
	if v := h.Get(mcp.HeaderProtocolVersion); v != version {
		return mismatch("%s %q does not match the request's %s %q", mcp.HeaderProtocolVersion, v, mcp.MetaKeyProtocolVersion, version)
	}
	if m := h.Get(mcp.HeaderMethod); m != method {
		return mismatch("%s %q does not match the method %q", mcp.HeaderMethod, m, method)
	}
	name := h.Get(mcp.HeaderName)
	if name == "" {
		return mismatch("%s is required: the task id", mcp.HeaderName)
	}
	if decoded, ok := mcp.DecodeHeaderValue(name); !ok || decoded != id {
		return mismatch("%s %q does not match params.taskId %q", mcp.HeaderName, name, id)
	}
	return nil
}

// stdinResponse reads a tasks/update's inputResponses: the stdin key's
// ElicitResult — accept with content {input, close}, or decline/cancel
// (close stdin).
func stdinResponse(raw json.RawMessage) (input string, close bool, err error) {
	const want = `want {"stdin": {"action": "accept", "content": {"input": "text", "close": false}}} (decline or cancel closes stdin)`
	var responses map[string]json.RawMessage
	if len(raw) == 0 || json.Unmarshal(raw, &responses) != nil || responses == nil {
		return "", false, taskErrorf(mcp.INVALID_PARAMS, "params.inputResponses: %s", want)
	}
	for k := range responses {
		if k != stdinKey {
			return "", false, taskErrorf(mcp.INVALID_PARAMS, "params.inputResponses: key %q: a bash task takes only %q (it asks for nothing else); %s", cutText(k, 40), stdinKey, want)
		}
	}
	r, ok := responses[stdinKey]
	if !ok {
		return "", false, taskErrorf(mcp.INVALID_PARAMS, "params.inputResponses: %s", want)
	}
	var resp struct {
		Action  string                     `json:"action"`
		Content map[string]json.RawMessage `json:"content"`
	}
	dec := json.NewDecoder(bytes.NewReader(r))
	dec.DisallowUnknownFields()
	if dec.Decode(&resp) != nil {
		return "", false, taskErrorf(mcp.INVALID_PARAMS, "params.inputResponses.stdin: %s", want)
	}
	switch resp.Action {
	case "decline", "cancel":
		if resp.Content != nil {
			return "", false, taskErrorf(mcp.INVALID_PARAMS, "params.inputResponses.stdin: %q takes no content (it closes stdin)", resp.Action)
		}
		return "", true, nil
	case "accept":
	default:
		return "", false, taskErrorf(mcp.INVALID_PARAMS, "params.inputResponses.stdin.action %q: want accept, decline or cancel", cutText(resp.Action, 40))
	}
	for k, v := range resp.Content {
		switch k {
		case "input":
			if json.Unmarshal(v, &input) != nil {
				return "", false, taskErrorf(mcp.INVALID_PARAMS, "params.inputResponses.stdin.content.input: want a string")
			}
		case "close":
			if json.Unmarshal(v, &close) != nil {
				return "", false, taskErrorf(mcp.INVALID_PARAMS, "params.inputResponses.stdin.content.close: want a boolean")
			}
		default:
			return "", false, taskErrorf(mcp.INVALID_PARAMS, "params.inputResponses.stdin.content: %q is no field of stdin's (input, close)", cutText(k, 40))
		}
	}
	if input == "" && !close {
		return "", false, taskErrorf(mcp.INVALID_PARAMS, "params.inputResponses.stdin: nothing to do: give content.input, content.close, or both")
	}
	return input, close, nil
}

func cutText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}

// runTask runs one task operation as the handler runs a tool call: within
// the calls' budget, in the thread the request names (its sandbox bound
// for the while), audited (tool: the method; fail closed; a request
// refused on its way audited too), its error masked as a result is.
func (s *Server) runTask(ctx context.Context, header http.Header, method string, args map[string]any,
	op func(context.Context, *tools.Env, *call) (any, *tools.Result, error)) (any, error) {
	if _, ok := args["thread"]; ok && !s.stateless {
		return nil, taskErrorf(mcp.INVALID_PARAMS, "params.thread names the thread of a stateless HTTP request; this server's thread is its own (--thread, or the session's)")
	}
	c := &call{tool: tools.Tool{Def: mcp.Tool{Name: method}}, start: time.Now(), outcome: audit.Error}
	c.req.Header = header
	c.req.Params.Name = method
	c.req.Params.Arguments = args
	free, busy := s.claimSlot(ctx)
	defer free()
	c.fail(busy)
	s.inflight.Add(1)
	defer s.inflight.Add(-1)
	s.takeThreadArgument(ctx, c)
	argErr := c.err // the thread argument's, unless busy
	defer s.bindThread(ctx, c)()
	if err := s.auditBegin(c); err != nil {
		return nil, fmt.Errorf("%v: the request was not run", err)
	}
	var res any
	var rec *tools.Result
	err := c.err
	if err == nil {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		defer context.AfterFunc(c.b.ctx, cancel)()
		defer context.AfterFunc(s.stopCalls, cancel)()
		res, rec, err = op(ctx, s.taskEnv(c), c)
	}
	if err != nil {
		rec = toolsFail(err)
	}
	maskResult(rec, c.mask)
	if aerr := s.auditRecord(c, rec); aerr != nil {
		return nil, fmt.Errorf("%v: the request ran, its answer is withheld", aerr)
	}
	if err == nil {
		return res, nil
	}
	code := mcp.INTERNAL_ERROR
	if errors.Is(err, tools.ErrNoTask) || errors.Is(err, tools.ErrTaskRefused) || errors.Is(err, errNoThread) || (argErr != nil && err == argErr && busy == nil) {
		code = mcp.INVALID_PARAMS
	}
	return nil, &taskError{code: code, msg: c.mask(err.Error())}
}

// serveTaskHTTP answers a 2026-07-28 tasks/* POST (its body read already,
// and bounded, by the guard).
func (s *Server) serveTaskHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, "cannot read body", http.StatusBadRequest)
		return
	}
	resp := s.taskMessage(r.Context(), r.Header, body)
	status := http.StatusOK
	if e, ok := resp.(mcp.JSONRPCError); ok {
		status = httpStatusOf(e.Error.Code)
	}
	b, err := json.Marshal(resp)
	if err != nil {
		http.Error(w, "cannot encode the answer", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// httpStatusOf is the HTTP status of a JSON-RPC error on 2026-07-28, as
// mcp-go maps it.
func httpStatusOf(code int) int {
	switch code {
	case mcp.METHOD_NOT_FOUND:
		return http.StatusNotFound
	case mcp.HEADER_MISMATCH, mcp.MISSING_REQUIRED_CLIENT_CAPABILITY, mcp.UNSUPPORTED_PROTOCOL_VERSION,
		mcp.INVALID_REQUEST, mcp.INVALID_PARAMS, mcp.PARSE_ERROR:
		return http.StatusBadRequest
	}
	return http.StatusOK
}

// taskWriter carries mcp-go's answer to a 2026-07-28 tools/call over HTTP:
// when the call went on as a task (its taskAnswer set), the response — a
// JSON body, or the SSE event that carries it — gets the task as its
// result. Notifications, and any answer of a call that is no task, pass
// as they are. mcp-go writes each message in one Write.
type taskWriter struct {
	http.ResponseWriter
	ans  *taskAnswer
	done bool
}

func (w *taskWriter) Write(p []byte) (int, error) {
	t := w.ans.get()
	if t == nil || w.done {
		return w.ResponseWriter.Write(p)
	}
	out, ok := withTaskResult(p, t)
	if !ok {
		return w.ResponseWriter.Write(p)
	}
	w.done = true
	if _, err := w.ResponseWriter.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (w *taskWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *taskWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// withTaskResult is p — one message as mcp-go writes it, a JSON line or an
// SSE event — with t as its result when it is a response; ok false when p
// is no response (a notification).
func withTaskResult(p []byte, t *taskWire) ([]byte, bool) {
	const event, end = "event: message\ndata: ", "\n\n"
	msg, prefix, suffix := bytes.TrimSuffix(p, []byte("\n")), "", "\n"
	if bytes.HasPrefix(p, []byte(event)) && bytes.HasSuffix(p, []byte(end)) {
		msg, prefix, suffix = p[len(event):len(p)-len(end)], event, end
	}
	var m struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Method  string          `json:"method"`
		Result  json.RawMessage `json:"result"`
	}
	if json.Unmarshal(msg, &m) != nil || m.Method != "" || m.Result == nil || m.ID == nil {
		return nil, false
	}
	b, err := json.Marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Result  *taskWire       `json:"result"`
	}{m.JSONRPC, m.ID, t})
	if err != nil {
		return nil, false
	}
	return append(append([]byte(prefix), b...), suffix...), true
}
