package telemetry

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Config is the telemetry section of the configuration (SPEC §19); the
// command embeds it as it is. A key set here wins over the environment's
// variable for the same thing; what it does not set comes from the
// standard OTEL_* variables: the exporter's (headers, timeout,
// compression, TLS files), read by Validate, and the resource's and the
// batch processor's, which the SDK reads.
type Config struct {
	// OTLPEndpoint is the collector's OTLP/HTTP base URL
	// (http://127.0.0.1:4318), to which /v1/traces is added, as to
	// OTEL_EXPORTER_OTLP_ENDPOINT. Unset: the environment's
	// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (used as it is), else
	// OTEL_EXPORTER_OTLP_ENDPOINT; none of them: no traces at all.
	OTLPEndpoint string `yaml:"otlp_endpoint"`
	// ServiceName is the traces' service.name. Unset: OTEL_SERVICE_NAME,
	// else service.name in OTEL_RESOURCE_ATTRIBUTES, else "sandbox-mcp".
	ServiceName string `yaml:"service_name"`

	// Not in the configuration file.
	Version  string       `yaml:"-"` // service.version
	Provider string       `yaml:"-"` // sandbox_mcp.provider: the sandboxes' provider, the same for every span
	Logger   *slog.Logger `yaml:"-"` // the exporter's failures, one line a minute at most

	// What Validate made of the section and the environment.
	url      string // where spans are posted; "": no traces
	headers  map[string]string
	gzip     bool
	timeout  time.Duration
	tls      *tls.Config // nil: the system's roots, no client certificate
	sampler  sdktrace.Sampler
	sampling string // the sampler as configured, for the start-up line
}

// The environment's variables that Validate reads (the SDK reads the rest).
const (
	envEndpoint       = "OTEL_EXPORTER_OTLP_ENDPOINT"
	envTracesEndpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	envProtocol       = "OTEL_EXPORTER_OTLP_PROTOCOL"
	envTracesProtocol = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	envSampler        = "OTEL_TRACES_SAMPLER"
	envSamplerArg     = "OTEL_TRACES_SAMPLER_ARG"
	envExporter       = "OTEL_TRACES_EXPORTER"
	envDisabled       = "OTEL_SDK_DISABLED"
)

// The exporter's settings: each OTEL_EXPORTER_OTLP_TRACES_X wins over
// OTEL_EXPORTER_OTLP_X.
const (
	envHeaders     = "HEADERS"
	envTimeout     = "TIMEOUT"
	envCompression = "COMPRESSION"
	envCertificate = "CERTIFICATE"
	envClientCert  = "CLIENT_CERTIFICATE"
	envClientKey   = "CLIENT_KEY"
)

// tracesPath is what an OTLP/HTTP base URL is given for traces.
const tracesPath = "/v1/traces"

// Validate works out, from the section and the environment (lookup),
// whether traces are sent, where and how, and refuses — with one line
// naming the key or the variable — what the SDK would otherwise ignore
// with a message on stderr, and a protocol that is not built in.
func (c *Config) Validate(lookup func(string) (string, bool)) error {
	env := func(k string) string { v, _ := lookup(k); return strings.TrimSpace(v) }
	c.url, c.headers, c.gzip, c.timeout, c.tls, c.sampler, c.sampling = "", nil, false, 0, nil, nil, ""
	to := ""
	if c.OTLPEndpoint != "" {
		u, err := endpointURL(c.OTLPEndpoint)
		if err != nil {
			return fmt.Errorf("telemetry.otlp_endpoint %q: %v", c.OTLPEndpoint, err)
		}
		u.Path = path.Join("/", u.Path, tracesPath)
		to = u.String()
	}
	// The SDK's own switches turn traces off, whatever sets an endpoint.
	if strings.EqualFold(env(envDisabled), "true") {
		return nil
	}
	switch e := strings.ToLower(env(envExporter)); e {
	case "", "otlp":
	case "none":
		return nil
	default:
		return fmt.Errorf("%s %q: want otlp (over HTTP) or none; no other exporter is built in", envExporter, e)
	}
	for _, k := range []string{envTracesEndpoint, envEndpoint} {
		v := env(k)
		if to != "" || v == "" {
			continue
		}
		u, err := endpointURL(v)
		if err != nil {
			return fmt.Errorf("%s %q: %v", k, v, err)
		}
		if k == envEndpoint {
			// A base URL, as the exporter reads it; the traces'
			// variable is the whole URL.
			u.Path = path.Join("/", u.Path, tracesPath)
		}
		to = u.String()
	}
	if to == "" {
		return nil
	}
	key, proto := envTracesProtocol, env(envTracesProtocol)
	if proto == "" {
		key, proto = envProtocol, env(envProtocol)
	}
	switch proto {
	case "", "http/protobuf":
	case "grpc":
		return fmt.Errorf("%s grpc: traces go over OTLP/HTTP only (no gRPC exporter is built in): want http/protobuf, and the collector's HTTP port (4318)", key)
	default:
		return fmt.Errorf("%s %q: want http/protobuf", key, proto)
	}
	if err := c.exporterEnv(env); err != nil {
		return err
	}
	var err error
	if c.sampler, c.sampling, err = sampler(env(envSampler), env(envSamplerArg)); err != nil {
		return err
	}
	c.url = to
	return nil
}

// exporterEnv reads the exporter's settings from the environment, as the
// specification names them (OTEL_EXPORTER_OTLP_[TRACES_]X).
func (c *Config) exporterEnv(env func(string) string) error {
	get := func(x string) (key, v string) {
		if v := env("OTEL_EXPORTER_OTLP_TRACES_" + x); v != "" {
			return "OTEL_EXPORTER_OTLP_TRACES_" + x, v
		}
		return "OTEL_EXPORTER_OTLP_" + x, env("OTEL_EXPORTER_OTLP_" + x)
	}
	if key, v := get(envHeaders); v != "" {
		c.headers = map[string]string{}
		for _, kv := range strings.Split(v, ",") {
			k, val, ok := strings.Cut(kv, "=")
			k, errK := url.PathUnescape(strings.TrimSpace(k))
			val, errV := url.PathUnescape(strings.TrimSpace(val))
			if !ok || k == "" || errK != nil || errV != nil {
				return fmt.Errorf("%s: want key=value pairs separated by commas (values percent-encoded)", key)
			}
			c.headers[k] = val
		}
	}
	c.timeout = 10 * time.Second
	if key, v := get(envTimeout); v != "" {
		ms, err := strconv.Atoi(v)
		if err != nil || ms <= 0 {
			return fmt.Errorf("%s %q: want milliseconds, more than 0 (default 10000)", key, v)
		}
		c.timeout = time.Duration(ms) * time.Millisecond
	}
	switch key, v := get(envCompression); v {
	case "", "none":
	case "gzip":
		c.gzip = true
	default:
		return fmt.Errorf("%s %q: want gzip or none", key, v)
	}
	var cfg tls.Config
	if key, v := get(envCertificate); v != "" {
		pem, err := os.ReadFile(v)
		if err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return fmt.Errorf("%s %s: no PEM certificate in it", key, v)
		}
	}
	certKey, cert := get(envClientCert)
	keyKey, key := get(envClientKey)
	if (cert == "") != (key == "") {
		return fmt.Errorf("%s and %s: give both, or neither", certKey, keyKey)
	}
	if cert != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return fmt.Errorf("%s, %s: %w", certKey, keyKey, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	if cfg.RootCAs != nil || cfg.Certificates != nil {
		c.tls = &cfg
	}
	return nil
}

// Enabled says whether Validate found an endpoint: traces are sent.
func (c *Config) Enabled() bool { return c.url != "" }

// endpointURL checks an OTLP/HTTP URL: http or https, a host, nothing
// else but a path (credentials go in OTEL_EXPORTER_OTLP_HEADERS).
func endpointURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return nil, errors.New("want an http or https URL with a host and no credentials or query, such as http://127.0.0.1:4318")
	}
	return u, nil
}

// sampler is the sampler OTEL_TRACES_SAMPLER names (with
// OTEL_TRACES_SAMPLER_ARG, a ratio), as the SDK reads them; unset,
// parentbased_always_on: a call is sampled as its caller's span was, and
// always when it has no caller.
func sampler(name, arg string) (sdktrace.Sampler, string, error) {
	name = strings.ToLower(name)
	switch name {
	case "", "parentbased_always_on":
		return sdktrace.ParentBased(sdktrace.AlwaysSample()), "parentbased_always_on", nil
	case "always_on":
		return sdktrace.AlwaysSample(), name, nil
	case "always_off":
		return sdktrace.NeverSample(), name, nil
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample()), name, nil
	case "traceidratio", "parentbased_traceidratio":
		ratio := 1.0
		if arg != "" {
			var err error
			if ratio, err = strconv.ParseFloat(arg, 64); err != nil || ratio < 0 || ratio > 1 {
				return nil, "", fmt.Errorf("%s %q: want a ratio from 0 to 1", envSamplerArg, arg)
			}
		}
		s := sdktrace.TraceIDRatioBased(ratio)
		if name == "parentbased_traceidratio" {
			s = sdktrace.ParentBased(s)
		}
		return s, name + " " + strconv.FormatFloat(ratio, 'f', -1, 64), nil
	}
	return nil, "", fmt.Errorf("%s %q: want always_on, always_off, traceidratio, parentbased_always_on (the default), parentbased_always_off or parentbased_traceidratio", envSampler, name)
}

// Tracing is the traces' SDK while the server runs. A nil *Tracing is
// off: its methods do nothing.
type Tracing struct {
	tp       *sdktrace.TracerProvider
	url      string
	sampling string
}

// New makes the tracer provider that Validate configured — a batch span
// processor over the OTLP/HTTP exporter — or returns nil when traces are
// off (no endpoint). Nothing is sent before the first span ends; a
// collector that does not answer costs a warning a minute, never a call.
func New(ctx context.Context, cfg Config) (*Tracing, error) {
	if !cfg.Enabled() {
		return nil, nil
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	exp := newExporter(cfg.url, cfg.headers, cfg.gzip, cfg.timeout, cfg.tls)
	// Later detectors win: the service's defaults, then the environment's
	// (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES), then the section's.
	detect := []resource.Option{
		resource.WithTelemetrySDK(),
		resource.WithAttributes(attribute.String("service.name", "sandbox-mcp"), attribute.String("service.version", cfg.Version),
			attribute.String("sandbox_mcp.provider", cfg.Provider)),
		resource.WithFromEnv(),
	}
	if cfg.ServiceName != "" {
		detect = append(detect, resource.WithAttributes(attribute.String("service.name", cfg.ServiceName)))
	}
	res, err := resource.New(ctx, detect...)
	if err != nil {
		exp.Shutdown(ctx)
		return nil, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	// The SDK reports what goes wrong (a collector down, spans dropped)
	// through the process's one error handler.
	otel.SetErrorHandler(&errorLog{log: log, every: time.Minute})
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithSpanProcessor(newBatcher(exp, func(n int) {
			otel.Handle(fmt.Errorf("%d spans dropped: more ended within %s than OTEL_BSP_MAX_QUEUE_SIZE holds", n, "a batch's interval"))
		})),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(cfg.sampler),
	)
	return &Tracing{tp: tp, url: cfg.url, sampling: cfg.sampling}, nil
}

// TracerProvider is what the server makes its spans with; nil when off.
func (t *Tracing) TracerProvider() trace.TracerProvider {
	if t == nil {
		return nil
	}
	return t.tp
}

// URL is where spans are sent ("" when off).
func (t *Tracing) URL() string {
	if t == nil {
		return ""
	}
	return t.url
}

// Sampler names the sampler in use ("" when off).
func (t *Tracing) Sampler() string {
	if t == nil {
		return ""
	}
	return t.sampling
}

// Shutdown sends the spans still held and stops the exporter, as long as
// ctx allows; the server calls it last, once every call has ended.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	if err := t.tp.Shutdown(ctx); err != nil {
		return fmt.Errorf("telemetry: spans not sent at shutdown: %w", err)
	}
	return nil
}

// errorLog logs the SDK's errors as warnings, one in every period at most
// (a collector that is down fails every batch), saying how many it left
// out meanwhile.
type errorLog struct {
	log   *slog.Logger
	every time.Duration

	mu      sync.Mutex
	last    time.Time
	dropped int
}

func (e *errorLog) Handle(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.last.IsZero() && time.Since(e.last) < e.every {
		e.dropped++
		return
	}
	e.log.Warn("traces: the OpenTelemetry SDK failed", "err", err.Error(), "errors_since_last", e.dropped)
	e.last, e.dropped = time.Now(), 0
}
