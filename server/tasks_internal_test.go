package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/sandbox-mcp/sandbox-mcp/tools"
)

// The wire of tasks.go against the extension's own schema
// (testdata/ext-tasks, from modelcontextprotocol/ext-tasks).
var (
	extSchemaOnce sync.Once
	extSchema     *jsonschema.Compiler
	extSchemaErr  error
)

// extDef validates v, as JSON, against the schema's definition def.
func extDef(t *testing.T, def string, v any) error {
	t.Helper()
	extSchemaOnce.Do(func() {
		raw, err := os.ReadFile("testdata/ext-tasks/schema.json")
		if err != nil {
			extSchemaErr = err
			return
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
		if err != nil {
			extSchemaErr = err
			return
		}
		extSchema = jsonschema.NewCompiler()
		extSchemaErr = extSchema.AddResource("ext-tasks.json", doc)
	})
	if extSchemaErr != nil {
		t.Fatal(extSchemaErr)
	}
	s, err := extSchema.Compile("ext-tasks.json#/$defs/" + def)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	return s.Validate(doc)
}

func testServer() *Server { return &Server{cfg: Config{Version: "test"}} }

func TestTaskWireSchema(t *testing.T) {
	t.Parallel()
	s := testServer()
	created := time.Date(2026, 7, 28, 10, 0, 0, 0, time.UTC)
	code := 0
	done := &tools.Result{CallToolResult: mcp.NewToolResultText("out\n[exit code 0]"), ExitCode: &code}
	done.StructuredContent = map[string]any{"exit_code": 0}
	failedCall := &tools.Result{CallToolResult: mcp.NewToolResultError("Error: boom")}
	tasks := map[string]tools.JobTask{
		"working":   {ID: "j1", State: tools.TaskWorking, Created: created, Updated: created, Message: "line 1\nline 2"},
		"no output": {ID: "j2", State: tools.TaskWorking, Created: created, Updated: created},
		"completed": {ID: "j3", State: tools.TaskCompleted, Created: created, Updated: created.Add(3 * time.Second), Message: "exited with code 0", Result: done},
		"tool err":  {ID: "j4", State: tools.TaskCompleted, Created: created, Updated: created.Add(time.Second), Result: failedCall},
		"cancelled": {ID: "j5", State: tools.TaskCancelled, Created: created, Updated: created.Add(time.Second), Message: "cancelled"},
	}
	for name, task := range tasks {
		if task.State == tools.TaskWorking {
			if err := extDef(t, "CreateTaskResult", s.taskWire(task, "task")); err != nil {
				t.Errorf("%s as CreateTaskResult: %v", name, err)
			}
		}
		w := s.taskWire(task, mcp.ResultTypeComplete)
		if err := extDef(t, "GetTaskResult", w); err != nil {
			t.Errorf("%s as GetTaskResult: %v", name, err)
		}
		variant := map[string]string{tools.TaskWorking: "WorkingTask", tools.TaskCompleted: "CompletedTask", tools.TaskCancelled: "CancelledTask"}[task.State]
		if err := extDef(t, variant, w); err != nil {
			t.Errorf("%s as %s: %v", name, variant, err)
		}
		if err := extDef(t, "GetTaskResult", map[string]any{"resultType": "complete", "taskId": "j1"}); err == nil {
			t.Fatal("the schema takes anything: the test cannot fail")
		}
	}
	// The fields that mean something, as they go.
	b, _ := json.Marshal(s.taskWire(tasks["working"], "task"))
	var m map[string]any
	json.Unmarshal(b, &m)
	if m["resultType"] != "task" || m["taskId"] != "j1" || m["status"] != "working" || m["ttlMs"] != nil || m["pollIntervalMs"] != float64(taskPollInterval) ||
		m["createdAt"] != "2026-07-28T10:00:00.000Z" || m["statusMessage"] != "line 1\nline 2" {
		t.Errorf("working: %s", b)
	}
	if _, ok := m["ttlMs"]; !ok {
		t.Errorf("ttlMs is required (null: no limit): %s", b)
	}
	b, _ = json.Marshal(s.taskWire(tasks["completed"], mcp.ResultTypeComplete))
	m = nil
	json.Unmarshal(b, &m)
	res, _ := m["result"].(map[string]any)
	if m["ttlMs"] != float64((3*time.Second+taskKeepAfterEnd).Milliseconds()) || res == nil || res["resultType"] != "complete" ||
		!strings.Contains(string(b), `"text":"out\n[exit code 0]"`) {
		t.Errorf("completed: %s", b)
	}
	for _, method := range []string{"UpdateTaskResult", "CancelTaskResult"} {
		if err := extDef(t, method, ackWire{Meta: s.resultMeta(), ResultType: mcp.ResultTypeComplete}); err != nil {
			t.Errorf("%s: %v", method, err)
		}
	}
}

// The requests our clients send, and the errors the server answers, are
// the schema's too.
func TestTaskRequestsAndErrorsSchema(t *testing.T) {
	t.Parallel()
	meta := map[string]any{mcp.MetaKeyProtocolVersion: "2026-07-28", mcp.MetaKeyClientCapabilities: map[string]any{"extensions": map[string]any{tasksExtension: map[string]any{}}}}
	for def, req := range map[string]map[string]any{
		"GetTaskRequest":    {"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": map[string]any{"taskId": "j1", "_meta": meta}},
		"CancelTaskRequest": {"jsonrpc": "2.0", "id": 2, "method": "tasks/cancel", "params": map[string]any{"taskId": "j1", "_meta": meta}},
		"UpdateTaskRequest": {"jsonrpc": "2.0", "id": 3, "method": "tasks/update", "params": map[string]any{"taskId": "j1", "_meta": meta,
			"inputResponses": map[string]any{stdinKey: map[string]any{"action": "accept", "content": map[string]any{"input": "yes\n", "close": true}}}}},
	} {
		if err := extDef(t, def, req); err != nil {
			t.Errorf("%s: %v", def, err)
		}
	}
	// decline closes stdin: an ElicitResult without content.
	if err := extDef(t, "InputResponses", map[string]any{stdinKey: map[string]any{"action": "decline"}}); err != nil {
		t.Error(err)
	}
	_, err := taskProtocol(&mcp.Meta{AdditionalFields: map[string]any{mcp.MetaKeyProtocolVersion: "2026-07-28", mcp.MetaKeyClientCapabilities: map[string]any{}}})
	var te *taskError
	if !errors.As(err, &te) || te.code != mcp.MISSING_REQUIRED_CLIENT_CAPABILITY {
		t.Fatalf("no capability: %v", err)
	}
	if err := extDef(t, "Error", map[string]any{"code": te.code, "message": te.msg, "data": te.data}); err != nil {
		t.Error(err)
	}
	b, _ := json.Marshal(te.data)
	if string(b) != `{"requiredCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}` {
		t.Errorf("data: %s", b)
	}
}

func TestTaskProtocol(t *testing.T) {
	t.Parallel()
	caps := map[string]any{"extensions": map[string]any{tasksExtension: map[string]any{}}}
	for _, tt := range []struct {
		name string
		meta map[string]any
		code int // 0: served
	}{
		{"modern, declared", map[string]any{mcp.MetaKeyProtocolVersion: "2026-07-28", mcp.MetaKeyClientCapabilities: caps}, 0},
		{"a session's revision, declared", map[string]any{mcp.MetaKeyProtocolVersion: "2025-11-25", mcp.MetaKeyClientCapabilities: caps}, mcp.METHOD_NOT_FOUND},
		{"no _meta (a session's request)", nil, mcp.METHOD_NOT_FOUND},
		{"modern, none declared", map[string]any{mcp.MetaKeyProtocolVersion: "2026-07-28", mcp.MetaKeyClientCapabilities: map[string]any{}}, mcp.MISSING_REQUIRED_CLIENT_CAPABILITY},
		{"modern, another extension", map[string]any{mcp.MetaKeyProtocolVersion: "2026-07-28", mcp.MetaKeyClientCapabilities: map[string]any{"extensions": map[string]any{"io.modelcontextprotocol/ui": map[string]any{}}}}, mcp.MISSING_REQUIRED_CLIENT_CAPABILITY},
		{"modern, no capabilities", map[string]any{mcp.MetaKeyProtocolVersion: "2026-07-28"}, mcp.INVALID_PARAMS},
		{"an unknown later revision", map[string]any{mcp.MetaKeyProtocolVersion: "2099-01-01", mcp.MetaKeyClientCapabilities: caps}, mcp.UNSUPPORTED_PROTOCOL_VERSION},
	} {
		var meta *mcp.Meta
		if tt.meta != nil {
			meta = &mcp.Meta{AdditionalFields: tt.meta}
		}
		info, err := taskProtocol(meta)
		var te *taskError
		switch {
		case tt.code == 0 && (err != nil || !info.Modern || !declaresTasks(info)):
			t.Errorf("%s: %v %+v", tt.name, err, info)
		case tt.code != 0 && (!errors.As(err, &te) || te.code != tt.code):
			t.Errorf("%s: got %v, want code %d", tt.name, err, tt.code)
		case te != nil && strings.Contains(te.msg, "\n"):
			t.Errorf("%s: not one line: %q", tt.name, te.msg)
		}
	}
}

func TestStdinResponse(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		raw   string
		input string
		close bool
		err   string // "": accepted
	}{
		{`{"stdin":{"action":"accept","content":{"input":"hi\n"}}}`, "hi\n", false, ""},
		{`{"stdin":{"action":"accept","content":{"input":"bye","close":true}}}`, "bye", true, ""},
		{`{"stdin":{"action":"accept","content":{"close":true}}}`, "", true, ""},
		{`{"stdin":{"action":"decline"}}`, "", true, ""},
		{`{"stdin":{"action":"cancel"}}`, "", true, ""},
		{``, "", false, "params.inputResponses"},
		{`[]`, "", false, "params.inputResponses"},
		{`{}`, "", false, "params.inputResponses"},
		{`{"name":{"action":"accept","content":{"input":"x"}}}`, "", false, `key "name": a bash task takes only "stdin"`},
		{`{"stdin":{"action":"accept","content":{"input":"x"}},"more":{"action":"cancel"}}`, "", false, `key "more"`},
		{`{"stdin":"hi"}`, "", false, "params.inputResponses.stdin"},
		{`{"stdin":{"action":"accept","content":{"input":3}}}`, "", false, "content.input: want a string"},
		{`{"stdin":{"action":"accept","content":{"close":"yes"}}}`, "", false, "content.close: want a boolean"},
		{`{"stdin":{"action":"accept","content":{"text":"x"}}}`, "", false, `"text" is no field`},
		{`{"stdin":{"action":"accept","content":{}}}`, "", false, "nothing to do"},
		{`{"stdin":{"action":"accept"}}`, "", false, "nothing to do"},
		{`{"stdin":{"action":"maybe"}}`, "", false, `action "maybe"`},
		{`{"stdin":{"action":"decline","content":{"input":"x"}}}`, "", false, "takes no content"},
		{`{"stdin":{"action":"accept","content":{"input":"x"},"extra":1}}`, "", false, "params.inputResponses.stdin"},
	} {
		input, close, err := stdinResponse(json.RawMessage(tt.raw))
		var te *taskError
		switch {
		case tt.err == "" && (err != nil || input != tt.input || close != tt.close):
			t.Errorf("%s: %q %v %v", tt.raw, input, close, err)
		case tt.err != "" && (!errors.As(err, &te) || te.code != mcp.INVALID_PARAMS || !strings.Contains(te.msg, tt.err)):
			t.Errorf("%s: got %v, want an invalid-params error with %q", tt.raw, err, tt.err)
		}
	}
}

func TestTaskHeaders(t *testing.T) {
	t.Parallel()
	h := func(kv ...string) http.Header {
		out := http.Header{}
		for i := 0; i+1 < len(kv); i += 2 {
			out.Set(kv[i], kv[i+1])
		}
		return out
	}
	ok := h("Mcp-Protocol-Version", "2026-07-28", "Mcp-Method", "tasks/get", "Mcp-Name", "j1")
	if err := taskHeaders(ok, "2026-07-28", "tasks/get", "j1"); err != nil {
		t.Fatal(err)
	}
	for name, hdr := range map[string]http.Header{
		"no name":        h("Mcp-Protocol-Version", "2026-07-28", "Mcp-Method", "tasks/get"),
		"another name":   h("Mcp-Protocol-Version", "2026-07-28", "Mcp-Method", "tasks/get", "Mcp-Name", "j2"),
		"another method": h("Mcp-Protocol-Version", "2026-07-28", "Mcp-Method", "tasks/cancel", "Mcp-Name", "j1"),
		"another rev":    h("Mcp-Protocol-Version", "2025-11-25", "Mcp-Method", "tasks/get", "Mcp-Name", "j1"),
	} {
		var te *taskError
		if err := taskHeaders(hdr, "2026-07-28", "tasks/get", "j1"); !errors.As(err, &te) || te.code != mcp.HEADER_MISMATCH {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// A tools/call's response, as mcp-go writes it — one JSON line, or one SSE
// event — gets the task; a notification passes as it is.
func TestWithTaskResult(t *testing.T) {
	t.Parallel()
	task := &taskWire{ResultType: "task", TaskID: "j7", Status: "working", CreatedAt: "c", LastUpdatedAt: "u"}
	call := `{"jsonrpc":"2.0","id":"a-1","result":{"content":[{"type":"text","text":"x\n[still running as job j7]"}],"resultType":"complete"}}`
	want := `{"jsonrpc":"2.0","id":"a-1","result":{"resultType":"task","taskId":"j7","status":"working","createdAt":"c","lastUpdatedAt":"u","ttlMs":null}}`
	if out, ok := withTaskResult([]byte(call+"\n"), task); !ok || string(out) != want+"\n" {
		t.Errorf("json: %v %s", ok, out)
	}
	event := "event: message\ndata: "
	if out, ok := withTaskResult([]byte(event+call+"\n\n"), task); !ok || string(out) != event+want+"\n\n" {
		t.Errorf("sse: %v %q", ok, out)
	}
	note := `{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":1}}`
	for _, p := range []string{note + "\n", event + note + "\n\n", `{"jsonrpc":"2.0","id":1,"error":{"code":-32603,"message":"x"}}` + "\n"} {
		if _, ok := withTaskResult([]byte(p), task); ok {
			t.Errorf("rewritten: %q", p)
		}
	}
}

// The answer a call leaves is what a transport answers; without one, the
// response passes as it is.
func TestTaskAnswer(t *testing.T) {
	t.Parallel()
	resp := mcp.NewJSONRPCResultResponse(mcp.NewRequestId(1), mcp.NewToolResultText("[still running as job j1]"))
	var none *taskAnswer
	if got := none.answer(resp); got.(mcp.JSONRPCResponse).Result != resp.Result {
		t.Error("no answer place: the response changed")
	}
	ctx, a := withTaskAnswer(context.Background())
	if takesTasks(ctx) {
		t.Error("a request that declares nothing takes tasks")
	}
	caps := &mcp.ClientCapabilities{Extensions: map[string]any{tasksExtension: map[string]any{}}}
	if !takesTasks(mcpserver.WithRequestProtocolInfo(ctx, &mcpserver.RequestProtocolInfo{Modern: true, ClientCapabilities: caps})) {
		t.Error("a modern request that declares the extension takes no tasks")
	}
	if takesTasks(mcpserver.WithRequestProtocolInfo(context.Background(), &mcpserver.RequestProtocolInfo{Modern: true, ClientCapabilities: caps})) {
		t.Error("a request whose transport cannot answer a task takes tasks")
	}
	if takesTasks(mcpserver.WithRequestProtocolInfo(ctx, &mcpserver.RequestProtocolInfo{ClientCapabilities: caps})) {
		t.Error("a session's request takes tasks (SEP-2663: not defined before 2026-07-28)")
	}
	if got := a.answer(resp); got.(mcp.JSONRPCResponse).Result != resp.Result {
		t.Error("no task left: the response changed")
	}
	task := &taskWire{TaskID: "j1"}
	a.set(task)
	if got := a.answer(resp); got.(mcp.JSONRPCResponse).Result != task {
		t.Error("the task is not the answer")
	}
}

// A session's initialize result does not list the extension; the
// server's capabilities keep it (discover).
func TestHideTasksFromSessions(t *testing.T) {
	t.Parallel()
	shared := map[string]any{tasksExtension: map[string]any{}, "io.modelcontextprotocol/ui": map[string]any{}}
	res := &mcp.InitializeResult{}
	res.Capabilities.Extensions = shared
	hideTasksFromSessions(context.Background(), nil, nil, res)
	if _, ok := res.Capabilities.Extensions[tasksExtension]; ok || len(res.Capabilities.Extensions) != 1 {
		t.Errorf("initialize: %v", res.Capabilities.Extensions)
	}
	if len(shared) != 2 {
		t.Errorf("the server's own capabilities changed: %v", shared)
	}
}
