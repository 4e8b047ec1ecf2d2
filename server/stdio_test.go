package server_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/providers/local"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/server"
	"github.com/sandbox-mcp/sandbox-mcp/tools"
)

// rawStdio drives ServeStdio with hand-written JSON-RPC lines, to reach the
// cases a client library never sends.
type rawStdio struct {
	t     *testing.T
	state string // the server's state dir
	in    *io.PipeWriter
	out   *bufio.Reader
	done  chan error
}

func startRawStdio(t *testing.T) *rawStdio {
	t.Helper()
	r, _ := startRawStdioOn(t, nil)
	return r
}

// startRawStdioOn starts a stdio server on a local provider, as wrap makes
// it (nil: as it is); it returns the server too.
func startRawStdioOn(t *testing.T, wrap func(sandbox.Provider) sandbox.Provider) (*rawStdio, *server.Server) {
	t.Helper()
	state := t.TempDir()
	lp, err := local.New(local.Config{StateDir: state, AllowHostBash: true})
	if err != nil {
		t.Fatal(err)
	}
	var p sandbox.Provider = lp
	if wrap != nil {
		p = wrap(p)
	}
	srv := server.New(server.Config{Provider: p, Limits: tools.DefaultLimits(), StateDir: state, MaxStdioLine: 1 << 20})
	t.Cleanup(func() { srv.Close() })
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	r := &rawStdio{t: t, state: state, in: inW, out: bufio.NewReader(outR), done: make(chan error, 1)}
	go func() {
		r.done <- srv.ServeStdio(t.Context(), "default", inR, outW)
		outW.Close()
	}()
	t.Cleanup(func() { inW.Close() })
	r.send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	r.recv()
	r.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return r, srv
}

func (r *rawStdio) send(line string) {
	r.t.Helper()
	if _, err := io.WriteString(r.in, line+"\n"); err != nil {
		r.t.Fatal(err)
	}
}

// recv returns the next message the server writes, decoded.
func (r *rawStdio) recv() map[string]any {
	r.t.Helper()
	type result struct {
		line []byte
		err  error
	}
	got := make(chan result, 1)
	go func() {
		line, err := r.out.ReadBytes('\n')
		got <- result{line, err}
	}()
	select {
	case res := <-got:
		if res.err != nil {
			r.t.Fatalf("read an answer: %v", res.err)
		}
		var m map[string]any
		if err := json.Unmarshal(res.line, &m); err != nil {
			r.t.Fatalf("answer is not JSON: %v: %.200s", err, res.line)
		}
		return m
	case <-time.After(10 * time.Second):
		r.t.Fatal("no answer in 10 s")
		return nil
	}
}

func (r *rawStdio) call(id int, tool, args string) map[string]any {
	r.t.Helper()
	r.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":%q,"arguments":%s}}`, id, tool, args))
	m := r.recv()
	if m["id"] != float64(id) {
		r.t.Fatalf("answer to %v, want %d: %v", m["id"], id, m)
	}
	return m
}

func TestStdioBadLinesAreAnsweredAndSkipped(t *testing.T) {
	t.Parallel()
	r := startRawStdio(t)

	r.send(`{not json`)
	if m := r.recv(); m["error"] == nil {
		t.Fatalf("garbage: want a parse error, got %v", m)
	}
	// A line over the cap is read to its end, answered, and forgotten.
	r.send(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"write_file","arguments":{"path":"big.txt","content":"` +
		strings.Repeat("x", 1<<20) + `"}}}`)
	m := r.recv()
	if e, _ := m["error"].(map[string]any); e == nil || !strings.Contains(fmt.Sprint(e["message"]), "message over") {
		t.Fatalf("long line: want a parse error, got %.300v", m)
	}
	// A response from the client (to nothing) gets no answer.
	r.send(`{"jsonrpc":"2.0","id":99,"result":{}}`)
	m = r.call(1, "write_file", `{"path":"a.txt","content":"hello\n"}`)
	if res, _ := m["result"].(map[string]any); res == nil || res["isError"] == true {
		t.Fatalf("write_file after bad lines: %v", m)
	}
	m = r.call(2, "ls", `{}`)
	text := fmt.Sprint(m["result"])
	if !strings.Contains(text, "a.txt") || strings.Contains(text, "big.txt") {
		t.Fatalf("ls = %s", text)
	}
}

func TestStdioCallsRunConcurrentlyAndCancel(t *testing.T) {
	t.Parallel()
	r := startRawStdio(t)
	// A call that runs for a minute holds one worker; the next calls are
	// read and answered meanwhile, and a cancel notification reaches it.
	start := time.Now()
	r.send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"bash","arguments":{"command":"sleep 60"}}}`)
	time.Sleep(100 * time.Millisecond) // let the sleep start first
	if m := r.call(2, "ls", `{}`); m["error"] != nil {
		t.Fatalf("ls while bash runs: %v", m)
	}
	r.send(`{"jsonrpc":"2.0","id":3,"method":"ping"}`)
	if m := r.recv(); m["id"] != float64(3) {
		t.Fatalf("want the ping's answer before the bash call's, got %v", m)
	}
	r.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1,"reason":"test"}}`)
	// mcp-go answers a cancelled call anyway; what matters is that the
	// command is stopped rather than left to run for a minute.
	m := r.recv()
	if m["id"] != float64(1) {
		t.Fatalf("want the bash call's answer, got %v", m)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Fatalf("the cancelled bash call answered after %v", d)
	}
	r.in.Close()
	select {
	case err := <-r.done:
		if err != nil {
			t.Fatalf("ServeStdio after EOF: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("ServeStdio did not return after EOF")
	}
}
