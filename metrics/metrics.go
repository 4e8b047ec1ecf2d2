package metrics

import (
	"context"
	"errors"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Path is where the metrics are served.
const Path = "/metrics"

// The outcomes of a tool call, as its audit line says them (audit.OK,
// ...): their series exist from the start, at 0, so that a rate over
// them is defined before the first error.
var outcomes = []string{"ok", "error", "denied", "timeout"}

// Sandbox states (the sandboxes gauge's state label).
const (
	// Bound: a thread whose sandbox this server holds — for a session, a
	// stateless request's lease, or the jobs it runs after its session.
	Bound = "bound"
	// Active: a bound sandbox a tool call uses now.
	Active = "active"
	// Running: a box (supervisor, container, Pod) running, as the
	// provider knows it.
	Running = "running"
)

// durationBuckets are a call's: 1 ms to 10 min (bash's longest timeout).
var durationBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}

// startBuckets are a box's start: a supervisor in bubblewrap takes
// milliseconds, a container a second, a Pod whose image is pulled minutes.
var startBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}

// Metrics is the server's metric set, in a registry of its own (never the
// process-wide default). A nil *Metrics is off.
type Metrics struct {
	reg        *prometheus.Registry
	calls      *prometheus.CounterVec   // tool, outcome
	duration   *prometheus.HistogramVec // tool
	starts     *prometheus.HistogramVec // provider
	jobs       *prometheus.CounterVec   // provider
	proxy      *prometheus.CounterVec   // outcome
	proxyBytes *prometheus.CounterVec   // direction
	state      *stateCollector
}

// New makes the metric set of a server of version whose sandboxes come
// from provider (their series exist from the start, at 0), with the Go
// runtime's and the process's collectors.
func New(version, provider string) *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandbox_mcp_tool_calls_total",
			Help: "Tool calls answered, by tool and outcome (ok, error, denied, timeout: the audit line's).",
		}, []string{"tool", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sandbox_mcp_tool_call_duration_seconds",
			Help:    "How long tool calls took, from the request to the answer (waiting for a slot and a sandbox included), by tool.",
			Buckets: durationBuckets,
		}, []string{"tool"}),
		starts: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sandbox_mcp_sandbox_start_duration_seconds",
			Help:    "Boxes started for a call (cold starts: a supervisor, a container or a Pod made or started), and how long each took to run, by provider.",
			Buckets: startBuckets,
		}, []string{"provider"}),
		jobs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandbox_mcp_jobs_started_total",
			Help: "Commands that became jobs (bash run_in_background, or past yield_after), by provider.",
		}, []string{"provider"}),
		proxy: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandbox_mcp_proxy_connections_total",
			Help: "The egress proxy's tunnels and plain-HTTP requests (network.mode allowlist), by outcome: ok, denied (refused by network.allow), error (allowed, failed).",
		}, []string{"outcome"}),
		proxyBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandbox_mcp_proxy_bytes_total",
			Help: "Bytes the egress proxy carried, by direction: up (from the sandboxes), down (to them).",
		}, []string{"direction"}),
		state: newStateCollector(),
	}
	build := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "sandbox_mcp_build_info",
		Help:        "Always 1; its label is the server's version.",
		ConstLabels: prometheus.Labels{"version": version},
	})
	build.Set(1)
	m.reg.MustRegister(m.calls, m.duration, m.starts, m.jobs, m.proxy, m.proxyBytes, m.state, build,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.starts.WithLabelValues(provider)
	m.jobs.WithLabelValues(provider)
	for _, o := range []string{"ok", "denied", "error"} {
		m.proxy.WithLabelValues(o)
	}
	for _, d := range []string{"up", "down"} {
		m.proxyBytes.WithLabelValues(d)
	}
	return m
}

// Registry is the registry the metrics are in (for tests, and for
// collectors of a caller's own).
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Tool is one tool's instruments, resolved once: a call then costs a few
// atomic adds. A nil *Tool (of a nil *Metrics) does nothing.
type Tool struct {
	name     string
	calls    *prometheus.CounterVec
	outcome  map[string]prometheus.Counter // read only once made
	duration prometheus.Observer
}

// Tool returns the instruments of the calls of tool name; nil when m is.
func (m *Metrics) Tool(name string) *Tool {
	if m == nil {
		return nil
	}
	t := &Tool{name: name, calls: m.calls, outcome: map[string]prometheus.Counter{}, duration: m.duration.WithLabelValues(name)}
	for _, o := range outcomes {
		t.outcome[o] = m.calls.WithLabelValues(name, o)
	}
	return t
}

// Done counts one call of the tool, answered with outcome after took.
func (t *Tool) Done(outcome string, took time.Duration) {
	if t == nil {
		return
	}
	c, ok := t.outcome[outcome]
	if !ok {
		c = t.calls.WithLabelValues(t.name, outcome)
	}
	c.Inc()
	t.duration.Observe(took.Seconds())
}

// JobStarted counts a command of provider's sandbox that became a job.
func (m *Metrics) JobStarted(provider string) {
	if m == nil {
		return
	}
	m.jobs.WithLabelValues(provider).Inc()
}

// BoxStarted counts a box that provider made or started for a call, and
// how long it took to run.
func (m *Metrics) BoxStarted(provider string, took time.Duration) {
	if m == nil {
		return
	}
	m.starts.WithLabelValues(provider).Observe(took.Seconds())
}

// ProxyConnection counts one of the egress proxy's connections (a tunnel
// or a plain request) with its outcome and the bytes it carried up (from
// the sandbox) and down (to it).
func (m *Metrics) ProxyConnection(outcome string, up, down int64) {
	if m == nil {
		return
	}
	m.proxy.WithLabelValues(outcome).Inc()
	if up > 0 {
		m.proxyBytes.WithLabelValues("up").Add(float64(up))
	}
	if down > 0 {
		m.proxyBytes.WithLabelValues("down").Add(float64(down))
	}
}

// State is what the server says of itself at each scrape.
type State struct {
	InFlight int // tool calls running
	Sessions int // MCP sessions open
	// Provider names the sandboxes' provider; Sandboxes counts them by
	// state (Bound, Active, Running). A state left out is not reported.
	Provider  string
	Sandboxes map[string]int
}

// Observe makes f what the gauges say at each scrape: it is called once
// per scrape, so it must be cheap. The last one given wins.
func (m *Metrics) Observe(f func() State) {
	if m == nil {
		return
	}
	m.state.mu.Lock()
	m.state.f = f
	m.state.mu.Unlock()
}

// stateCollector reports the gauges of State, asking for it at a scrape
// rather than being told of every change on the call path.
type stateCollector struct {
	inflight, sessions, sandboxes *prometheus.Desc

	mu sync.Mutex
	f  func() State
}

func newStateCollector() *stateCollector {
	return &stateCollector{
		inflight:  prometheus.NewDesc("sandbox_mcp_tool_calls_in_flight", "Tool calls running now.", nil, nil),
		sessions:  prometheus.NewDesc("sandbox_mcp_sessions", "MCP sessions open (Streamable HTTP and SSE; over stdio, its one).", nil, nil),
		sandboxes: prometheus.NewDesc("sandbox_mcp_sandboxes", "Sandboxes by provider and state: bound (a thread's sandbox this server holds, for a session, a stateless lease or its running jobs), active (bound, a tool call using it now), running (boxes running, as the provider knows them).", []string{"provider", "state"}, nil),
	}
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.inflight
	ch <- c.sessions
	ch <- c.sandboxes
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	f := c.f
	c.mu.Unlock()
	if f == nil {
		return
	}
	s := f()
	ch <- prometheus.MustNewConstMetric(c.inflight, prometheus.GaugeValue, float64(s.InFlight))
	ch <- prometheus.MustNewConstMetric(c.sessions, prometheus.GaugeValue, float64(s.Sessions))
	states := make([]string, 0, len(s.Sandboxes))
	for st := range s.Sandboxes {
		states = append(states, st)
	}
	slices.Sort(states)
	for _, st := range states {
		ch <- prometheus.MustNewConstMetric(c.sandboxes, prometheus.GaugeValue, float64(s.Sandboxes[st]), s.Provider, st)
	}
}

// Handler serves the metrics in the text exposition format, a few
// scrapes at a time.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		Registry:            m.reg, // its own errors counted there too
		MaxRequestsInFlight: 4,
		Timeout:             10 * time.Second,
	})
}

// Serve serves GET /metrics on ln until ctx is cancelled; every other
// path is 404. It has no auth: what it says holds no secret and names no
// thread (the package comment); where it listens is the operator's choice
// (loopback by default).
func (m *Metrics) Serve(ctx context.Context, ln net.Listener) error {
	mux := http.NewServeMux()
	mux.Handle("GET "+Path, m.Handler())
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    16 << 10,
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
