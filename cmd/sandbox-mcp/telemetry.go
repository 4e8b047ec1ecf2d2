package main

import (
	"context"
	"log/slog"

	"github.com/sandbox-mcp/sandbox-mcp/telemetry"
)

// newTracing makes the traces' SDK when the telemetry section or the
// environment names an endpoint (Config.Validate worked it out); nil:
// off, and the server is given no tracer provider. Its start-up line says
// where the spans go.
func newTracing(ctx context.Context, cfg *Config, log *slog.Logger) (*telemetry.Tracing, error) {
	t := cfg.Telemetry
	t.Version, t.Provider, t.Logger = versionString(), cfg.Provider, log
	tr, err := telemetry.New(ctx, t)
	if err != nil {
		return nil, err
	}
	if tr != nil {
		log.Info("sending traces over OTLP/HTTP", "url", tr.URL(), "sampler", tr.Sampler())
	}
	return tr, nil
}
