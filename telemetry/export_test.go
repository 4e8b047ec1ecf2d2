package telemetry

import (
	"compress/gzip"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// decode reads an ExportTraceServiceRequest (field 1: resource_spans).
func decode(t *testing.T, b []byte) []*tracepb.ResourceSpans {
	t.Helper()
	var out []*tracepb.ResourceSpans
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || num != 1 || typ != protowire.BytesType {
			t.Fatalf("field %d type %d: want only resource_spans (1, bytes)", num, typ)
		}
		m, k := protowire.ConsumeBytes(b[n:])
		if k < 0 {
			t.Fatal(protowire.ParseError(k))
		}
		rs := &tracepb.ResourceSpans{}
		if err := proto.Unmarshal(m, rs); err != nil {
			t.Fatal(err)
		}
		out = append(out, rs)
		b = b[n+k:]
	}
	return out
}

// Every part of a span reaches OTLP: ids, parent, flags, kind, times,
// attributes of every type, events, links, status; spans of one scope
// share a ScopeSpans.
func TestExportRequestHasTheWholeSpan(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	tr := tp.Tracer("scope", trace.WithInstrumentationVersion("v1"))
	remote := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 2}, SpanID: trace.SpanID{3}, TraceFlags: trace.FlagsSampled, Remote: true})
	ctx := trace.ContextWithRemoteSpanContext(t.Context(), remote)
	ctx, parent := tr.Start(ctx, "tools/call bash", trace.WithSpanKind(trace.SpanKindServer), trace.WithLinks(trace.Link{SpanContext: remote}))
	_, child := tr.Start(ctx, "sandbox exec")
	child.SetAttributes(attribute.Bool("b", true), attribute.Int("i", -3), attribute.Float64("f", 1.5), attribute.String("s", "x"),
		attribute.StringSlice("ss", []string{"a", "b"}), attribute.Int64Slice("is", []int64{1, 2}))
	child.AddEvent("oom", trace.WithAttributes(attribute.Int("kills", 1)))
	child.SetStatus(codes.Error, "timeout")
	child.End()
	parent.End()

	body, err := exportRequest(exp.GetSpans().Snapshots())
	if err != nil {
		t.Fatal(err)
	}
	rss := decode(t, body)
	if len(rss) != 1 || len(rss[0].ScopeSpans) != 1 || len(rss[0].ScopeSpans[0].Spans) != 2 {
		t.Fatalf("want one resource, one scope, two spans: %v", rss)
	}
	if sc := rss[0].ScopeSpans[0].Scope; sc.Name != "scope" || sc.Version != "v1" {
		t.Errorf("scope %v", sc)
	}
	c, p := rss[0].ScopeSpans[0].Spans[0], rss[0].ScopeSpans[0].Spans[1]
	if hex.EncodeToString(p.TraceId) != remote.TraceID().String() || hex.EncodeToString(p.ParentSpanId) != remote.SpanID().String() ||
		p.Kind != tracepb.Span_SPAN_KIND_SERVER || p.Flags != 0x301 || len(p.Links) != 1 || hex.EncodeToString(p.Links[0].SpanId) != remote.SpanID().String() {
		t.Errorf("server span %v", p)
	}
	if string(c.ParentSpanId) != string(p.SpanId) || c.Kind != tracepb.Span_SPAN_KIND_INTERNAL || c.Flags != 0x101 ||
		c.StartTimeUnixNano == 0 || c.EndTimeUnixNano < c.StartTimeUnixNano {
		t.Errorf("child span %v", c)
	}
	if c.Status.Code != tracepb.Status_STATUS_CODE_ERROR || c.Status.Message != "timeout" || len(c.Events) != 1 || c.Events[0].Name != "oom" ||
		c.Events[0].Attributes[0].Value.GetIntValue() != 1 {
		t.Errorf("status %v, events %v", c.Status, c.Events)
	}
	got := map[string]*commonpb.AnyValue{}
	for _, kv := range c.Attributes {
		got[kv.Key] = kv.Value
	}
	if !got["b"].GetBoolValue() || got["i"].GetIntValue() != -3 || got["f"].GetDoubleValue() != 1.5 || got["s"].GetStringValue() != "x" ||
		len(got["ss"].GetArrayValue().GetValues()) != 2 || got["ss"].GetArrayValue().Values[1].GetStringValue() != "b" ||
		got["is"].GetArrayValue().Values[1].GetIntValue() != 2 {
		t.Errorf("attributes %v", c.Attributes)
	}
}

// The exporter's environment: headers (percent-decoded), gzip, and a
// collector that is briefly unavailable is tried again.
func TestExporterHeadersGzipRetry(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var raw []byte
	calls := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if calls == 1 {
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		if r.Header.Get("Authorization") != "Bearer a b" || r.Header.Get("X-Team") != "ops" || r.Header.Get("Content-Encoding") != "gzip" {
			http.Error(w, "headers "+r.Header.Get("Authorization"), http.StatusBadRequest)
			return
		}
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		raw, _ = io.ReadAll(zr)
	}))
	t.Cleanup(srv.Close)
	env := map[string]string{
		envEndpoint:                      srv.URL,
		"OTEL_EXPORTER_OTLP_HEADERS":     "Authorization=Bearer%20a%20b, X-Team = ops",
		"OTEL_EXPORTER_OTLP_COMPRESSION": "gzip",
	}
	c := Config{}
	if err := c.Validate(func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err != nil {
		t.Fatal(err)
	}
	tr, err := New(t.Context(), c)
	if err != nil {
		t.Fatal(err)
	}
	_, span := tr.TracerProvider().Tracer("t").Start(t.Context(), "x")
	span.End()
	if err := tr.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if calls != 2 || raw == nil {
		t.Fatalf("%d requests, the second taken %v: want the span on the second", calls, raw != nil)
	}
	if got := decode(t, raw); len(got) != 1 || got[0].ScopeSpans[0].Spans[0].Name != "x" {
		t.Fatalf("got %v: want the span", got)
	}
}

// The exporter's variables are checked at start-up, each error naming its
// variable; the traces' variable wins over the general one.
func TestExporterEnvironment(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.pem")
	os.WriteFile(notPEM, []byte("not a certificate"), 0o600)
	for _, tc := range []struct {
		name string
		env  map[string]string
		err  string
	}{
		{"headers", map[string]string{"OTEL_EXPORTER_OTLP_HEADERS": "novalue"}, "OTEL_EXPORTER_OTLP_HEADERS: want key=value pairs"},
		{"traces headers win", map[string]string{"OTEL_EXPORTER_OTLP_HEADERS": "novalue", "OTEL_EXPORTER_OTLP_TRACES_HEADERS": "a=b"}, ""},
		{"timeout", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "10s"}, `OTEL_EXPORTER_OTLP_TRACES_TIMEOUT "10s": want milliseconds`},
		{"compression", map[string]string{"OTEL_EXPORTER_OTLP_COMPRESSION": "zstd"}, `OTEL_EXPORTER_OTLP_COMPRESSION "zstd": want gzip or none`},
		{"certificate missing", map[string]string{"OTEL_EXPORTER_OTLP_CERTIFICATE": filepath.Join(dir, "none.pem")}, "OTEL_EXPORTER_OTLP_CERTIFICATE: open"},
		{"certificate not PEM", map[string]string{"OTEL_EXPORTER_OTLP_CERTIFICATE": notPEM}, "OTEL_EXPORTER_OTLP_CERTIFICATE " + notPEM + ": no PEM certificate"},
		{"client key alone", map[string]string{"OTEL_EXPORTER_OTLP_CLIENT_KEY": notPEM}, "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE and OTEL_EXPORTER_OTLP_CLIENT_KEY: give both"},
		{"json", map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, `OTEL_EXPORTER_OTLP_PROTOCOL "http/json": want http/protobuf`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.env[envEndpoint] = "http://127.0.0.1:4318"
			c := Config{}
			err := c.Validate(func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok })
			if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("err %v, want %q", err, tc.err)
			}
			if tc.err == "" && (c.timeout != 10*time.Second || c.headers["a"] != "b") {
				t.Errorf("timeout %v, headers %v", c.timeout, c.headers)
			}
		})
	}
}
