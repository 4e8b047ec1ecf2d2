package telemetry

import (
	"context"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// countingExporter counts the spans and the batches it is given.
type countingExporter struct {
	mu       sync.Mutex
	spans    int
	batches  []int
	shutdown bool
}

func (e *countingExporter) ExportSpans(_ context.Context, s []sdktrace.ReadOnlySpan) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.spans += len(s)
	e.batches = append(e.batches, len(s))
	return nil
}

func (e *countingExporter) Shutdown(context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.shutdown = true
	return nil
}

func (e *countingExporter) counts() (int, []int, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.spans, append([]int(nil), e.batches...), e.shutdown
}

// spansThrough ends n spans through a provider whose processor is b.
func spansThrough(b *batcher, sampler sdktrace.Sampler, n int) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(b), sdktrace.WithSampler(sampler))
	tr := tp.Tracer("test")
	for range n {
		_, s := tr.Start(context.Background(), "x")
		s.End()
	}
}

// Spans go out a batch at a time once a batch is full — long before the
// interval — and the rest at Shutdown, which shuts the exporter down;
// unsampled spans are not kept; beyond the queue spans are dropped and
// said so.
func TestBatcher(t *testing.T) {
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "3600000")
	t.Setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "10")
	t.Setenv("OTEL_BSP_MAX_QUEUE_SIZE", "25")
	exp := &countingExporter{}
	var dropped int
	var dmu sync.Mutex
	b := newBatcher(exp, func(n int) { dmu.Lock(); dropped += n; dmu.Unlock() })
	spansThrough(b, sdktrace.AlwaysSample(), 10)
	deadline := time.Now().Add(5 * time.Second)
	for n, _, _ := exp.counts(); n < 10; n, _, _ = exp.counts() {
		if time.Now().After(deadline) {
			t.Fatalf("a full batch was not exported within 5 s (the interval is an hour): %d spans out", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	spansThrough(b, sdktrace.NeverSample(), 50)
	spansThrough(b, sdktrace.AlwaysSample(), 3)
	if err := b.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	n, batches, shut := exp.counts()
	if n != 13 || !shut {
		t.Fatalf("exported %d spans in %v (shut down %v), want 13 and the exporter shut down", n, batches, shut)
	}
	for _, s := range batches {
		if s > 10 {
			t.Fatalf("a batch of %d spans, over OTEL_BSP_MAX_EXPORT_BATCH_SIZE 10", s)
		}
	}
	// After Shutdown nothing is kept; a queue that overflows drops.
	spansThrough(b, sdktrace.AlwaysSample(), 5)
	b.ForceFlush(context.Background())
	if n, _, _ := exp.counts(); n != 13 {
		t.Fatalf("spans ended after Shutdown were exported: %d", n)
	}
	exp2 := &countingExporter{}
	var dropped2 int
	b2 := newBatcher(exp2, func(n int) { dmu.Lock(); dropped2 += n; dmu.Unlock() })
	b2.batch = 1000 // never full: only the queue's bound acts
	spansThrough(b2, sdktrace.AlwaysSample(), 30)
	b2.Shutdown(context.Background())
	if n, _, _ := exp2.counts(); n != 25 {
		t.Fatalf("a queue of 25 exported %d of 30 spans", n)
	}
	dmu.Lock()
	defer dmu.Unlock()
	if dropped2 != 5 || dropped != 5 {
		t.Fatalf("dropped spans said: %d beyond the queue and %d after Shutdown, want 5 and 5", dropped2, dropped)
	}
}

// The batcher as the SDK's tests would see it: every span ended reaches
// an in-memory exporter by ForceFlush.
func TestBatcherForceFlush(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	b := newBatcher(exp, nil)
	defer b.Shutdown(context.Background())
	spansThrough(b, sdktrace.AlwaysSample(), 7)
	if err := b.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := len(exp.GetSpans()); got != 7 {
		t.Fatalf("after ForceFlush %d spans exported, want 7", got)
	}
}
