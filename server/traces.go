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

// serverKind is the kind of a call's span.
var serverKind = trace.WithSpanKind(trace.SpanKindServer)

// start begins the call's span (c.span), named name, a child of the
// caller's span that the request's _meta names, and returns the context
// that carries it to the tool, the sandbox and the command. Its
// attributes are set once, when it ends: an attribute set later costs
// the SDK a copy of those before it, and no sampler here reads them.
func (t *tracing) start(ctx context.Context, c *call, name string) context.Context {
	ctx, c.span = t.tracer.Start(callerContext(ctx, c.req.Params.Meta), name, serverKind)
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

// bound notes the call's trace id in its audit line (c.ev, just made by
// bindThread).
func (c *call) bound() {
	if sc := c.span.SpanContext(); sc.HasTraceID() {
		c.ev.TraceID = sc.TraceID().String()
	}
}

// end ends the call's span with its attributes: what the request says
// (ctx, the handler's), the thread, and how the call failed if it did. A
// tool's error result is a failed call for the conventions: error.type
// tool_error (the JSON-RPC call itself succeeded), and the outcome as the
// audit line says it (error, denied, timeout) is the status's
// description and sandbox_mcp.outcome.
func (t *tracing) end(ctx context.Context, c *call) {
	if !c.span.IsRecording() {
		c.span.End()
		return
	}
	attrs := make([]attribute.KeyValue, 0, 11)
	attrs = append(attrs,
		attrMethod.String(string(mcp.MethodToolsCall)),
		attrOperation.String("execute_tool"),
		attrTool.String(c.tool.Def.Name),
		attrThread.String(c.ev.Thread))
	if id, ok := t.ids.Load(ctx); ok && requestID(id) != "" {
		attrs = append(attrs, attrRequestID.String(requestID(id)))
	}
	// The protocol version is the request's own on 2026-07-28, else its
	// session's; 2026-07-28 has no session, and the convention sets no
	// session id then.
	info, cs := mcpserver.RequestProtocolInfoFromContext(ctx), mcpserver.ClientSessionFromContext(ctx)
	switch {
	case info != nil && info.Modern:
		attrs = append(attrs, attrProtocolVersion.String(info.ProtocolVersion))
	case cs != nil:
		if v, ok := cs.(mcpserver.SessionWithProtocolVersion); ok && v.ProtocolVersion() != "" {
			attrs = append(attrs, attrProtocolVersion.String(v.ProtocolVersion()))
		}
		attrs = append(attrs, attrSession.String(cs.SessionID()))
	}
	if _, overHTTP := ctx.Value(credentialKey{}).(string); overHTTP {
		attrs = append(attrs, attrTransport.String("tcp"), attrProtocolName.String("http"))
	} else {
		attrs = append(attrs, attrTransport.String("pipe"))
	}
	if c.outcome != audit.OK {
		attrs = append(attrs, attrErrorType.String("tool_error"), attrOutcome.String(c.outcome))
		c.span.SetStatus(codes.Error, c.outcome)
	}
	c.span.SetAttributes(attrs...)
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
