package server

import (
	"bytes"
	"encoding/json"

	"github.com/mark3labs/mcp-go/mcp"
)

// encodeMessage returns msg as JSON, byte for byte what json.Marshal gives.
//
// The answer to a tool call whose content is plain text, the common case,
// is written directly: json.Marshal goes through CallToolResult's
// MarshalJSON, which builds a map, marshals it, and has every byte
// re-validated and compacted by the outer Marshal — three passes over a
// 300 KB glob listing, a quarter of a small read_file's time on the server.
// Anything else (other content, annotations, _meta, errors, notifications)
// goes to json.Marshal.
func encodeMessage(msg any) ([]byte, error) {
	if resp, ok := msg.(mcp.JSONRPCResponse); ok {
		var res *mcp.CallToolResult
		switch r := resp.Result.(type) {
		case *mcp.CallToolResult:
			res = r
		case mcp.CallToolResult:
			res = &r
		}
		if res != nil && plainText(res) {
			if b, err := encodeToolResponse(resp, res); err == nil {
				return b, nil
			}
		}
	}
	return json.Marshal(msg)
}

// plainText reports whether res holds only what encodeToolResponse writes.
func plainText(res *mcp.CallToolResult) bool {
	if res.Meta != nil || len(res.InputRequests) > 0 || res.RequestState != "" || len(res.RawStructuredContent) > 0 {
		return false
	}
	for _, c := range res.Content {
		tc, ok := c.(mcp.TextContent)
		if !ok || tc.Annotations != nil || tc.Meta != nil {
			return false
		}
	}
	return true
}

// encodeToolResponse writes resp with the keys of res in the order
// json.Marshal gives a map's: content, isError, resultType,
// structuredContent.
func encodeToolResponse(resp mcp.JSONRPCResponse, res *mcp.CallToolResult) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	value := func(v any) error {
		if err := enc.Encode(v); err != nil {
			return err
		}
		b.Truncate(b.Len() - 1) // Encode's newline
		return nil
	}
	size := 96
	for _, c := range res.Content {
		size += len(c.(mcp.TextContent).Text) + 32
	}
	b.Grow(size + size/16)
	b.WriteString(`{"jsonrpc":`)
	if err := value(resp.JSONRPC); err != nil {
		return nil, err
	}
	b.WriteString(`,"id":`)
	if err := value(resp.ID); err != nil {
		return nil, err
	}
	b.WriteString(`,"result":{"content":[`)
	for i, c := range res.Content {
		tc := c.(mcp.TextContent)
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"type":`)
		if err := value(tc.Type); err != nil {
			return nil, err
		}
		b.WriteString(`,"text":`)
		if err := value(tc.Text); err != nil {
			return nil, err
		}
		b.WriteByte('}')
	}
	b.WriteByte(']')
	if res.IsError {
		b.WriteString(`,"isError":true`)
	}
	if res.ResultType != "" {
		b.WriteString(`,"resultType":`)
		if err := value(res.ResultType); err != nil {
			return nil, err
		}
	}
	if res.StructuredContent != nil {
		b.WriteString(`,"structuredContent":`)
		if err := value(res.StructuredContent); err != nil {
			return nil, err
		}
	}
	b.WriteString(`}}`)
	return b.Bytes(), nil
}
