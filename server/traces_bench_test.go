package server_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/server"
	"github.com/sandbox-mcp/sandbox-mcp/telemetry"
)

// BenchmarkTracingOverhead measures what traces cost a warm read_file
// through the server, as BenchmarkMetricsOverhead does for metrics: two
// servers alike but for Config.Tracer — nil, and the tracer provider
// package telemetry makes for the command (its batch span processor and
// OTLP/HTTP exporter, protobuf) sending to a collector on loopback that
// reads each request's body and answers 200 — called alternately.
// "recorded": every call is sampled (the default sampler, no caller),
// recorded and sent; "unsampled": none is (OTEL_TRACES_SAMPLER
// always_off, as for a caller whose trace is not sampled), what tracing
// costs a call it does not record (its span context, the audit line's
// trace id). Run it with
//
//	go test -run '^$' -bench TracingOverhead -benchtime 5000x -count 5 ./server/
func BenchmarkTracingOverhead(b *testing.B) {
	for _, sampler := range []struct{ name, env string }{{"recorded", ""}, {"unsampled", "always_off"}} {
		b.Run(sampler.name, func(b *testing.B) {
			var bodies atomic.Int64
			collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				bodies.Add(1)
			}))
			b.Cleanup(collector.Close)
			cfg := telemetry.Config{OTLPEndpoint: collector.URL, Version: "bench"}
			env := map[string]string{"OTEL_TRACES_SAMPLER": sampler.env}
			if err := cfg.Validate(func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err != nil {
				b.Fatal(err)
			}
			tr, err := telemetry.New(context.Background(), cfg)
			if err != nil {
				b.Fatal(err)
			}
			off, on := startBench(b, nil), startBench(b, func(c *server.Config) { c.Tracer = tr.TracerProvider() })
			compareBench(b, off, on)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := tr.Shutdown(ctx); err != nil {
				b.Fatal(err)
			}
			// The spans were sent, or none was: the "on" side really
			// traced its calls, as the sampler said.
			if sent := bodies.Load() > 0; sent != (sampler.env == "") {
				b.Fatalf("the collector received %d requests", bodies.Load())
			}
		})
	}
}
