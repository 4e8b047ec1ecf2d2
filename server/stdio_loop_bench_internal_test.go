package server

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	mcpserver "github.com/mark3labs/mcp-go/server"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/providers/local"
	"github.com/sandbox-mcp/sandbox-mcp/tools"
)

// BenchmarkStdioLoopVsMCPGo decides whether the server keeps its own stdio
// loop (stdio.go): the same server, tool and file, once behind our loop and
// once behind mcp-go's StdioServer (with a context function giving the
// thread), fed JSON-RPC lines through in-process pipes, one call on each
// alternately; medians. Issue #17 keeps ours only if it is at least 20%
// faster. Run it with
//
//	go test -run '^$' -bench StdioLoopVsMCPGo -benchtime 2000x ./server/
func BenchmarkStdioLoopVsMCPGo(b *testing.B) {
	b.Run("raw", func(b *testing.B) { benchStdioLoops(b, false) })
	b.Run("go-sdk-client", func(b *testing.B) { benchStdioLoops(b, true) })
}

// benchStdioLoops times the two loops, raw JSON-RPC lines or through a
// go-sdk client (its own cost included, as an agent sees it).
func benchStdioLoops(b *testing.B, client bool) {
	type side struct {
		send func(string)
		recv func()
		call func() // the client's call, when through a client
		took []time.Duration
	}
	start := func(mcpgo bool) *side {
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
		srv := New(Config{Provider: p, Limits: tools.DefaultLimits(), StateDir: state})
		b.Cleanup(func() { srv.Close() })
		inR, inW := io.Pipe()
		outR, outW := io.Pipe()
		ctx, cancel := context.WithCancel(context.Background())
		b.Cleanup(func() { cancel(); inW.Close() })
		if mcpgo {
			threads := func(string, http.Header) ThreadRef { return ThreadRef{ID: "default", Key: "default"} }
			stdio := mcpserver.NewStdioServer(srv.mcp)
			stdio.SetContextFunc(func(ctx context.Context) context.Context { return withThreads(ctx, threads) })
			go stdio.Listen(ctx, inR, outW)
		} else {
			go srv.ServeStdio(ctx, "default", inR, outW)
		}
		if client {
			cs, err := sdk.NewClient(&sdk.Implementation{Name: "bench", Version: "1"}, nil).Connect(ctx, &sdk.IOTransport{Reader: outR, Writer: inW}, nil)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { cs.Close() })
			return &side{call: func() {
				if res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "read_file", Arguments: map[string]any{"path": "small.txt"}}); err != nil || res.IsError {
					b.Fatalf("read_file: %v %+v", err, res)
				}
			}}
		}
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
	ours, theirs := start(false), start(true)
	id := 0
	call := func(s *side) time.Duration {
		id++
		t := time.Now()
		if s.call != nil {
			s.call()
			return time.Since(t)
		}
		s.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"read_file","arguments":{"path":"small.txt"}}}`, id))
		s.recv()
		return time.Since(t)
	}
	for range 200 { // warm up both
		call(ours)
		call(theirs)
	}
	for b.Loop() {
		ours.took = append(ours.took, call(ours))
		theirs.took = append(theirs.took, call(theirs))
	}
	median := func(d []time.Duration) float64 {
		d = slices.Clone(d)
		slices.Sort(d)
		return float64(d[len(d)/2].Microseconds())
	}
	o, t := median(ours.took), median(theirs.took)
	b.ReportMetric(o, "ours-µs")
	b.ReportMetric(t, "mcpgo-µs")
	b.ReportMetric(o/t, "ratio")
}
