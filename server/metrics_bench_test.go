package server_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/metrics"
	"github.com/sandbox-mcp/sandbox-mcp/providers/local"
	"github.com/sandbox-mcp/sandbox-mcp/server"
	"github.com/sandbox-mcp/sandbox-mcp/tools"
)

// BenchmarkMetricsOverhead measures what metrics cost a warm read_file
// through the server: two servers alike but for Config.Metrics (nil, and
// a metric set), each fed JSON-RPC lines over in-process pipes (ServeStdio),
// one call on each alternately so that the machine's drift falls on both;
// medians, and their difference per call. Run it with
//
//	go test -run '^$' -bench MetricsOverhead -benchtime 5000x -count 5 ./server/
func BenchmarkMetricsOverhead(b *testing.B) {
	type side struct {
		send func(string)
		recv func()
		took []time.Duration
	}
	start := func(m *metrics.Metrics) *side {
		state := b.TempDir()
		ws := filepath.Join(local.ThreadDir(state, "default"), "workspace")
		if err := os.MkdirAll(ws, 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(ws, "small.txt"), bytes.Repeat([]byte("the quick brown fox jumps over the lazy dog, 0123456789 abcd\n"), 17)[:1024], 0o644); err != nil {
			b.Fatal(err)
		}
		p, err := local.New(local.Config{StateDir: state})
		if err != nil {
			b.Fatal(err)
		}
		srv := server.New(server.Config{Provider: p, Limits: tools.DefaultLimits(), StateDir: state, Metrics: m})
		b.Cleanup(func() { srv.Close() })
		inR, inW := io.Pipe()
		outR, outW := io.Pipe()
		ctx, cancel := context.WithCancel(context.Background())
		b.Cleanup(func() { cancel(); inW.Close() })
		go srv.ServeStdio(ctx, "default", inR, outW)
		replies := bufio.NewReader(outR)
		s := &side{
			send: func(line string) {
				if _, err := io.WriteString(inW, line+"\n"); err != nil {
					b.Fatal(err)
				}
			},
			recv: func() {
				line, err := replies.ReadBytes('\n')
				if err != nil || bytes.Contains(line, []byte(`"isError":true`)) {
					b.Fatalf("%v %s", err, line)
				}
			},
		}
		s.send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}`)
		s.recv()
		s.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
		return s
	}
	m := metrics.New("bench", "local")
	off, on := start(nil), start(m)
	id := 0
	call := func(s *side) time.Duration {
		id++
		t := time.Now()
		s.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"read_file","arguments":{"path":"small.txt"}}}`, id))
		s.recv()
		return time.Since(t)
	}
	for range 500 { // warm up both
		call(off)
		call(on)
	}
	for b.Loop() {
		off.took = append(off.took, call(off))
		on.took = append(on.took, call(on))
	}
	median := func(d []time.Duration) float64 {
		d = slices.Clone(d)
		slices.Sort(d)
		return float64(d[len(d)/2].Nanoseconds()) / 1e3
	}
	o, n := median(off.took), median(on.took)
	b.ReportMetric(o, "off-µs")
	b.ReportMetric(n, "on-µs")
	b.ReportMetric((n-o)/o*100, "overhead-%")
	// The calls were counted: the "on" side really ran with metrics.
	fams, err := m.Registry().Gather()
	if err != nil {
		b.Fatal(err)
	}
	var counted float64
	for _, f := range fams {
		if f.GetName() == "sandbox_mcp_tool_calls_total" {
			for _, s := range f.Metric {
				counted += s.GetCounter().GetValue()
			}
		}
	}
	if want := float64(len(on.took) + 500); counted < want {
		b.Fatalf("metrics counted %v calls, want at least %v", counted, want)
	}
}
