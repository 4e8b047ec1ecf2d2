package metrics_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/sandbox-mcp/sandbox-mcp/metrics"
)

// scrape GETs the handler's text exposition and parses it as Prometheus
// would.
func scrape(t *testing.T, h http.Handler) map[string]*dto.MetricFamily {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, metrics.Path, nil))
	if rec.Code != 200 {
		t.Fatalf("GET %s: %d %s", metrics.Path, rec.Code, rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Errorf("Content-Type %q, want the text format", ct)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(rec.Body)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	return fams
}

// series finds the metric of family name whose labels are exactly want.
func series(t *testing.T, fams map[string]*dto.MetricFamily, name string, want map[string]string) *dto.Metric {
	t.Helper()
	f := fams[name]
	if f == nil {
		t.Fatalf("no family %s", name)
	}
	for _, m := range f.Metric {
		got := map[string]string{}
		for _, l := range m.Label {
			got[l.GetName()] = l.GetValue()
		}
		if len(got) == len(want) {
			match := true
			for k, v := range want {
				if got[k] != v {
					match = false
				}
			}
			if match {
				return m
			}
		}
	}
	t.Fatalf("%s: no series %v among %v", name, want, f.Metric)
	return nil
}

func TestMetricsSet(t *testing.T) {
	t.Parallel()
	m := metrics.New("v1.2.3", "local")
	read := m.Tool("read_file")
	read.Done("ok", 2*time.Millisecond)
	read.Done("ok", 3*time.Second)
	read.Done("denied", time.Millisecond)
	m.Tool("bash").Done("timeout", 2*time.Minute)
	m.BoxStarted("local", 40*time.Millisecond)
	m.JobStarted("local")
	m.JobStarted("local")
	m.ProxyConnection("ok", 100, 2000)
	m.ProxyConnection("denied", 0, 0)
	m.ProxyConnection("error", 7, 0)
	m.Observe(func() metrics.State {
		return metrics.State{InFlight: 3, Sessions: 2, Provider: "local", Sandboxes: map[string]int{metrics.Bound: 5, metrics.Active: 1}}
	})
	fams := scrape(t, m.Handler())

	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"sandbox_mcp_tool_calls_total", map[string]string{"tool": "read_file", "outcome": "ok"}, 2},
		{"sandbox_mcp_tool_calls_total", map[string]string{"tool": "read_file", "outcome": "denied"}, 1},
		{"sandbox_mcp_tool_calls_total", map[string]string{"tool": "read_file", "outcome": "error"}, 0}, // there from the start
		{"sandbox_mcp_tool_calls_total", map[string]string{"tool": "bash", "outcome": "timeout"}, 1},
		{"sandbox_mcp_jobs_started_total", map[string]string{"provider": "local"}, 2},
		{"sandbox_mcp_proxy_connections_total", map[string]string{"outcome": "ok"}, 1},
		{"sandbox_mcp_proxy_connections_total", map[string]string{"outcome": "denied"}, 1},
		{"sandbox_mcp_proxy_connections_total", map[string]string{"outcome": "error"}, 1},
		{"sandbox_mcp_proxy_bytes_total", map[string]string{"direction": "up"}, 107},
		{"sandbox_mcp_proxy_bytes_total", map[string]string{"direction": "down"}, 2000},
	} {
		if got := series(t, fams, c.name, c.labels).GetCounter().GetValue(); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"sandbox_mcp_tool_calls_in_flight", map[string]string{}, 3},
		{"sandbox_mcp_sessions", map[string]string{}, 2},
		{"sandbox_mcp_sandboxes", map[string]string{"provider": "local", "state": "bound"}, 5},
		{"sandbox_mcp_sandboxes", map[string]string{"provider": "local", "state": "active"}, 1},
		{"sandbox_mcp_build_info", map[string]string{"version": "v1.2.3"}, 1},
	} {
		if got := series(t, fams, c.name, c.labels).GetGauge().GetValue(); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if n := len(fams["sandbox_mcp_sandboxes"].Metric); n != 2 {
		t.Errorf("sandbox_mcp_sandboxes has %d series, want the 2 states given", n)
	}

	h := series(t, fams, "sandbox_mcp_tool_call_duration_seconds", map[string]string{"tool": "read_file"}).GetHistogram()
	if h.GetSampleCount() != 3 || h.GetSampleSum() < 3.002 || h.GetSampleSum() > 3.0031 {
		t.Errorf("read_file duration: count %d sum %v, want 3 and 3.003", h.GetSampleCount(), h.GetSampleSum())
	}
	bounds := map[float64]uint64{}
	for _, b := range h.Bucket {
		bounds[b.GetUpperBound()] = b.GetCumulativeCount()
	}
	if bounds[0.001] != 1 || bounds[0.0025] != 2 || bounds[2.5] != 2 || bounds[5] != 3 || bounds[600] != 3 {
		t.Errorf("read_file duration buckets: %v", bounds)
	}
	s := series(t, fams, "sandbox_mcp_sandbox_start_duration_seconds", map[string]string{"provider": "local"}).GetHistogram()
	if s.GetSampleCount() != 1 || s.GetSampleSum() != 0.04 {
		t.Errorf("box starts: count %d sum %v", s.GetSampleCount(), s.GetSampleSum())
	}
	// The Go runtime's and the process's own.
	for _, name := range []string{"go_goroutines", "process_resident_memory_bytes"} {
		if fams[name] == nil {
			t.Errorf("no %s", name)
		}
	}
	// Nothing names a thread, a session or a path: the labels are these.
	allowed := map[string]bool{"tool": true, "outcome": true, "provider": true, "state": true, "direction": true, "version": true}
	for name, f := range fams {
		if !strings.HasPrefix(name, "sandbox_mcp_") {
			continue
		}
		for _, m := range f.Metric {
			for _, l := range m.Label {
				if !allowed[l.GetName()] {
					t.Errorf("%s has label %s", name, l.GetName())
				}
			}
		}
	}
}

// A nil *Metrics is off: every method does nothing, and a Tool of it is
// nil.
func TestNilMetricsIsOff(t *testing.T) {
	t.Parallel()
	var m *metrics.Metrics
	tool := m.Tool("bash")
	if tool != nil {
		t.Fatal("a nil Metrics made a Tool")
	}
	tool.Done("ok", time.Second)
	m.JobStarted("local")
	m.BoxStarted("local", time.Second)
	m.ProxyConnection("ok", 1, 1)
	m.Observe(func() metrics.State { return metrics.State{} })
}

// Serve answers GET /metrics and nothing else, and returns once ctx ends.
func TestServe(t *testing.T) {
	t.Parallel()
	m := metrics.New("dev", "docker")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- m.Serve(ctx, ln) }()
	base := "http://" + ln.Addr().String()
	get := func(method, path string) (int, string) {
		req, _ := http.NewRequest(method, base+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("GET", "/metrics"); code != 200 || !strings.Contains(body, `sandbox_mcp_jobs_started_total{provider="docker"} 0`) {
		t.Errorf("GET /metrics: %d %.200q", code, body)
	}
	if code, _ := get("GET", "/"); code != 404 {
		t.Errorf("GET /: %d, want 404", code)
	}
	if code, _ := get("POST", "/metrics"); code != 405 {
		t.Errorf("POST /metrics: %d, want 405", code)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after its ctx ended")
	}
	if c, err := net.Dial("tcp", ln.Addr().String()); err == nil {
		c.Close()
		t.Error("still listening after Serve returned")
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for addr, ok := range map[string]bool{
		"": true, "127.0.0.1:9090": true, "127.0.0.1:0": true, ":9090": true, "0.0.0.0:9090": true, "[::1]:9090": true, "localhost:9090": true,
		"9090": false, "127.0.0.1": false, "127.0.0.1:http": false, "127.0.0.1:70000": false, "127.0.0.1:-1": false,
	} {
		c := metrics.Config{Addr: addr}
		if err := c.Validate(); (err == nil) != ok {
			t.Errorf("Validate(%q) = %v, want ok %v", addr, err, ok)
		} else if err != nil && !strings.HasPrefix(err.Error(), "metrics.addr ") {
			t.Errorf("Validate(%q) = %q: does not name the key first", addr, err)
		}
	}
}

// BenchmarkToolDone is what a call costs the metrics on the call path.
func BenchmarkToolDone(b *testing.B) {
	tool := metrics.New("bench", "local").Tool("read_file")
	for b.Loop() {
		tool.Done("ok", 150*time.Microsecond)
	}
}

// BenchmarkToolDoneOff is the same with metrics off (a nil *Tool).
func BenchmarkToolDoneOff(b *testing.B) {
	tool := (*metrics.Metrics)(nil).Tool("read_file")
	for b.Loop() {
		tool.Done("ok", 150*time.Microsecond)
	}
}
