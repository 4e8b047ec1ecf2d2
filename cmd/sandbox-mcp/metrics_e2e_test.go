package main

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/sandbox-mcp/sandbox-mcp/tools"
)

var metricsLine = regexp.MustCompile(`serving metrics addr=(\S+)`)

// metricsURL is the /metrics URL a server's start-up line names.
func metricsURL(t *testing.T, stderr string) string {
	t.Helper()
	m := metricsLine.FindStringSubmatch(stderr)
	if m == nil {
		t.Fatalf("no \"serving metrics\" line:\n%s", stderr)
	}
	return "http://" + m[1] + "/metrics"
}

// families scrapes url and parses its text exposition as Prometheus does.
type families map[string]*dto.MetricFamily

func scrapeMetrics(t *testing.T, url string) families {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: the text parser: %v", url, err)
	}
	return fams
}

// labelsOf is a series' labels as "k=v,k=v", sorted.
func labelsOf(m *dto.Metric) string {
	var l []string
	for _, p := range m.Label {
		l = append(l, p.GetName()+"="+p.GetValue())
	}
	slices.Sort(l)
	return strings.Join(l, ",")
}

// values are the family's series by their labels: a counter's or a
// gauge's value, a histogram's count.
func (f families) values(name string) map[string]float64 {
	out := map[string]float64{}
	fam := f[name]
	if fam == nil {
		return out
	}
	for _, m := range fam.Metric {
		switch {
		case m.Counter != nil:
			out[labelsOf(m)] = m.Counter.GetValue()
		case m.Gauge != nil:
			out[labelsOf(m)] = m.Gauge.GetValue()
		case m.Histogram != nil:
			out[labelsOf(m)] = float64(m.Histogram.GetSampleCount())
		}
	}
	return out
}

// nonZero is values without the series at 0.
func (f families) nonZero(name string) map[string]float64 {
	out := f.values(name)
	for k, v := range out {
		if v == 0 {
			delete(out, k)
		}
	}
	return out
}

// wantValues checks the family's series exactly (nonZero: those not at 0).
func wantValues(t *testing.T, got map[string]float64, name string, want map[string]float64) {
	t.Helper()
	if !mapsEqual(got, want) {
		t.Errorf("%s = %v, want %v", name, got, want)
	}
}

func mapsEqual(a, b map[string]float64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// listeningPorts are the TCP ports process pid listens on (its own
// sockets, as /proc says).
func listeningPorts(t *testing.T, pid int) []int {
	t.Helper()
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Skipf("SKIPPED: no /proc to list a process's sockets: %v", err)
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		link, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if inode, ok := strings.CutPrefix(link, "socket:["); err == nil && ok {
			inodes[strings.TrimSuffix(inode, "]")] = true
		}
	}
	var ports []int
	for _, table := range []string{"tcp", "tcp6"} {
		f, err := os.Open(fmt.Sprintf("/proc/%d/net/%s", pid, table))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
			fields := strings.Fields(sc.Text())
			if len(fields) < 10 || fields[3] != "0A" || !inodes[fields[9]] {
				continue
			}
			_, hexPort, _ := strings.Cut(fields[1], ":")
			if port, err := strconv.ParseUint(hexPort, 16, 16); err == nil {
				ports = append(ports, int(port))
			}
		}
		f.Close()
	}
	slices.Sort(ports)
	return ports
}

func portOfAddr(t *testing.T, hostport string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(strings.TrimPrefix(strings.TrimSuffix(hostport, "/metrics"), "http://"))
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(p)
	return n
}

// waitMetrics scrapes until ok holds of what it reads, or fails.
func waitMetrics(t *testing.T, url, what string, ok func(families) bool) families {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		f := scrapeMetrics(t, url)
		if ok(f) {
			return f
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not so after 15s: sandboxes %v, sessions %v, in flight %v", what,
				f.values("sandbox_mcp_sandboxes"), f.values("sandbox_mcp_sessions"), f.values("sandbox_mcp_tool_calls_in_flight"))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// The real binary over HTTP with --metrics on loopback port 0, the local
// provider in bubblewrap: tool calls of every outcome, counted exactly by
// tool and outcome, each in its tool's duration histogram; the gauges say
// what runs while a call runs and after; one supervisor started (a cold
// start) for the thread, one job. Without --metrics the process listens
// on the HTTP port alone.
func TestE2EMetrics(t *testing.T) {
	t.Parallel()
	requireBwrap(t)
	p := startHTTPBinary(t, "--isolation", "bwrap", "--metrics", "127.0.0.1:0")
	url := metricsURL(t, p.stderr.String())
	want := []int{portOfAddr(t, p.url), portOfAddr(t, url)}
	slices.Sort(want)
	if got := listeningPorts(t, p.cmd.Process.Pid); !slices.Equal(got, want) {
		t.Errorf("listening on %v, want the HTTP and the metrics ports %v", got, want)
	}
	off := startHTTPBinary(t, "--isolation", "bwrap")
	if got, want := listeningPorts(t, off.cmd.Process.Pid), []int{portOfAddr(t, off.url)}; !slices.Equal(got, want) {
		t.Errorf("without --metrics listening on %v, want the HTTP port %v alone", got, want)
	}
	if strings.Contains(off.stderr.String(), "serving metrics") {
		t.Errorf("without --metrics it says it serves them:\n%s", off.stderr)
	}

	// Before any call: every tool's series at 0, nothing bound.
	f := scrapeMetrics(t, url)
	if n, nt := len(f.values("sandbox_mcp_tool_calls_total")), len(tools.All()); n != nt*4 {
		t.Errorf("%d tool call series before any call, want %d tools x 4 outcomes", n, nt)
	}
	wantValues(t, f.nonZero("sandbox_mcp_tool_calls_total"), "calls before any", map[string]float64{})
	wantValues(t, f.values("sandbox_mcp_sandboxes"), "sandboxes before any call",
		map[string]float64{"provider=local,state=bound": 0, "provider=local,state=active": 0, "provider=local,state=running": 0})

	// A session of its own (2025-11-25: one the gauge counts), thread m.
	p.legacyClients = true
	cs := jobsSession(t, p, "m")
	call := func(name string, args map[string]any, wantErr bool) string {
		t.Helper()
		out, isErr := jobsCall(t, p, cs, name, args)
		if isErr != wantErr {
			t.Fatalf("%s(%v) = %q, isError %v", name, args, out, isErr)
		}
		return out
	}
	call("write_file", map[string]any{"path": "a.txt", "content": "hello\n"}, false)
	call("read_file", map[string]any{"path": "a.txt"}, false)
	call("read_file", map[string]any{"path": "missing.txt"}, true)          // error
	call("read_file", map[string]any{"path": "../../etc/passwd"}, true)     // denied
	call("bash", map[string]any{"command": "echo hi"}, false)               // the supervisor starts
	call("bash", map[string]any{"command": "sleep 5", "timeout": 1}, false) // timeout (a result, not an error)
	if out := call("bash", map[string]any{"command": "sleep 0.5", "run_in_background": true}, false); !strings.Contains(out, "started") {
		t.Fatalf("run_in_background: %q", out)
	}

	// A call running: in flight, its sandbox active.
	var wg sync.WaitGroup
	wg.Go(func() { call("bash", map[string]any{"command": "sleep 3"}, false) })
	f = waitMetrics(t, url, "a call in flight", func(f families) bool {
		return f.values("sandbox_mcp_tool_calls_in_flight")[""] == 1
	})
	wantValues(t, f.values("sandbox_mcp_sandboxes"), "sandboxes during a call",
		map[string]float64{"provider=local,state=bound": 1, "provider=local,state=active": 1, "provider=local,state=running": 1})
	wg.Wait()

	f = scrapeMetrics(t, url)
	wantValues(t, f.nonZero("sandbox_mcp_tool_calls_total"), "sandbox_mcp_tool_calls_total", map[string]float64{
		"outcome=ok,tool=write_file": 1,
		"outcome=ok,tool=read_file":  1, "outcome=error,tool=read_file": 1, "outcome=denied,tool=read_file": 1,
		"outcome=ok,tool=bash": 3, "outcome=timeout,tool=bash": 1,
	})
	wantValues(t, f.nonZero("sandbox_mcp_tool_call_duration_seconds"), "the duration histograms' counts", map[string]float64{
		"tool=write_file": 1, "tool=read_file": 3, "tool=bash": 4,
	})
	h := f["sandbox_mcp_tool_call_duration_seconds"]
	for _, m := range h.Metric {
		if labelsOf(m) == "tool=bash" && m.Histogram.GetSampleSum() < 4 { // the timeout's 1 s and the 3 s sleep
			t.Errorf("bash's durations add up to %vs, want at least 4", m.Histogram.GetSampleSum())
		}
	}
	wantValues(t, f.values("sandbox_mcp_sandbox_start_duration_seconds"), "box starts", map[string]float64{"provider=local": 1})
	wantValues(t, f.values("sandbox_mcp_jobs_started_total"), "jobs started", map[string]float64{"provider=local": 1})
	wantValues(t, f.values("sandbox_mcp_tool_calls_in_flight"), "in flight after the calls", map[string]float64{"": 0})
	wantValues(t, f.values("sandbox_mcp_sessions"), "sessions", map[string]float64{"": 1})
	wantValues(t, f.values("sandbox_mcp_sandboxes"), "sandboxes between calls",
		map[string]float64{"provider=local,state=bound": 1, "provider=local,state=active": 0, "provider=local,state=running": 1})
	for _, name := range []string{"go_goroutines", "process_resident_memory_bytes", "sandbox_mcp_build_info"} {
		if f[name] == nil {
			t.Errorf("no %s", name)
		}
	}

	// The session ends (its job has, too): nothing bound, nothing runs.
	cs.Close()
	waitMetrics(t, url, "the session's end", func(f families) bool {
		return mapsEqual(f.values("sandbox_mcp_sessions"), map[string]float64{"": 0}) &&
			mapsEqual(f.values("sandbox_mcp_sandboxes"), map[string]float64{"provider=local,state=bound": 0, "provider=local,state=active": 0, "provider=local,state=running": 0})
	})
}

// With network.mode allowlist over stdio, --metrics counts the proxy's
// connections by outcome — one allowed, one refused (a port not listed),
// one allowed that failed (nothing listens there) — and the bytes that
// the audit log's lines say they carried.
func TestE2EMetricsProxy(t *testing.T) {
	t.Parallel()
	requireBwrap(t)
	requireCurl(t)
	u := newUpstream(t)
	closed, err := net.Listen("tcp", net.JoinHostPort(u.ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := closed.Addr().String()
	closed.Close() // allowed, and nothing listens there
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf("network:\n  mode: allowlist\n  allow: [%q, %q]\n", hostPort(u.plain), deadAddr)), 0o644)
	p := start(t, opts{noBash: true, isolation: "bwrap", extra: []string{"--config", cfg, "--metrics", "127.0.0.1:0"}, env: netEnv(u)})
	url := metricsURL(t, p.stderr.String())

	bash := func(cmd, want string) {
		t.Helper()
		if out, _ := p.call("bash", map[string]any{"command": cmd, "timeout": 60}); !strings.Contains(out, want) {
			t.Errorf("bash %q = %q, want it to hold %q", cmd, out, want)
		}
	}
	bash("curl -sS http://"+hostPort(u.plain)+"/", upstreamHello)
	bash(fmt.Sprintf("curl -sS http://%s:9/", u.ip), "network.allow")
	bash("curl -sS http://"+deadAddr+"/", "cannot reach")

	var up, down float64
	outcomes := map[string]float64{}
	for _, l := range netAuditLines(t, p.auditPath) {
		args, _ := l["args"].(map[string]any)
		b1, _ := args["bytes_up"].(float64)
		b2, _ := args["bytes_down"].(float64)
		up, down = up+b1, down+b2
		outcomes[fmt.Sprint("outcome=", l["outcome"])]++
	}
	wantValues(t, outcomes, "the audit log's network lines", map[string]float64{"outcome=ok": 1, "outcome=denied": 1, "outcome=error": 1})
	if down < float64(len(upstreamHello)) {
		t.Fatalf("the audit log says %v bytes down, want at least the upstream's answer", down)
	}
	f := scrapeMetrics(t, url)
	wantValues(t, f.values("sandbox_mcp_proxy_connections_total"), "sandbox_mcp_proxy_connections_total", outcomes)
	wantValues(t, f.values("sandbox_mcp_proxy_bytes_total"), "sandbox_mcp_proxy_bytes_total", map[string]float64{"direction=up": up, "direction=down": down})
	// The proxy's lines are no tool calls.
	wantValues(t, f.nonZero("sandbox_mcp_tool_calls_total"), "sandbox_mcp_tool_calls_total", map[string]float64{"outcome=ok,tool=bash": 3})
	wantValues(t, f.values("sandbox_mcp_sessions"), "sessions (stdio's one)", map[string]float64{"": 1})
}

// A metrics address that cannot be served stops start-up with one line
// naming the flag; a malformed one names it too.
func TestE2EMetricsAddrRefused(t *testing.T) {
	t.Parallel()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	for _, c := range []struct{ addr, want string }{
		{taken.Addr().String(), "sandbox-mcp: --metrics: listen tcp " + taken.Addr().String() + ": bind: address already in use\n"},
		{"9090", "sandbox-mcp: --metrics \"9090\": want host:port, such as 127.0.0.1:9090\n"},
	} {
		dir := t.TempDir()
		cmd := exec.Command(binary(t), "--metrics", c.addr, "--state-dir", filepath.Join(dir, "state"), "--audit-log", "off", "--isolation", "none")
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		if code != 2 || !strings.HasSuffix(string(out), c.want) {
			t.Errorf("--metrics %s: exit %d\n%s\nwant exit 2 ending with %q", c.addr, code, out, c.want)
		}
	}
}
