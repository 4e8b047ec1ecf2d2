package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/providers/local"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/server"
	"github.com/sandbox-mcp/sandbox-mcp/tools"
)

// BenchmarkServerStdio is the server's own share of a stdio round trip: the
// real server (mcp-go's stdio loop, session binding, the tool, masking)
// fed JSON-RPC lines through in-process pipes, with no client library and
// no process boundary. Profile it with
//
//	go test -run '^$' -bench ServerStdio -cpuprofile cpu.out ./bench/
func BenchmarkServerStdio(b *testing.B) {
	state := b.TempDir()
	ws := filepath.Join(local.ThreadDir(state, "default"), "workspace")
	if err := os.MkdirAll(ws, 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "small.txt"), []byte(smallFile), 0o644); err != nil {
		b.Fatal(err)
	}
	cfg := local.Config{StateDir: state}
	src := goSrc()
	if src != "" {
		cfg.Mounts = []sandbox.Mount{{Virtual: goroot, Host: src, ReadOnly: true}}
	}
	p, err := local.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	srv := server.New(server.Config{Provider: p, Limits: tools.DefaultLimits(), StateDir: state})
	defer srv.Close()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- srv.ServeStdio(b.Context(), "default", inR, outW) }()
	defer func() {
		inW.Close()
		<-done
	}()
	replies := bufio.NewReader(outR)
	send := func(line string) {
		b.Helper()
		if _, err := io.WriteString(inW, line+"\n"); err != nil {
			b.Fatal(err)
		}
	}
	recv := func() {
		b.Helper()
		if _, err := replies.ReadBytes('\n'); err != nil {
			b.Fatal(err)
		}
	}
	send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}`)
	recv()
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	for _, c := range []struct{ name, call string }{
		{"read_file", `"name":"read_file","arguments":{"path":"small.txt"}`},
		{"ls", `"name":"ls","arguments":{}`},
		// 7.7k paths, 300 KB of text: what the transport adds to a large answer.
		{"glob-goroot", `"name":"glob","arguments":{"pattern":"**/*.go","path":"/mnt/goroot","max_results":100000}`},
		{"write_file", fmt.Sprintf(`"name":"write_file","arguments":{"path":"w.txt","content":%q}`, smallFile)},
	} {
		if src == "" && c.name == "glob-goroot" {
			continue // no Go source tree here
		}
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			id := 0
			for b.Loop() {
				id++
				send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{%s}}`, id, c.call))
				recv()
			}
		})
	}
}
