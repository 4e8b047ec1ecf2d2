package main

import (
	"bytes"
	"errors"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/audit"
	"github.com/sandbox-mcp/sandbox-mcp/metrics"
)

// metrics.addr is one key, declared once (metrics.Config), and --metrics
// sets it over the file's; a bad one names the key where it was set.
func TestMetricsConfig(t *testing.T) {
	t.Parallel()
	c, err := loadConfig(writeConfig(t, "metrics: {addr: \"127.0.0.1:9090\"}\n"), env())
	if err != nil || c.Metrics.Addr != "127.0.0.1:9090" {
		t.Fatalf("metrics.addr: %q %v", c.Metrics.Addr, err)
	}
	if _, err := loadConfig(writeConfig(t, "metrics: {adr: \":9090\"}\n"), env()); err == nil || !strings.Contains(err.Error(), `unknown key "metrics.adr" (did you mean "metrics.addr"?)`) {
		t.Errorf("an unknown metrics key: %v", err)
	}
	root := t.TempDir()
	file := writeConfig(t, "provider: local\nmetrics:\n  addr: \"nine\"\n")
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "sandbox-mcp: config " + file + ` line 3: metrics.addr "nine": want host:port, such as 127.0.0.1:9090` + "\n"},
		{[]string{"--metrics", "ten"}, `sandbox-mcp: --metrics "ten": want host:port, such as 127.0.0.1:9090` + "\n"},
	} {
		var stdout, stderr bytes.Buffer
		args := append([]string{"--config", file, "--state-dir", filepath.Join(root, "s")}, c.args...)
		if code := run(args, strings.NewReader(""), &stdout, &stderr, env("HOME", root)); code != 2 || stderr.String() != c.want {
			t.Errorf("run %v = %d, stderr %q; want 2 and %q", c.args, code, stderr.String(), c.want)
		}
	}
	var stdout, stderr bytes.Buffer
	run([]string{"--help"}, strings.NewReader(""), &stdout, &stderr, env())
	if !strings.Contains(stdout.String(), "-metrics ADDR") {
		t.Errorf("--help does not list --metrics ADDR:\n%s", stdout.String())
	}
}

// recordSink records what reaches it; Record fails when told to.
type recordSink struct {
	audit.Discard
	got  []audit.Event
	fail bool
}

func (s *recordSink) Record(e audit.Event) error {
	s.got = append(s.got, e)
	if s.fail {
		return errors.New("disk full")
	}
	return nil
}

// The metrics' sink counts the proxy's lines (tool "network") — written
// or not — and passes every line on as it is; the tools' lines are not
// the proxy's.
func TestProxyCounter(t *testing.T) {
	t.Parallel()
	cfg := &Config{Provider: "local", Metrics: metrics.Config{Addr: "127.0.0.1:0"}}
	under := &recordSink{}
	var sink audit.Sink = under
	m := newMetrics(cfg, &sink)
	if m == nil || cfg.Local.Metrics == nil || cfg.Docker.Metrics == nil || cfg.Kubernetes.Metrics == nil {
		t.Fatal("metrics not made, or not handed to the providers")
	}
	sink.Record(audit.Event{Tool: "network", Outcome: "ok", Args: map[string]any{"bytes_up": int64(10), "bytes_down": int64(200)}})
	sink.Record(audit.Event{Tool: "network", Outcome: "denied", Args: map[string]any{"bytes_up": int64(0), "bytes_down": int64(0)}})
	sink.Record(audit.Event{Tool: "bash", Outcome: "ok", Args: map[string]any{"bytes_up": int64(5)}})
	under.fail = true
	if err := sink.Record(audit.Event{Tool: "network", Outcome: "error", Args: map[string]any{"bytes_up": int64(1), "bytes_down": int64(0)}}); err == nil {
		t.Error("the sink's error was not passed on")
	}
	if len(under.got) != 4 {
		t.Errorf("%d lines reached the sink, want 4", len(under.got))
	}
	var out bytes.Buffer
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		for _, s := range f.Metric {
			if strings.HasPrefix(f.GetName(), "sandbox_mcp_proxy_") {
				out.WriteString(f.GetName() + "{" + labelsOf(s) + "} " + strconv.FormatFloat(s.GetCounter().GetValue(), 'f', -1, 64) + "\n")
			}
		}
	}
	want := "sandbox_mcp_proxy_bytes_total{direction=down} 200\nsandbox_mcp_proxy_bytes_total{direction=up} 11\n" +
		"sandbox_mcp_proxy_connections_total{outcome=denied} 1\nsandbox_mcp_proxy_connections_total{outcome=error} 1\nsandbox_mcp_proxy_connections_total{outcome=ok} 1\n"
	if out.String() != want {
		t.Errorf("proxy metrics:\n%s\nwant\n%s", out.String(), want)
	}
	off := &Config{Provider: "local"}
	sink = under
	if newMetrics(off, &sink) != nil || sink != audit.Sink(under) || off.Local.Metrics != nil {
		t.Error("without metrics.addr, metrics were made or wired")
	}
}
