package kubernetes

import (
	"context"
	"log/slog"
	"sync"

	"k8s.io/klog/v2"
)

var klogOnce sync.Once

// quietKlog sends client-go's own log lines (klog) to the provider's
// logger at debug level, once per process. client-go logs teardown noise
// of exec streams ("Copying stdout failed ... use of closed network
// connection") as errors, and writes it straight to stderr otherwise.
func quietKlog(log *slog.Logger) {
	klogOnce.Do(func() { klog.SetSlogLogger(slog.New(debugHandler{log.Handler()})) })
}

// debugHandler logs every record at debug level.
type debugHandler struct{ h slog.Handler }

func (d debugHandler) Enabled(ctx context.Context, _ slog.Level) bool {
	return d.h.Enabled(ctx, slog.LevelDebug)
}

func (d debugHandler) Handle(ctx context.Context, r slog.Record) error {
	r.Level = slog.LevelDebug
	return d.h.Handle(ctx, r)
}

func (d debugHandler) WithAttrs(as []slog.Attr) slog.Handler { return debugHandler{d.h.WithAttrs(as)} }
func (d debugHandler) WithGroup(name string) slog.Handler    { return debugHandler{d.h.WithGroup(name)} }
