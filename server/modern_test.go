package server_test

import (
	"strings"
	"testing"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	mcpgo "github.com/mark3labs/mcp-go/mcp"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/server"
)

const (
	modernVersion = "2026-07-28"
	legacyVersion = "2025-11-25" // the newest revision with sessions
)

// connectModern connects go-sdk's client as it comes: 2026-07-28 first.
func connectModern(t *testing.T, h *httpServer, hdr map[string]string, opts *sdk.ClientOptions) *sdk.ClientSession {
	t.Helper()
	tr := &sdk.StreamableClientTransport{Endpoint: h.url + "/mcp", HTTPClient: client(hdr), MaxRetries: -1}
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, opts).Connect(t.Context(), tr, nil)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// connectMCPGo connects mcp-go's client as it comes: 2026-07-28 first.
func connectMCPGo(t *testing.T, h *httpServer, hdr map[string]string) *mcpclient.Client {
	t.Helper()
	c, err := mcpclient.NewStreamableHttpClient(h.url+"/mcp", transport.WithHTTPHeaders(hdr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	req := mcpgo.InitializeRequest{}
	req.Params.ClientInfo = mcpgo.Implementation{Name: "test", Version: "1"}
	if _, err := c.Initialize(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	return c
}

func callMCPGo(t *testing.T, c *mcpclient.Client, name string, args map[string]any) (string, bool) {
	t.Helper()
	req := mcpgo.CallToolRequest{}
	req.Params.Name, req.Params.Arguments = name, args
	res, err := c.CallTool(t.Context(), req)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(mcpgo.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String(), res.IsError
}

// With http.stateless, a modern client that names no thread negotiates a
// session and works in its anonymous thread, as before (SPEC §10); one that
// names its thread speaks 2026-07-28. Both independent clients, each
// modern-first by default.
func TestHTTPStatelessRouting(t *testing.T) {
	t.Parallel()
	h := startHTTPWith(t, server.HTTPConfig{}, true)
	const file = "/mnt/user-data/workspace/mine"
	named := map[string]string{"X-Thread-ID": "routed"}

	t.Run("mcp-go", func(t *testing.T) {
		anon := connectMCPGo(t, h, nil)
		if v := anon.ProtocolVersion(); v != legacyVersion {
			t.Errorf("without a thread: negotiated %q, want %s", v, legacyVersion)
		}
		if out, isErr := callMCPGo(t, anon, "write_file", map[string]any{"path": file, "content": "mcp-go anon"}); isErr {
			t.Fatalf("anonymous thread: %q", out)
		}
		if out, _ := callMCPGo(t, anon, "read_file", map[string]any{"path": file}); !strings.Contains(out, "mcp-go anon") {
			t.Errorf("anonymous thread across calls: %q", out)
		}
		other := connectMCPGo(t, h, nil)
		if out, _ := callMCPGo(t, other, "read_file", map[string]any{"path": file}); strings.Contains(out, "mcp-go anon") {
			t.Errorf("another anonymous session sees the first's file: %q", out)
		}
		c := connectMCPGo(t, h, named)
		if v := c.ProtocolVersion(); v != modernVersion {
			t.Errorf("naming a thread: negotiated %q, want %s", v, modernVersion)
		}
		if out, isErr := callMCPGo(t, c, "write_file", map[string]any{"path": file, "content": "named"}); isErr {
			t.Fatalf("named thread: %q", out)
		}
	})
	t.Run("go-sdk", func(t *testing.T) {
		anon := connectModern(t, h, nil, nil)
		if v := anon.InitializeResult().ProtocolVersion; v != legacyVersion {
			t.Errorf("without a thread: negotiated %q, want %s", v, legacyVersion)
		}
		if anon.ID() == "" {
			t.Error("without a thread: no session id")
		}
		if out, isErr := call(t, anon, "write_file", map[string]any{"path": file, "content": "go-sdk anon"}); isErr {
			t.Fatalf("anonymous thread: %q", out)
		}
		if out, _ := call(t, anon, "read_file", map[string]any{"path": file}); !strings.Contains(out, "go-sdk anon") {
			t.Errorf("anonymous thread across calls: %q", out)
		}
		c := connectModern(t, h, named, nil)
		if v := c.InitializeResult().ProtocolVersion; v != modernVersion {
			t.Errorf("naming a thread: negotiated %q, want %s", v, modernVersion)
		}
		if out, _ := call(t, c, "read_file", map[string]any{"path": file}); !strings.Contains(out, "named") {
			t.Errorf("the named thread: %q", out)
		}
	})
}
