package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The peer is the least an MCP server can do: a go-sdk server whose one
// tool, noop, answers "ok". It is this program run with -peer stdio or
// -peer http, so the harness needs nothing but itself to compare against.

func peerServer() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "peer", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "noop", Description: "Does nothing."},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}, nil, nil
		})
	return s
}

// runPeer serves the peer on stdio, or over Streamable HTTP on a free
// loopback port (announced on stderr the way sandbox-mcp announces its own),
// until stdin ends or a signal comes.
func runPeer(mode string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	s := peerServer()
	switch mode {
	case "stdio":
		return s.Run(ctx, &mcp.StdioTransport{})
	case "http":
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
		srv := &http.Server{Handler: h}
		go func() {
			<-ctx.Done()
			srv.Close()
		}()
		fmt.Fprintf(os.Stderr, "serving MCP over HTTP addr=%s\n", ln.Addr())
		if err := srv.Serve(ln); err != http.ErrServerClosed {
			return err
		}
		return nil
	}
	return fmt.Errorf("-peer %q: want stdio or http", mode)
}
