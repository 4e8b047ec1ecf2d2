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
	m := metrics.New("bench", "local")
	off, on := startBench(b, nil), startBench(b, func(c *server.Config) { c.Metrics = m })
	compareBench(b, off, on)
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
	if want := float64(len(on.took) + benchWarmUp); counted < want {
		b.Fatalf("metrics counted %v calls, want at least %v", counted, want)
	}
}

// benchSide is one server of an overhead benchmark: what sends it a
// JSON-RPC line, what reads its answer, and how long each call took.
type benchSide struct {
	send func(string)
	recv func()
	took []time.Duration
	id   int
}

// startBench serves stdio over in-process pipes on a local provider whose
// thread holds small.txt (1 KiB), with the server's configuration as set
// makes it (nil: as it is), initialized.
func startBench(b *testing.B, set func(*server.Config)) *benchSide {
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
	cfg := server.Config{Provider: p, Limits: tools.DefaultLimits(), StateDir: state}
	if set != nil {
		set(&cfg)
	}
	srv := server.New(cfg)
	b.Cleanup(func() { srv.Close() })
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(func() { cancel(); inW.Close() })
	go srv.ServeStdio(ctx, "default", inR, outW)
	replies := bufio.NewReader(outR)
	s := &benchSide{
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

// call reads small.txt through s once, and says how long it took.
func (s *benchSide) call() time.Duration {
	s.id++
	t := time.Now()
	s.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"read_file","arguments":{"path":"small.txt"}}}`, s.id))
	s.recv()
	return time.Since(t)
}

// benchWarmUp is how many calls each side gets before it is measured.
const benchWarmUp = 500

// compareBench calls off and on alternately, each once per iteration,
// and reports their medians and on's overhead over off.
func compareBench(b *testing.B, off, on *benchSide) {
	for range benchWarmUp {
		off.call()
		on.call()
	}
	for b.Loop() {
		off.took = append(off.took, off.call())
		on.took = append(on.took, on.call())
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
}
