package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"

	"github.com/sandbox-mcp/sandbox-mcp/audit"
	"github.com/sandbox-mcp/sandbox-mcp/egress"
	"github.com/sandbox-mcp/sandbox-mcp/metrics"
	"github.com/sandbox-mcp/sandbox-mcp/server"
)

// newMetrics makes the metric set when metrics.addr is set (nil: off, and
// nothing below is wired): the providers tell it of the boxes they start,
// and *sink becomes one that counts the egress proxy's connections as
// their audit lines pass.
func newMetrics(cfg *Config, sink *audit.Sink) *metrics.Metrics {
	if cfg.Metrics.Addr == "" {
		return nil
	}
	m := metrics.New(versionString(), cfg.Provider)
	cfg.Local.Metrics, cfg.Docker.Metrics, cfg.Kubernetes.Metrics = m, m, m
	*sink = proxyCounter{Sink: *sink, m: m}
	return m
}

// serveMetrics listens on metrics.addr and serves the metrics there until
// ctx ends or stop is called. Its start-up line names the address bound
// (an ADDR of port 0 binds a free one).
func serveMetrics(ctx context.Context, cfg *Config, m *metrics.Metrics, log *slog.Logger) (stop func(), err error) {
	name := "metrics.addr"
	if f := cfg.flags[name]; f != "" {
		name = f
	}
	ln, err := net.Listen("tcp", cfg.Metrics.Addr)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	loopback, _ := server.IsLoopback(ln.Addr().String())
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := m.Serve(ctx, ln); err != nil {
			log.Error("metrics: no longer served", "err", err)
		}
	}()
	log.Info("serving metrics", "addr", ln.Addr().String(), "path", metrics.Path, "loopback", loopback)
	return func() { cancel(); <-done }, nil
}

// proxyCounter is the audit sink with the egress proxy's lines (tool
// "network": one per tunnel or plain request, refused ones too) counted
// by outcome and bytes as they are recorded. The proxy writes its lines
// and knows nothing of metrics; the line is counted whether or not it
// could be written (the connection was made, or refused, all the same).
type proxyCounter struct {
	audit.Sink
	m *metrics.Metrics
}

func (s proxyCounter) Record(e audit.Event) error {
	err := s.Sink.Record(e)
	if e.Tool == egress.Tool {
		s.m.ProxyConnection(e.Outcome, argInt(e.Args["bytes_up"]), argInt(e.Args["bytes_down"]))
	}
	return err
}

// argInt is an audit line's count.
func argInt(v any) int64 {
	switch n := v.(type) {
	case int64:
		return n
	case int:
		return int64(n)
	}
	return 0
}
