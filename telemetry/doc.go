// Package telemetry sends the server's traces to an OpenTelemetry
// collector over OTLP/HTTP (SPEC §19): it owns the SDK — the tracer
// provider and its batch span processor — and the exporter, so that no
// other package of this module imports more than the tracing API.
//
// Traces are off unless an endpoint is set, in the configuration
// (telemetry.otlp_endpoint) or the environment (OTEL_EXPORTER_OTLP_ENDPOINT,
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT). Off, New makes nothing and returns
// a nil *Tracing: the server is given no tracer provider, and the call
// path pays a nil check. The spans themselves are made where the work is:
// the server's handler makes each tool call's span, and the providers'
// children take their tracer from the span in their context
// (trace.SpanFromContext(ctx).TracerProvider()), so that nothing below the
// server needs a global, and a context without a span costs nothing.
//
// The exporter is this package's own (export.go, otlp.go): OTLP/HTTP with
// protobuf bodies, configured by the standard OTEL_EXPORTER_OTLP_*
// variables. The SDK's otlptracehttp links gRPC, and with it
// golang.org/x/net/trace, which makes the linker keep every exported
// method of the binary: 33 MB more server. A protocol of grpc (or
// http/json) in the environment stops start-up, as does any setting the
// SDK would otherwise ignore with a message on stderr (a malformed
// endpoint, an unknown sampler). A setting of the configuration file wins
// over the environment's.
//
// The package imports nothing of this module.
package telemetry
