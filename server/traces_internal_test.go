package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/sandbox-mcp/sandbox-mcp/audit"
	"github.com/sandbox-mcp/sandbox-mcp/providers/local"
	"github.com/sandbox-mcp/sandbox-mcp/tools"
)

// lockedBuffer is an audit log in memory.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// lines are the audit lines written so far, decoded.
func (l *lockedBuffer) lines(t *testing.T) []map[string]any {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(l.b.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("audit line %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

// tracedStdio serves stdio on a local provider that runs bash on the host,
// with tp (nil: no traces), and returns what sends a line and reads the
// answer, the audit log and the server.
func tracedStdio(t *testing.T, tp trace.TracerProvider) (call func(line string) map[string]any, log *lockedBuffer, srv *Server) {
	t.Helper()
	state := t.TempDir()
	lp, err := local.New(local.Config{StateDir: state, AllowHostBash: true})
	if err != nil {
		t.Fatal(err)
	}
	log = &lockedBuffer{}
	srv = New(Config{Provider: lp, Audit: audit.NewWriter(log), Limits: tools.DefaultLimits(), StateDir: state, Tracer: tp})
	t.Cleanup(func() { srv.Close(); lp.Close() })
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	go srv.ServeStdio(t.Context(), "default", inR, outW)
	t.Cleanup(func() { inW.Close() })
	replies := bufio.NewReader(outR)
	call = func(line string) map[string]any {
		t.Helper()
		if _, err := io.WriteString(inW, line+"\n"); err != nil {
			t.Fatal(err)
		}
		got := make(chan []byte, 1)
		go func() { b, _ := replies.ReadBytes('\n'); got <- b }()
		select {
		case b := <-got:
			var m map[string]any
			if err := json.Unmarshal(b, &m); err != nil {
				t.Fatalf("answer %q: %v", b, err)
			}
			return m
		case <-time.After(20 * time.Second):
			t.Fatal("no answer in 20 s")
			return nil
		}
	}
	call(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	io.WriteString(inW, `{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n")
	return call, log, srv
}

// attrs are a span's attributes as strings.
func attrs(s sdktrace.ReadOnlySpan) map[string]string {
	out := map[string]string{}
	for _, kv := range s.Attributes() {
		out[string(kv.Key)] = kv.Value.Emit()
	}
	return out
}

// A tool call is a SERVER span named and attributed by the MCP semantic
// conventions, a child of the caller's span its _meta names; the sandbox's
// start and the command are its children; its audit line carries its
// trace id. Nothing the command said or ran is in a span.
func TestTracesOfToolCalls(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	call, log, srv := tracedStdio(t, tp)

	const (
		traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
		caller  = "00f067aa0ba902b7"
		secret  = "s3cr3t-in-the-command"
	)
	res := call(fmt.Sprintf(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"bash",`+
		`"arguments":{"command":"echo %s; exit 3"},"_meta":{"traceparent":"00-%s-%s-01","tracestate":"rojo=00f067aa0ba902b7"}}}`, secret, traceID, caller))
	if r, _ := res["result"].(map[string]any); r == nil || r["isError"] == true {
		t.Fatalf("bash: %v", res)
	}
	spans := exp.GetSpans().Snapshots()
	byName := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		if _, dup := byName[s.Name()]; dup {
			t.Fatalf("two spans named %q", s.Name())
		}
		byName[s.Name()] = s
		for _, kv := range s.Attributes() {
			if strings.Contains(kv.Value.Emit(), secret) {
				t.Errorf("span %q attribute %s holds the command: %q", s.Name(), kv.Key, kv.Value.Emit())
			}
		}
	}
	callSpan, exec, start := byName["tools/call bash"], byName["sandbox exec"], byName["sandbox start"]
	if callSpan == nil || exec == nil || start == nil || len(spans) != 3 {
		t.Fatalf("spans: want tools/call bash, sandbox exec and sandbox start, got %v", names(spans))
	}
	if callSpan.SpanKind() != trace.SpanKindServer {
		t.Errorf("call span kind %v, want server", callSpan.SpanKind())
	}
	if got := callSpan.Parent(); got.TraceID().String() != traceID || got.SpanID().String() != caller || !got.IsRemote() {
		t.Errorf("call span's parent %v, want the caller's %s-%s (remote)", got, traceID, caller)
	}
	if got := callSpan.SpanContext().TraceState().String(); got != "rojo=00f067aa0ba902b7" {
		t.Errorf("tracestate %q, want the caller's", got)
	}
	want := map[string]string{
		"mcp.method.name": "tools/call", "gen_ai.tool.name": "bash", "gen_ai.operation.name": "execute_tool",
		"jsonrpc.request.id": "7", "mcp.protocol.version": "2025-06-18", "mcp.session.id": "stdio",
		"network.transport": "pipe", "sandbox_mcp.thread": "default",
	}
	got := attrs(callSpan)
	for k, v := range want {
		if got[k] != v {
			t.Errorf("call span %s = %q, want %q", k, got[k], v)
		}
	}
	if _, ok := got["error.type"]; ok || got["sandbox_mcp.outcome"] != "" || callSpan.Status().Code.String() != "Unset" {
		t.Errorf("call span of a call that succeeded has error.type %q, outcome %q, status %v", got["error.type"], got["sandbox_mcp.outcome"], callSpan.Status())
	}
	if exec.Parent().SpanID() != callSpan.SpanContext().SpanID() || start.Parent().SpanID() != exec.SpanContext().SpanID() {
		t.Errorf("want call > exec > start, got exec's parent %v, start's %v (call %v)", exec.Parent().SpanID(), start.Parent().SpanID(), callSpan.SpanContext().SpanID())
	}
	if got := attrs(exec)["process.exit.code"]; got != "3" {
		t.Errorf("exec span process.exit.code %q, want 3", got)
	}
	if !start.StartTime().Before(start.EndTime()) || start.StartTime().Before(exec.StartTime()) || start.EndTime().After(exec.EndTime()) {
		t.Errorf("start span %v–%v not within exec %v–%v", start.StartTime(), start.EndTime(), exec.StartTime(), exec.EndTime())
	}

	// Without _meta: a trace of its own. A warm box: no start. An error
	// result: error.type tool_error.
	exp.Reset()
	call(`{"jsonrpc":"2.0","id":"r-8","method":"tools/call","params":{"name":"read_file","arguments":{"path":"missing.txt"}}}`)
	call(`{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"bash","arguments":{"command":"true"}}}`)
	spans = exp.GetSpans().Snapshots()
	if len(spans) != 3 || spans[0].Name() != "tools/call read_file" || spans[1].Name() != "sandbox exec" || spans[2].Name() != "tools/call bash" {
		t.Fatalf("spans: want tools/call read_file, sandbox exec, tools/call bash, got %v", names(spans))
	}
	read := spans[0]
	if read.Parent().IsValid() || read.SpanContext().TraceID().String() == traceID {
		t.Errorf("a call without _meta: want a root span of a new trace, got parent %v", read.Parent())
	}
	if a := attrs(read); a["error.type"] != "tool_error" || a["sandbox_mcp.outcome"] != "error" || a["jsonrpc.request.id"] != "r-8" || read.Status().Code.String() != "Error" {
		t.Errorf("failed read_file: attributes %v, status %v", a, read.Status())
	}

	lines := log.lines(t)
	if len(lines) != 3 {
		t.Fatalf("%d audit lines, want 3", len(lines))
	}
	if lines[0]["trace_id"] != traceID {
		t.Errorf("audit line trace_id %v, want the caller's %s", lines[0]["trace_id"], traceID)
	}
	if lines[1]["trace_id"] != read.SpanContext().TraceID().String() {
		t.Errorf("audit line trace_id %v, want the call's %s", lines[1]["trace_id"], read.SpanContext().TraceID())
	}
	// Every call's JSON-RPC id was let go of.
	n := 0
	srv.tracing.ids.Range(func(any, any) bool { n++; return true })
	if n != 0 {
		t.Errorf("%d JSON-RPC ids still held after the calls ended", n)
	}
}

// A caller's trace that is not sampled is not recorded, but the call is
// still in it: its audit line carries its trace id.
func TestTracesUnsampledCallerKeepsTraceID(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	call, log, _ := tracedStdio(t, sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp)))
	call(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"ls","arguments":{},` +
		`"_meta":{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"}}}`)
	if spans := exp.GetSpans(); len(spans) != 0 {
		t.Errorf("an unsampled caller's call recorded %v", names(spans.Snapshots()))
	}
	if got := log.lines(t)[0]["trace_id"]; got != "0af7651916cd43dd8448eb211c80319c" {
		t.Errorf("audit line trace_id %v, want the caller's", got)
	}
}

// Without a tracer provider no span is made and no audit line names a
// trace, whatever the request's _meta says.
func TestTracesOff(t *testing.T) {
	t.Parallel()
	call, log, srv := tracedStdio(t, nil)
	call(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"bash","arguments":{"command":"true"},` +
		`"_meta":{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}}`)
	if srv.tracing != nil {
		t.Error("a server without a tracer provider has tracing")
	}
	if line := log.lines(t)[0]; line["trace_id"] != nil {
		t.Errorf("audit line of a server without traces has trace_id %v", line["trace_id"])
	}
}

func names(spans []sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name())
	}
	return out
}

// Over HTTP a call's span says so: network.transport tcp, protocol http,
// and the Streamable HTTP session's id.
func TestTracesOverHTTP(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	state := t.TempDir()
	lp, err := local.New(local.Config{StateDir: state})
	if err != nil {
		t.Fatal(err)
	}
	stateless := false
	srv := New(Config{Provider: lp, Limits: tools.DefaultLimits(), StateDir: state, HTTP: &HTTPConfig{Stateless: &stateless},
		Tracer: sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { srv.ServeHTTP(ctx, ln); srv.Close(); lp.Close(); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	session := ""
	post := func(body string) string {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://"+ln.Addr().String()+"/mcp", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set(ThreadHeader, "web")
		if session != "" {
			req.Header.Set("Mcp-Session-Id", session)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode >= 300 {
			t.Fatalf("%s: %s", resp.Status, b)
		}
		if session == "" {
			session = resp.Header.Get("Mcp-Session-Id")
		}
		return string(b)
	}
	post(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	post(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	if out := post(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"ls","arguments":{}}}`); !strings.Contains(out, `"result"`) {
		t.Fatalf("ls: %s", out)
	}
	spans := exp.GetSpans().Snapshots()
	if len(spans) != 1 || session == "" {
		t.Fatalf("spans %v, session %q", names(spans), session)
	}
	a := attrs(spans[0])
	if a["network.transport"] != "tcp" || a["network.protocol.name"] != "http" || a["mcp.session.id"] != session ||
		a["mcp.protocol.version"] != "2025-06-18" || a["sandbox_mcp.thread"] != "web" || a["jsonrpc.request.id"] != "2" {
		t.Errorf("attributes %v (session %s)", a, session)
	}
}
