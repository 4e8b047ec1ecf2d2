package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// measureRawLoad is measureLoad with a minimal client: each session is an
// initialize and then plain POSTs of hand-written JSON-RPC, every answer
// read whole (JSON or a one-event SSE stream) and checked for a result,
// not decoded. It shows the server's share when the load generator costs
// little: on 2 cores the go-sdk client needs more CPU per call than the
// server.
func measureRawLoad(ctx context.Context, start func() (*httpProc, error), tool string, sessions, calls int) (loadResult, error) {
	res := loadResult{sessions: sessions, calls: calls}
	p, err := start()
	if err != nil {
		return res, err
	}
	defer p.Close()
	hc := &http.Client{Transport: &http.Transport{MaxIdleConns: 4 * sessions, MaxIdleConnsPerHost: 4 * sessions}}
	defer hc.CloseIdleConnections()
	post := func(sid, body string) (string, string, error) {
		req, err := http.NewRequestWithContext(ctx, "POST", p.url+"/mcp", strings.NewReader(body))
		if err != nil {
			return "", "", err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if sid != "" {
			req.Header.Set("Mcp-Session-Id", sid)
			req.Header.Set("MCP-Protocol-Version", "2025-06-18")
		}
		resp, err := hc.Do(req)
		if err != nil {
			return "", "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err == nil && resp.StatusCode >= 300 {
			err = fmt.Errorf("HTTP %d: %.200s", resp.StatusCode, b)
		}
		return resp.Header.Get("Mcp-Session-Id"), string(b), err
	}
	callBody := func(id int) string {
		args := `{}`
		if tool == "read_file" {
			args = `{"path":"small.txt"}`
		}
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":%q,"arguments":%s}}`, id, tool, args)
	}
	okAnswer := func(out string) bool {
		return strings.Contains(out, `"result"`) && !strings.Contains(out, `"isError":true`)
	}
	sids := make([]string, sessions)
	for i := range sids {
		sid, _, err := post("", `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"bench-raw","version":"1"}}}`)
		if err != nil || sid == "" {
			return res, fmt.Errorf("session %d: initialize: %v (no session id: %v)", i, err, sid == "")
		}
		sids[i] = sid
		if _, _, err := post(sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); err != nil {
			return res, err
		}
		if tool == "read_file" {
			w := fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"write_file","arguments":{"path":"small.txt","content":%q}}}`, smallFile)
			if _, out, err := post(sid, w); err != nil || !okAnswer(out) {
				return res, fmt.Errorf("write_file: %v %.200s", err, out)
			}
		}
	}
	err = timeCalls(&res, p.cmd.Process.Pid, func(i, j int) error {
		_, out, err := post(sids[i], callBody(j+2))
		if err == nil && !okAnswer(out) {
			err = fmt.Errorf("%s: %.200s", tool, out)
		}
		return err
	})
	return res, err
}
