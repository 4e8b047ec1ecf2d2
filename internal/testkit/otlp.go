package testkit

import (
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// OTLPReceiver is an OpenTelemetry collector's OTLP/HTTP trace receiver
// on loopback: it takes POST /v1/traces with a protobuf
// ExportTraceServiceRequest, as the SDK's exporter sends it, and keeps
// every span.
type OTLPReceiver struct {
	URL string // the base URL, as OTEL_EXPORTER_OTLP_ENDPOINT takes it

	mu       sync.Mutex
	spans    []Span
	requests int
	bad      []string // what was not a request a collector takes
}

// Span is one span as a collector received it: ids in hex, attributes
// as strings.
type Span struct {
	Name, TraceID, SpanID, ParentID string
	Kind                            string // SPAN_KIND_SERVER, …
	Attrs                           map[string]string
	Resource                        map[string]string // the resource's attributes (service.name)
	StatusCode                      string            // STATUS_CODE_ERROR, …
	StartNanos, EndNanos            uint64
}

// NewOTLPReceiver starts a receiver, stopped when the test ends.
func NewOTLPReceiver(t testing.TB) *OTLPReceiver {
	r := &OTLPReceiver{}
	srv := httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(srv.Close)
	r.URL = srv.URL
	return r
}

func (r *OTLPReceiver) serve(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	resourceSpans, err := exportRequest(body)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.requests++
	if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" || err != nil {
		r.bad = append(r.bad, req.Method+" "+req.URL.Path+" "+req.Header.Get("Content-Type"))
		http.Error(w, "not an OTLP/HTTP protobuf trace export", http.StatusBadRequest)
		return
	}
	for _, rs := range resourceSpans {
		res := attrMap(rs.GetResource().GetAttributes())
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				r.spans = append(r.spans, Span{
					Name: s.Name, TraceID: hex.EncodeToString(s.TraceId), SpanID: hex.EncodeToString(s.SpanId),
					ParentID: hex.EncodeToString(s.ParentSpanId), Kind: s.Kind.String(), Attrs: attrMap(s.Attributes),
					Resource: res, StatusCode: s.GetStatus().GetCode().String(),
					StartNanos: s.StartTimeUnixNano, EndNanos: s.EndTimeUnixNano,
				})
			}
		}
	}
	w.Header().Set("Content-Type", "application/x-protobuf") // an empty ExportTraceServiceResponse: all taken
}

// exportRequest decodes an ExportTraceServiceRequest: its field 1,
// resource_spans, repeated. (Its own type is in the collector's package,
// which is gRPC's service too.)
func exportRequest(b []byte) ([]*tracepb.ResourceSpans, error) {
	var out []*tracepb.ResourceSpans
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, protowire.ParseError(n)
		}
		b = b[n:]
		if num != 1 || typ != protowire.BytesType {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return nil, protowire.ParseError(n)
			}
			b = b[n:]
			continue
		}
		m, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return nil, protowire.ParseError(n)
		}
		b = b[n:]
		rs := &tracepb.ResourceSpans{}
		if err := proto.Unmarshal(m, rs); err != nil {
			return nil, err
		}
		out = append(out, rs)
	}
	return out, nil
}

// attrMap is OTLP attributes as strings (a number as its digits).
func attrMap(kvs []*commonpb.KeyValue) map[string]string {
	out := map[string]string{}
	for _, kv := range kvs {
		v := kv.GetValue()
		switch v.Value.(type) {
		case *commonpb.AnyValue_IntValue:
			out[kv.Key] = strconv.FormatInt(v.GetIntValue(), 10)
		case *commonpb.AnyValue_BoolValue:
			out[kv.Key] = strconv.FormatBool(v.GetBoolValue())
		default:
			out[kv.Key] = v.GetStringValue()
		}
	}
	return out
}

// Spans are the spans received so far.
func (r *OTLPReceiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// Requests is how many requests came, and what of them was not an
// OTLP/HTTP protobuf trace export.
func (r *OTLPReceiver) Requests() (n int, bad []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.requests, append([]string(nil), r.bad...)
}
