package main

import (
	"context"
	"fmt"
	"time"

	mclient "github.com/mark3labs/mcp-go/client"
	mmcp "github.com/mark3labs/mcp-go/mcp"
)

// mcpgoStdio is a server on stdio driven by mcp-go's client: a second real
// client, beside go-sdk's, with a different cost of its own.
type mcpgoStdio struct{ c *mclient.Client }

func startMcpgo(ctx context.Context, name string, args ...string) (*mcpgoStdio, error) {
	c, err := mclient.NewStdioMCPClient(name, benchEnv(), args...)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	var init mmcp.InitializeRequest
	init.Params.ProtocolVersion = "2025-06-18"
	init.Params.ClientInfo = mmcp.Implementation{Name: "bench-mcp-go", Version: "1"}
	if _, err := c.Initialize(ctx, init); err != nil {
		c.Close()
		return nil, fmt.Errorf("initialize %s: %w", name, err)
	}
	return &mcpgoStdio{c: c}, nil
}

func (m *mcpgoStdio) Close() { m.c.Close() }

func (m *mcpgoStdio) call(ctx context.Context, tool string, args map[string]any) error {
	var req mmcp.CallToolRequest
	req.Params.Name, req.Params.Arguments = tool, args
	res, err := m.c.CallTool(ctx, req)
	if err != nil {
		return fmt.Errorf("%s: %w", tool, err)
	}
	if res.IsError {
		return fmt.Errorf("%s: error result: %v", tool, res.Content)
	}
	return nil
}

// measureMcpgo times n read_file calls on ours and n noop calls on the
// peer through mcp-go's client, alternating, after a warm-up.
func measureMcpgo(ctx context.Context, ours, peer *mcpgoStdio, n int) (o, p []time.Duration, err error) {
	read := map[string]any{"path": "small.txt"}
	for i := range n + 100 {
		t := time.Now()
		if err := ours.call(ctx, "read_file", read); err != nil {
			return nil, nil, err
		}
		d := time.Since(t)
		t = time.Now()
		if err := peer.call(ctx, "noop", map[string]any{}); err != nil {
			return nil, nil, err
		}
		if i >= 100 {
			o, p = append(o, d), append(p, time.Since(t))
		}
	}
	return o, p, nil
}
