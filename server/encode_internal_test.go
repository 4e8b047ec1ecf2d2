package server

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"
)

// The fast path must give exactly what json.Marshal gives.
func TestEncodeMessageMatchesMarshal(t *testing.T) {
	text := func(s string) mcp.Content { return mcp.TextContent{Type: "text", Text: s} }
	results := map[string]*mcp.CallToolResult{
		"empty":      {},
		"plain":      {Content: []mcp.Content{text("hello\n")}},
		"escapes":    {Content: []mcp.Content{text("<a href=\"x\">&</a>\t\x00\x1f\u2028\u2029 \\ é 日本")}},
		"bad utf8":   {Content: []mcp.Content{text("a\xffb\xc3(c")}},
		"two":        {Content: []mcp.Content{text("one"), text("two")}},
		"error":      {Content: []mcp.Content{text("Error: not found: /mnt/x")}, IsError: true},
		"structured": {Content: []mcp.Content{text("x")}, StructuredContent: map[string]any{"sha256": "ab", "lines": 3, "bytes": 4}},
		"struct":     {Content: []mcp.Content{text("x")}, StructuredContent: struct{ A string }{"<b>"}},
		"resultType": {Content: []mcp.Content{text("x")}, Result: mcp.Result{ResultType: "complete"}},
		"large":      {Content: []mcp.Content{text(strings.Repeat("/mnt/goroot/src/net/http/server.go\n", 9000))}},
		// Not plain text: json.Marshal does these.
		"image":      {Content: []mcp.Content{mcp.ImageContent{Type: "image", Data: "AAAA", MIMEType: "image/png"}}},
		"annotated":  {Content: []mcp.Content{mcp.TextContent{Type: "text", Text: "x", Annotated: mcp.Annotated{Annotations: &mcp.Annotations{Priority: ptr(0.5)}}}}},
		"meta":       {Result: mcp.Result{Meta: &mcp.Meta{AdditionalFields: map[string]any{"k": "v"}}}, Content: []mcp.Content{text("x")}},
		"raw struct": {Content: []mcp.Content{text("x")}, RawStructuredContent: json.RawMessage(`{"a": 1}`)},
	}
	ids := []any{1, int64(1 << 60), "abc", "<id>", nil}
	for name, res := range results {
		for _, id := range ids {
			for _, msg := range []any{
				mcp.JSONRPCResponse{JSONRPC: "2.0", ID: mcp.NewRequestId(id), Result: res},
				mcp.JSONRPCResponse{JSONRPC: "2.0", ID: mcp.NewRequestId(id), Result: *res},
			} {
				want, err := json.Marshal(msg)
				if err != nil {
					t.Fatal(err)
				}
				got, err := encodeMessage(msg)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("%s, id %v:\n got %.300s\nwant %.300s", name, id, got, want)
				}
			}
		}
	}
	// Other messages pass through.
	for _, msg := range []any{
		mcp.NewJSONRPCError(mcp.NewRequestId(3), mcp.PARSE_ERROR, "bad", nil),
		mcp.JSONRPCResponse{JSONRPC: "2.0", ID: mcp.NewRequestId(4), Result: map[string]any{"tools": []any{}}},
		mcp.JSONRPCNotification{JSONRPC: "2.0", Notification: mcp.Notification{Method: "notifications/progress"}},
	} {
		want, _ := json.Marshal(msg)
		got, err := encodeMessage(msg)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("got %s, %v; want %s", got, err, want)
		}
	}
}

func FuzzEncodeMessage(f *testing.F) {
	f.Add("hello", "x", true)
	f.Add("<&>\u2028\xff", "", false)
	f.Fuzz(func(t *testing.T, a, b string, isErr bool) {
		msg := mcp.JSONRPCResponse{JSONRPC: "2.0", ID: mcp.NewRequestId(b), Result: &mcp.CallToolResult{
			Content: []mcp.Content{mcp.TextContent{Type: "text", Text: a}, mcp.TextContent{Type: "text", Text: b}},
			IsError: isErr, StructuredContent: map[string]any{b: a},
		}}
		want, _ := json.Marshal(msg)
		got, err := encodeMessage(msg)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("got %s, %v; want %s", got, err, want)
		}
	})
}

func ptr[T any](v T) *T { return &v }

func BenchmarkEncodeMessage(b *testing.B) {
	for _, c := range []struct {
		name string
		text string
	}{{"1KiB", strings.Repeat("x", 1024)}, {"glob-300KB", strings.Repeat("/mnt/goroot/src/net/http/server.go\n", 9000)}} {
		msg := mcp.JSONRPCResponse{JSONRPC: "2.0", ID: mcp.NewRequestId(7), Result: &mcp.CallToolResult{
			Content:           []mcp.Content{mcp.TextContent{Type: "text", Text: c.text}},
			StructuredContent: map[string]any{"sha256": strings.Repeat("a", 64), "lines": 20, "bytes": 1024},
		}}
		b.Run(c.name+"/marshal", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				json.Marshal(msg)
			}
		})
		b.Run(c.name+"/fast", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				encodeMessage(msg)
			}
		})
	}
}
