package server

import (
	"context"
	"strconv"
	"sync"

	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/sandbox-mcp/sandbox-mcp/audit"
)

// The server's part in traces (Config.Tracer, SPEC §19): each tool call is
// a span of kind SERVER, named and attributed as the OpenTelemetry
// semantic conventions for MCP say (gen-ai/mcp.md, "Server"), whose parent
// is the caller's span named by the request's params._meta (traceparent,
// tracestate: W3C Trace Context, SEP-414). The providers make the call's
// children — the sandbox's start, the command — from the span in the
// call's context. Nothing here runs without a tracer provider: the call
// path pays a nil check.

// tracerName is the instrumentation scope of the server's spans.
const tracerName = "github.com/sandbox-mcp/sandbox-mcp/server"

// The attributes of a call's span: the semantic conventions' (MCP,
// GenAI, JSON-RPC, network, error), and this server's own under
// sandbox_mcp.
const (
	attrMethod          = attribute.Key("mcp.method.name")
	attrProtocolVersion = attribute.Key("mcp.protocol.version")
	attrSession         = attribute.Key("mcp.session.id")
	attrOperation       = attribute.Key("gen_ai.operation.name")
	attrTool            = attribute.Key("gen_ai.tool.name")
	attrRequestID       = attribute.Key("jsonrpc.request.id")
	attrTransport       = attribute.Key("network.transport")
	attrProtocolName    = attribute.Key("network.protocol.name")
	attrErrorType       = attribute.Key("error.type")
	attrThread          = attribute.Key("sandbox_mcp.thread")
	attrProvider        = attribute.Key("sandbox_mcp.provider")
	attrOutcome         = attribute.Key("sandbox_mcp.outcome")
)

// tracing makes the calls' spans.
type tracing struct {
	tracer trace.Tracer
	// ids holds the JSON-RPC id of each tools/call in flight, by its
	// context: mcp-go gives it to its hooks, not to the handler, and
	// calls both with the same context (the request's own).
	ids sync.Map
}

// newTracing makes the calls' spans with tp, and has hooks note each
// call's JSON-RPC id for its span.
func newTracing(tp trace.TracerProvider, version string, hooks *mcpserver.Hooks) *tracing {
	t := &tracing{tracer: tp.Tracer(tracerName, trace.WithInstrumentationVersion(version))}
	hooks.AddBeforeCallTool(func(ctx context.Context, id any, _ *mcp.CallToolRequest) {
		if id != nil {
			t.ids.Store(ctx, id)
		}
	})
	hooks.AddAfterCallTool(func(ctx context.Context, _ any, _ *mcp.CallToolRequest, _ any) { t.ids.Delete(ctx) })
	hooks.AddOnError(func(ctx context.Context, _ any, method mcp.MCPMethod, _ any, _ error) {
		if method == mcp.MethodToolsCall {
			t.ids.Delete(ctx)
		}
	})
	return t
}

// start begins the call's span (c.span), a child of the caller's span
// that the request's _meta names, and returns the context that carries
// it to the tool, the sandbox and the command.
func (t *tracing) start(ctx context.Context, c *call) context.Context {
	attrs := make([]attribute.KeyValue, 0, 8)
	attrs = append(attrs,
		attrMethod.String(string(mcp.MethodToolsCall)),
		attrOperation.String("execute_tool"),
		attrTool.String(c.tool.Def.Name))
	if id, ok := t.ids.Load(ctx); ok && requestID(id) != "" {
		attrs = append(attrs, attrRequestID.String(requestID(id)))
	}
	if v := mcpserver.RequestProtocolVersion(ctx); v != "" {
		attrs = append(attrs, attrProtocolVersion.String(v))
	}
	// 2026-07-28 has no session: the convention sets none then.
	if cs := mcpserver.ClientSessionFromContext(ctx); cs != nil && !mcpserver.IsModernRequest(ctx) {
		attrs = append(attrs, attrSession.String(cs.SessionID()))
	}
	if _, overHTTP := ctx.Value(credentialKey{}).(string); overHTTP {
		attrs = append(attrs, attrTransport.String("tcp"), attrProtocolName.String("http"))
	} else {
		attrs = append(attrs, attrTransport.String("pipe"))
	}
	ctx = callerContext(ctx, c.req.Params.Meta)
	ctx, c.span = t.tracer.Start(ctx, "tools/call "+c.tool.Def.Name,
		trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
	return ctx
}

// callerContext is ctx with the caller's span context that _meta names
// (traceparent, tracestate), when it names a valid one.
func callerContext(ctx context.Context, meta *mcp.Meta) context.Context {
	if meta == nil {
		return ctx
	}
	carrier := propagation.MapCarrier{}
	for _, k := range []string{"traceparent", "tracestate"} {
		if v, ok := meta.AdditionalFields[k].(string); ok {
			carrier[k] = v
		}
	}
	if len(carrier) == 0 {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, carrier)
}

// bound notes the call's thread on its span and its trace id in its audit
// line (c.ev, just made by bindThread).
func (c *call) bound() {
	if sc := c.span.SpanContext(); sc.HasTraceID() {
		c.ev.TraceID = sc.TraceID().String()
	}
	if c.span.IsRecording() {
		c.span.SetAttributes(attrThread.String(c.ev.Thread), attrProvider.String(c.ev.Provider))
	}
}

// end ends the call's span with its outcome, as its audit line says it.
// A tool's error result is a failed call for the conventions: error.type
// tool_error (the JSON-RPC call itself succeeded).
func (t *tracing) end(c *call) {
	if c.span.IsRecording() {
		c.span.SetAttributes(attrOutcome.String(c.outcome))
		if c.outcome != audit.OK {
			c.span.SetAttributes(attrErrorType.String("tool_error"))
			c.span.SetStatus(codes.Error, c.outcome)
		}
	}
	c.span.End()
}

// requestID is a JSON-RPC id as the convention writes it — a number as
// its digits, a string as it is — from mcp-go's decoding of it.
func requestID(id any) string {
	switch v := id.(type) {
	case string:
		return v
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	return "" // JSON has no other id

}
