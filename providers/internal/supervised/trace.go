package supervised

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// The sandbox's part in a call's trace (SPEC §19): the box's start and
// the command are children of the call's span, which the server put in
// the call's context. They are made by the tracer provider that made that
// span, so that no global is needed; a context without a valid span (no
// traces) makes none and costs a context lookup.

// tracerName is the instrumentation scope of the sandbox's spans.
const tracerName = "github.com/sandbox-mcp/sandbox-mcp/providers/internal/supervised"

// The spans' names and attributes. process.exit.code is the semantic
// conventions'; the rest is this server's own.
const (
	spanExec  = "sandbox exec"
	spanStart = "sandbox start"

	attrExitCode   = attribute.Key("process.exit.code")
	attrErrorType  = attribute.Key("error.type")
	attrTimedOut   = attribute.Key("sandbox_mcp.exec.timed_out")
	attrJob        = attribute.Key("sandbox_mcp.exec.job")
	attrBackground = attribute.Key("sandbox_mcp.exec.background")
)

// childSpan starts a span of the call in ctx (of kind internal), when
// ctx carries one.
func childSpan(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	parent := trace.SpanFromContext(ctx)
	if !parent.SpanContext().IsValid() {
		return ctx, parent
	}
	return parent.TracerProvider().Tracer(tracerName).Start(ctx, name, opts...)
}

// BoxStarted is told of a box made or started for a call, from began to
// now: it tells the metrics (m; nil: none), and the call's trace in ctx
// as a span of that time (a box found running is neither). Each
// provider's start path calls it where the box runs. (The provider is
// the traces' resource's: the same for every span of a server.)
func BoxStarted(ctx context.Context, m Metrics, provider string, began time.Time) {
	if m != nil {
		m.BoxStarted(provider, time.Since(began))
	}
	if !trace.SpanFromContext(ctx).SpanContext().IsValid() {
		return
	}
	_, span := childSpan(ctx, spanStart, trace.WithTimestamp(began))
	span.End()
}

// endExec ends a command's span with what became of it: its exit code,
// or that it timed out, became a job, or failed to run.
func endExec(span trace.Span, res sandbox.ExecResult, err error) {
	if span.IsRecording() {
		switch {
		case err != nil:
			span.SetAttributes(attrErrorType.String(errorType(err)))
			span.SetStatus(codes.Error, "")
		case res.Job != "":
			span.SetAttributes(attrJob.String(res.Job))
		case res.TimedOut:
			span.SetAttributes(attrTimedOut.Bool(true))
		default:
			span.SetAttributes(attrExitCode.Int(res.ExitCode))
		}
	}
	span.End()
}

// errorType names the class of err for error.type: a low-cardinality
// word, never its message (which may name host paths).
func errorType(err error) string {
	switch {
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, sandbox.ErrBashDisabled):
		return "bash_disabled"
	}
	return "_OTHER"
}
