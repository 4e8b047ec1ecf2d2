package main

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/internal/testkit"
)

// noOTel is the server's environment without any OpenTelemetry setting
// the test process may have (a later KEY= wins over os.Environ's).
var noOTel = []string{
	"OTEL_EXPORTER_OTLP_ENDPOINT=", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=", "OTEL_EXPORTER_OTLP_PROTOCOL=",
	"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=", "OTEL_TRACES_SAMPLER=", "OTEL_TRACES_EXPORTER=", "OTEL_SDK_DISABLED=",
	"OTEL_SERVICE_NAME=", "OTEL_RESOURCE_ATTRIBUTES=",
}

// callTraced calls bash with the caller's trace context in _meta, as an
// instrumented MCP client propagates it (semantic conventions for MCP).
func callTraced(t *testing.T, p *proc, traceparent string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	res, err := p.cs.CallTool(ctx, &mcp.CallToolParams{Name: "bash", Arguments: map[string]any{"command": "echo traced"},
		Meta: mcp.Meta{"traceparent": traceparent}})
	if err != nil || res.IsError {
		t.Fatalf("bash: %v %+v\nstderr:\n%s", err, res, p.stderr)
	}
}

// With OTEL_EXPORTER_OTLP_ENDPOINT set, the real binary sends a tool
// call's span to an OTLP/HTTP collector — in the caller's trace, a child
// of the span _meta named — with the sandbox's start and the command as
// its children, all sent by the time the process has exited; the call's
// audit line carries the trace id.
func TestE2ETracesOverOTLP(t *testing.T) {
	t.Parallel()
	rcv := testkit.NewOTLPReceiver(t)
	p := start(t, opts{isolation: "none", env: append(noOTel, "OTEL_EXPORTER_OTLP_ENDPOINT="+rcv.URL)})
	const traceID, caller = "5bf92f3577b34da6a3ce929d0e0e4736", "10f067aa0ba902b7"
	callTraced(t, p, "00-"+traceID+"-"+caller+"-01")
	if err := p.close(); err != nil {
		t.Fatalf("close: %v\nstderr:\n%s", err, p.stderr)
	}
	if !strings.Contains(p.stderr.String(), "sending traces over OTLP/HTTP") || !strings.Contains(p.stderr.String(), rcv.URL+"/v1/traces") {
		t.Errorf("no start-up line naming where traces go:\n%s", p.stderr)
	}
	n, bad := rcv.Requests()
	if n == 0 || len(bad) != 0 {
		t.Fatalf("%d requests, %v not OTLP/HTTP protobuf trace exports", n, bad)
	}
	byName := map[string]testkit.Span{}
	for _, s := range rcv.Spans() {
		byName[s.Name] = s
	}
	call, exec, boxStart := byName["tools/call bash"], byName["sandbox exec"], byName["sandbox start"]
	if call.Name == "" || exec.Name == "" || boxStart.Name == "" {
		t.Fatalf("spans %v: want tools/call bash, sandbox exec, sandbox start", rcv.Spans())
	}
	if call.TraceID != traceID || call.ParentID != caller || call.Kind != "SPAN_KIND_SERVER" {
		t.Errorf("call span trace %s parent %s kind %s; want %s, %s, server", call.TraceID, call.ParentID, call.Kind, traceID, caller)
	}
	// go-sdk's client speaks 2026-07-28, which has no session: the
	// convention sets no mcp.session.id then.
	if a := call.Attrs; a["mcp.method.name"] != "tools/call" || a["gen_ai.tool.name"] != "bash" || a["gen_ai.operation.name"] != "execute_tool" ||
		a["mcp.protocol.version"] != "2026-07-28" || a["mcp.session.id"] != "" || a["network.transport"] != "pipe" ||
		a["error.type"] != "" || a["sandbox_mcp.thread"] != "default" || a["jsonrpc.request.id"] == "" {
		t.Errorf("call span attributes %v", a)
	}
	if exec.TraceID != traceID || exec.ParentID != call.SpanID || boxStart.ParentID != exec.SpanID || exec.Attrs["process.exit.code"] != "0" {
		t.Errorf("want call %s > exec %+v > start %+v", call.SpanID, exec, boxStart)
	}
	if r := call.Resource; r["service.name"] != "sandbox-mcp" || r["service.version"] == "" || r["sandbox_mcp.provider"] != "local" {
		t.Errorf("resource %v: want service.name sandbox-mcp, a version and sandbox_mcp.provider local", r)
	}
	lines, _ := auditLines(t, p.auditPath)
	if len(lines) != 1 || lines[0]["trace_id"] != traceID {
		t.Errorf("audit lines %v: want one whose trace_id is %s", lines, traceID)
	}
}

// Without an endpoint no tracing is set up: nothing is sent anywhere (not
// to the exporter's default, localhost:4318), no start-up line speaks of
// traces, and audit lines have no trace_id, whatever _meta says. The
// SDK's own switch turns traces off with an endpoint set.
func TestE2ETracesOff(t *testing.T) {
	t.Parallel()
	// Whatever connects to the default port while this runs.
	var dialed atomic.Int64
	if ln, err := net.Listen("tcp", "127.0.0.1:4318"); err == nil {
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				dialed.Add(1)
				c.Close()
			}
		}()
	} else {
		t.Logf("127.0.0.1:4318 is taken (%v): connections to the exporter's default are not watched", err)
	}
	rcv := testkit.NewOTLPReceiver(t)
	for _, tc := range []struct {
		name string
		env  []string
	}{
		{"no endpoint", noOTel},
		{"OTEL_SDK_DISABLED", append(append([]string(nil), noOTel...), "OTEL_EXPORTER_OTLP_ENDPOINT="+rcv.URL, "OTEL_SDK_DISABLED=true")},
		{"OTEL_TRACES_EXPORTER none", append(append([]string(nil), noOTel...), "OTEL_EXPORTER_OTLP_ENDPOINT="+rcv.URL, "OTEL_TRACES_EXPORTER=none")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := start(t, opts{isolation: "none", env: tc.env})
			callTraced(t, p, "00-6bf92f3577b34da6a3ce929d0e0e4736-20f067aa0ba902b7-01")
			if err := p.close(); err != nil {
				t.Fatal(err)
			}
			if strings.Contains(p.stderr.String(), "traces") {
				t.Errorf("stderr speaks of traces:\n%s", p.stderr)
			}
			lines, _ := auditLines(t, p.auditPath)
			if len(lines) != 1 || lines[0]["trace_id"] != nil {
				t.Errorf("audit lines %v: want one without trace_id", lines)
			}
		})
	}
	if n, _ := rcv.Requests(); n != 0 {
		t.Errorf("%d requests to the collector with traces off", n)
	}
	if n := dialed.Load(); n != 0 {
		t.Errorf("%d connections to 127.0.0.1:4318 with traces off", n)
	}
}

// gRPC is not built in: asked for, start-up stops with one line naming the
// variable and what is supported; a bad telemetry.otlp_endpoint names the
// file, the line and the key.
func TestE2ETracesRefusedSettings(t *testing.T) {
	t.Parallel()
	state := filepath.Join(t.TempDir(), "state")
	env := append([]string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318"}, "OTEL_EXPORTER_OTLP_PROTOCOL=grpc")
	_, stderr, code := runEnv(t, env, "--state-dir", state, "--allow-host-bash")
	want := "sandbox-mcp: OTEL_EXPORTER_OTLP_PROTOCOL grpc: traces go over OTLP/HTTP only (no gRPC exporter is built in): want http/protobuf, and the collector's HTTP port (4318)\n"
	if code != 2 || stderr != want {
		t.Errorf("grpc: exit %d, stderr %q\nwant exit 2, %q", code, stderr, want)
	}
	file := writeConfig(t, "log_level: info\ntelemetry:\n  otlp_endpoint: 127.0.0.1:4318\n")
	_, stderr, code = runEnv(t, nil, "--config", file, "--state-dir", state)
	want = "sandbox-mcp: config " + file + ` line 3: telemetry.otlp_endpoint "127.0.0.1:4318": want an http or https URL with a host and no credentials or query, such as http://127.0.0.1:4318` + "\n"
	if code != 2 || stderr != want {
		t.Errorf("bad endpoint: exit %d, stderr %q\nwant exit 2, %q", code, stderr, want)
	}
}
