package supervised

import (
	"context"
	"errors"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// Without a span in the context (traces off) the sandbox's spans cost no
// allocation: a command and a box's start pay a context lookup.
func TestTracesOffAllocateNothing(t *testing.T) {
	ctx := context.Background()
	began, failed := time.Now(), errors.New("x")
	if n := testing.AllocsPerRun(100, func() {
		c, span := childSpan(ctx, spanExec)
		BoxStarted(c, nil, "local", began)
		endExec(span, sandbox.ExecResult{ExitCode: 1}, failed)
	}); n != 0 {
		t.Fatalf("%v allocations a command with traces off, want 0", n)
	}
}

// With a span in the context, the children are made by its tracer
// provider: the box's start, backdated to when it began, within the
// command's span, whose error names a class, never the message.
func TestChildSpans(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	ctx, call := tp.Tracer("test").Start(t.Context(), "tools/call bash")
	began := time.Now().Add(-time.Second)
	c, span := childSpan(ctx, spanExec)
	BoxStarted(c, nil, "local", began)
	endExec(span, sandbox.ExecResult{}, context.DeadlineExceeded)
	call.End()
	spans := exp.GetSpans().Snapshots()
	if len(spans) != 3 || spans[0].Name() != spanStart || spans[1].Name() != spanExec {
		t.Fatalf("spans %v", spans)
	}
	start, exec := spans[0], spans[1]
	if start.Parent().SpanID() != exec.SpanContext().SpanID() || exec.Parent().SpanID() != call.SpanContext().SpanID() {
		t.Error("want call > exec > start")
	}
	if !start.StartTime().Equal(began) {
		t.Errorf("start span begins %v, want when the box's start began, %v", start.StartTime(), began)
	}
	if len(exec.Attributes()) != 1 || exec.Attributes()[0].Value.AsString() != "timeout" || exec.Status().Description != "" {
		t.Errorf("failed exec: attributes %v, status %v", exec.Attributes(), exec.Status())
	}
}
