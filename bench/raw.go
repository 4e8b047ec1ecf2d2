package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"time"
)

// rawStdio is a server on stdio driven by hand-written JSON-RPC lines: no
// client library. Timing a call through it and through the go-sdk client
// splits a round trip into the server's share and the client's.
type rawStdio struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
	id  int
}

func startRaw(name string, args ...string) (*rawStdio, error) {
	cmd := exec.Command(name, args...)
	cmd.Env = benchEnv()
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	r := &rawStdio{cmd: cmd, in: in, out: bufio.NewReaderSize(out, 1<<20)}
	if _, err := r.request("initialize", `{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"bench-raw","version":"1"}}`); err != nil {
		r.Close()
		return nil, err
	}
	if _, err := io.WriteString(in, `{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n"); err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

// request sends one request and returns its response line, skipping any
// notification the server sends meanwhile.
func (r *rawStdio) request(method, params string) ([]byte, error) {
	r.id++
	if _, err := fmt.Fprintf(r.in, `{"jsonrpc":"2.0","id":%d,"method":%q,"params":%s}`+"\n", r.id, method, params); err != nil {
		return nil, err
	}
	want := []byte(`"id":` + strconv.Itoa(r.id) + `,`)
	for range 100 {
		line, err := r.out.ReadBytes('\n')
		if err != nil {
			return nil, err
		}
		if bytes.Contains(line, want) || bytes.Contains(line, []byte(`"id":`+strconv.Itoa(r.id)+`}`)) {
			if bytes.Contains(line, []byte(`"isError":true`)) || bytes.Contains(line, []byte(`"error":{`)) {
				return nil, fmt.Errorf("%s: %.200s", method, line)
			}
			return line, nil
		}
	}
	return nil, fmt.Errorf("%s: no response among 100 lines", method)
}

// Close ends the server by closing its stdin, then kills it after 5 s.
func (r *rawStdio) Close() {
	r.in.Close()
	done := make(chan struct{})
	go func() { r.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		r.cmd.Process.Kill()
		<-done
	}
}

// measureRaw times n calls of a tool on ours and the peer's noop,
// alternating, after a warm-up.
func measureRaw(ours, peer *rawStdio, call string, n int) (o, p []time.Duration, err error) {
	noop := `{"name":"noop","arguments":{}}`
	for range 100 {
		if _, err := ours.request("tools/call", call); err != nil {
			return nil, nil, err
		}
		if _, err := peer.request("tools/call", noop); err != nil {
			return nil, nil, err
		}
	}
	for range n {
		t := time.Now()
		if _, err := ours.request("tools/call", call); err != nil {
			return nil, nil, err
		}
		o = append(o, time.Since(t))
		t = time.Now()
		if _, err := peer.request("tools/call", noop); err != nil {
			return nil, nil, err
		}
		p = append(p, time.Since(t))
	}
	return o, p, nil
}
