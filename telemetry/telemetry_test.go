package telemetry

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/sandbox-mcp/sandbox-mcp/internal/testkit"
)

// Validate works out where traces go from the section and the standard
// variables — the section first — and refuses with one line naming the
// key or variable what the SDK would ignore, and gRPC.
func TestValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		endpoint string // telemetry.otlp_endpoint
		env      map[string]string
		url      string // "": off
		sampling string
		err      string // a part of the error
	}{
		{name: "nothing set: off"},
		{name: "base endpoint", env: map[string]string{envEndpoint: "http://c:4318"}, url: "http://c:4318/v1/traces", sampling: "parentbased_always_on"},
		{name: "base endpoint with a path", env: map[string]string{envEndpoint: "https://c/otlp/"}, url: "https://c/otlp/v1/traces"},
		{name: "traces endpoint as it is, before the base one",
			env: map[string]string{envEndpoint: "http://base:4318", envTracesEndpoint: "http://c:4318/custom"}, url: "http://c:4318/custom"},
		{name: "the section wins over the environment", endpoint: "http://cfg:4318",
			env: map[string]string{envEndpoint: "http://base:4318", envTracesEndpoint: "http://c:4318/custom"}, url: "http://cfg:4318/v1/traces"},
		{name: "SDK disabled", endpoint: "http://cfg:4318", env: map[string]string{envDisabled: "TRUE"}},
		{name: "exporter none", endpoint: "http://cfg:4318", env: map[string]string{envExporter: "none"}},
		{name: "exporter otlp", endpoint: "http://cfg:4318", env: map[string]string{envExporter: "otlp"}, url: "http://cfg:4318/v1/traces"},
		{name: "another exporter", endpoint: "http://cfg:4318", env: map[string]string{envExporter: "zipkin"}, err: `OTEL_TRACES_EXPORTER "zipkin": want otlp`},
		{name: "grpc", endpoint: "http://cfg:4318", env: map[string]string{envProtocol: "grpc"},
			err: "OTEL_EXPORTER_OTLP_PROTOCOL grpc: traces go over OTLP/HTTP only (no gRPC exporter is built in): want http/protobuf"},
		{name: "grpc for traces", env: map[string]string{envEndpoint: "http://c:4318", envProtocol: "http/protobuf", envTracesProtocol: "grpc"},
			err: "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL grpc:"},
		{name: "the traces' protocol wins", env: map[string]string{envEndpoint: "http://c:4318", envProtocol: "grpc", envTracesProtocol: "http/protobuf"},
			url: "http://c:4318/v1/traces"},
		{name: "grpc without an endpoint: off", env: map[string]string{envProtocol: "grpc"}},
		{name: "unknown protocol", env: map[string]string{envEndpoint: "http://c:4318", envProtocol: "thrift"}, err: `OTEL_EXPORTER_OTLP_PROTOCOL "thrift": want http/protobuf`},
		{name: "no scheme in the section", endpoint: "127.0.0.1:4318", err: `telemetry.otlp_endpoint "127.0.0.1:4318": want an http or https URL`},
		{name: "credentials in the environment's URL", env: map[string]string{envTracesEndpoint: "https://u:p@c/v1/traces"},
			err: `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT "https://u:p@c/v1/traces": want an http or https URL with a host and no credentials`},
		{name: "sampler", env: map[string]string{envEndpoint: "http://c:4318", envSampler: "ParentBased_TraceIDRatio", envSamplerArg: "0.25"},
			url: "http://c:4318/v1/traces", sampling: "parentbased_traceidratio 0.25"},
		{name: "unknown sampler", env: map[string]string{envEndpoint: "http://c:4318", envSampler: "jaeger_remote"}, err: `OTEL_TRACES_SAMPLER "jaeger_remote": want always_on`},
		{name: "ratio out of range", env: map[string]string{envEndpoint: "http://c:4318", envSampler: "traceidratio", envSamplerArg: "2"}, err: `OTEL_TRACES_SAMPLER_ARG "2": want a ratio from 0 to 1`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := Config{OTLPEndpoint: tc.endpoint}
			err := c.Validate(func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok })
			switch {
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("err %v, want one saying %q", err, tc.err)
			case tc.err != "" && strings.Contains(err.Error(), "\n"):
				t.Fatalf("err is not one line: %q", err)
			case tc.err == "" && err != nil:
				t.Fatal(err)
			}
			if c.url != tc.url || c.Enabled() != (tc.url != "") {
				t.Errorf("url %q (enabled %v), want %q", c.url, c.Enabled(), tc.url)
			}
			if tc.sampling != "" && c.sampling != tc.sampling {
				t.Errorf("sampler %q, want %q", c.sampling, tc.sampling)
			}
		})
	}
}

// Off, New makes nothing, and a nil *Tracing answers as off.
func TestNewOff(t *testing.T) {
	t.Parallel()
	c := Config{}
	if err := c.Validate(func(string) (string, bool) { return "", false }); err != nil {
		t.Fatal(err)
	}
	tr, err := New(t.Context(), c)
	if tr != nil || err != nil {
		t.Fatalf("New off: %v, %v; want nil, nil", tr, err)
	}
	if tr.TracerProvider() != nil || tr.URL() != "" || tr.Sampler() != "" || tr.Shutdown(t.Context()) != nil {
		t.Fatal("a nil *Tracing is not off")
	}
}

// Spans reach a collector over OTLP/HTTP with protobuf bodies, under the
// configured service name (which wins over OTEL_SERVICE_NAME), and the
// ones still held are sent at Shutdown.
func TestExportOverHTTP(t *testing.T) {
	t.Setenv("OTEL_SERVICE_NAME", "from-env")
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment.name=test")
	rcv := testkit.NewOTLPReceiver(t)
	c := Config{OTLPEndpoint: rcv.URL, ServiceName: "from-config", Version: "v9", Provider: "docker"}
	if err := c.Validate(func(string) (string, bool) { return "", false }); err != nil {
		t.Fatal(err)
	}
	tr, err := New(t.Context(), c)
	if err != nil || tr == nil {
		t.Fatalf("New: %v, %v", tr, err)
	}
	_, span := tr.TracerProvider().Tracer("test").Start(t.Context(), "tools/call ls", trace.WithSpanKind(trace.SpanKindServer))
	span.End()
	if n, _ := rcv.Requests(); n != 0 {
		t.Fatalf("%d requests before Shutdown, want the batch held (5 s)", n)
	}
	if err := tr.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	spans := rcv.Spans()
	if n, bad := rcv.Requests(); n != 1 || len(bad) != 0 || len(spans) != 1 {
		t.Fatalf("%d requests (bad: %v), %d spans; want one export of one span", n, bad, len(spans))
	}
	s := spans[0]
	if s.Name != "tools/call ls" || s.Kind != "SPAN_KIND_SERVER" || s.TraceID != span.SpanContext().TraceID().String() {
		t.Errorf("span %+v", s)
	}
	if r := s.Resource; r["service.name"] != "from-config" || r["service.version"] != "v9" || r["deployment.environment.name"] != "test" ||
		r["telemetry.sdk.language"] != "go" || r["sandbox_mcp.provider"] != "docker" {
		t.Errorf("resource %v", r)
	}
}

// Without the section's name, OTEL_SERVICE_NAME names the service; without
// either, it is sandbox-mcp.
func TestServiceNameFromEnvironment(t *testing.T) {
	for _, env := range []string{"from-env", ""} {
		t.Setenv("OTEL_SERVICE_NAME", env)
		rcv := testkit.NewOTLPReceiver(t)
		c := Config{OTLPEndpoint: rcv.URL}
		if err := c.Validate(func(string) (string, bool) { return "", false }); err != nil {
			t.Fatal(err)
		}
		tr, err := New(t.Context(), c)
		if err != nil {
			t.Fatal(err)
		}
		_, span := tr.TracerProvider().Tracer("test").Start(t.Context(), "x")
		span.End()
		tr.Shutdown(t.Context())
		want := env
		if want == "" {
			want = "sandbox-mcp"
		}
		if spans := rcv.Spans(); len(spans) != 1 || spans[0].Resource["service.name"] != want {
			t.Errorf("OTEL_SERVICE_NAME %q: spans %+v, want service.name %q", env, spans, want)
		}
	}
}

// A malformed OTEL_RESOURCE_ATTRIBUTES stops start-up, naming it.
func TestBadResourceAttributes(t *testing.T) {
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "novalue")
	c := Config{OTLPEndpoint: "http://127.0.0.1:1"}
	if err := c.Validate(func(string) (string, bool) { return "", false }); err != nil {
		t.Fatal(err)
	}
	if tr, err := New(t.Context(), c); err == nil || !strings.HasPrefix(err.Error(), "OTEL_RESOURCE_ATTRIBUTES: ") {
		tr.Shutdown(t.Context())
		t.Fatalf("err %v, want one naming OTEL_RESOURCE_ATTRIBUTES", err)
	}
}

// The SDK's errors (a collector down fails every batch) are a warning a
// period at most, which counts those it left out.
func TestErrorLogIsRateLimited(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	e := &errorLog{log: slog.New(slog.NewTextHandler(&buf, nil)), every: 50 * time.Millisecond}
	for range 5 {
		e.Handle(errors.New("connection refused"))
	}
	if n := strings.Count(buf.String(), "\n"); n != 1 {
		t.Fatalf("%d lines for 5 errors at once, want 1:\n%s", n, buf.String())
	}
	time.Sleep(60 * time.Millisecond)
	e.Handle(errors.New("connection refused"))
	if !strings.Contains(buf.String(), "errors_since_last=4") {
		t.Fatalf("the second line does not count the 4 left out:\n%s", buf.String())
	}
}

// A collector that does not answer costs nothing at Shutdown beyond the
// time it is given.
func TestShutdownBoundedByContext(t *testing.T) {
	t.Parallel()
	c := Config{OTLPEndpoint: "http://127.0.0.1:1"} // nothing listens on port 1
	if err := c.Validate(func(string) (string, bool) { return "", false }); err != nil {
		t.Fatal(err)
	}
	tr, err := New(t.Context(), c)
	if err != nil {
		t.Fatal(err)
	}
	_, span := tr.TracerProvider().Tracer("test").Start(t.Context(), "x")
	span.End()
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	began := time.Now()
	tr.Shutdown(ctx)
	if took := time.Since(began); took > 3*time.Second {
		t.Fatalf("Shutdown took %v with a 300ms context", took)
	}
}
