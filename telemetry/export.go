package telemetry

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// exporter posts spans to an OTLP/HTTP collector, protobuf bodies
// (sdktrace.SpanExporter). It is this package's, not the SDK's
// otlptracehttp: that one shares its configuration with the gRPC exporter
// and links gRPC, and gRPC links golang.org/x/net/trace, whose templates
// make the linker keep every exported method of every type — 33 MB more
// server (49.7 to 82.5 MB), for a request this file writes in a page.
type exporter struct {
	url     string
	headers map[string]string
	gzip    bool
	timeout time.Duration
	client  *http.Client
	stopped atomic.Bool
}

var _ sdktrace.SpanExporter = (*exporter)(nil)

// newExporter posts to url with the headers, compression, timeout and TLS
// settings given; a proxy as the environment says (HTTPS_PROXY).
func newExporter(url string, headers map[string]string, gz bool, timeout time.Duration, tlsCfg *tls.Config) *exporter {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = tlsCfg
	return &exporter{url: url, headers: headers, gzip: gz, timeout: timeout, client: &http.Client{Transport: tr}}
}

// ExportSpans sends one batch, trying again — while the export's timeout
// lasts — when the collector says it is busy or unavailable (429, 502,
// 503, 504), after what its Retry-After asks or a growing pause.
func (e *exporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	if len(spans) == 0 || e.stopped.Load() {
		return nil
	}
	body, err := exportRequest(spans)
	if err != nil {
		return fmt.Errorf("traces: %w", err)
	}
	if e.gzip {
		var b bytes.Buffer
		w := gzip.NewWriter(&b)
		w.Write(body)
		w.Close()
		body = b.Bytes()
	}
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	pause := 100 * time.Millisecond
	for {
		wait, err := e.post(ctx, body)
		if err == nil || wait < 0 {
			return err
		}
		if wait == 0 {
			wait, pause = pause, min(2*pause, 5*time.Second)
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
	}
}

// post sends body once. A failure worth another try says how long to
// wait first (0: as the caller sees fit); wait < 0: not worth one.
func (e *exporter) post(ctx context.Context, body []byte) (wait time.Duration, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url, bytes.NewReader(body))
	if err != nil {
		return -1, fmt.Errorf("traces: %w", err)
	}
	for k, v := range e.headers {
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	if e.gzip {
		req.Header.Set("Content-Encoding", "gzip")
	}
	resp, err := e.client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("traces: %w", err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // the connection is kept
	switch code := resp.StatusCode; {
	case code >= 200 && code < 300:
		return -1, nil // a partial success's rejected spans are not sent again
	case code == http.StatusTooManyRequests || code == http.StatusBadGateway || code == http.StatusServiceUnavailable || code == http.StatusGatewayTimeout:
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
			wait = time.Duration(s) * time.Second
		}
		return wait, fmt.Errorf("traces: %s answered %s", e.url, resp.Status)
	default:
		return -1, fmt.Errorf("traces: %s answered %s: %.200q", e.url, resp.Status, msg)
	}
}

// Shutdown stops the exporter: later batches are dropped.
func (e *exporter) Shutdown(context.Context) error {
	e.stopped.Store(true)
	e.client.CloseIdleConnections()
	return nil
}
