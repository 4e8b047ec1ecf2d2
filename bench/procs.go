package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// stdioProc is a server on stdio with a client session to it.
type stdioProc struct {
	cmd *exec.Cmd
	cs  *mcp.ClientSession
}

func startStdio(ctx context.Context, name string, args ...string) (*stdioProc, error) {
	cmd := exec.Command(name, args...)
	cmd.Env = benchEnv()
	cmd.Stderr = os.Stderr
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil).
		Connect(ctx, &mcp.CommandTransport{Command: cmd, TerminateDuration: 2 * time.Second}, nil)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	return &stdioProc{cmd: cmd, cs: cs}, nil
}

// Close ends the session; CommandTransport closes stdin, waits, then kills.
func (p *stdioProc) Close() { p.cs.Close() }

// call runs a tool and fails on a protocol error or an error result.
func call(ctx context.Context, cs *mcp.ClientSession, name string, args map[string]any) (string, error) {
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	var b strings.Builder
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			b.WriteString(t.Text)
		}
	}
	if res.IsError {
		return "", fmt.Errorf("%s: %s", name, b.String())
	}
	return b.String(), nil
}

// httpProc is a server on a loopback port.
type httpProc struct {
	cmd    *exec.Cmd
	url    string // base URL; Streamable HTTP is at url+"/mcp"
	exited chan error
}

var listenLine = regexp.MustCompile(`serving MCP over HTTP addr=(\S+)`)

// startHTTP starts a server that announces its address on stderr.
func startHTTP(name string, args ...string) (*httpProc, error) {
	cmd := exec.Command(name, args...)
	cmd.Env = benchEnv()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &httpProc{cmd: cmd, exited: make(chan error, 1)}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sent := false
		for sc.Scan() {
			if m := listenLine.FindStringSubmatch(sc.Text()); m != nil && !sent {
				addr <- m[1]
				sent = true
			}
		}
	}()
	go func() { p.exited <- cmd.Wait() }()
	select {
	case a := <-addr:
		p.url = "http://" + a
		return p, nil
	case err := <-p.exited:
		return nil, fmt.Errorf("%s exited: %v", name, err)
	case <-time.After(30 * time.Second):
		p.Close()
		return nil, fmt.Errorf("%s: no address after 30s", name)
	}
}

// Close stops the server: SIGTERM, then SIGKILL after 10 s.
func (p *httpProc) Close() {
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		p.cmd.Process.Kill()
		<-p.exited
	}
}

// connectHTTP opens one Streamable HTTP session.
func connectHTTP(ctx context.Context, hc *http.Client, url string) (*mcp.ClientSession, error) {
	return mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil).
		Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url + "/mcp", HTTPClient: hc, MaxRetries: -1}, nil)
}

// rss returns a process's resident set size and its peak, in bytes.
func rss(pid int) (cur, peak int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			cur = kb << 10
		case "VmHWM:":
			peak = kb << 10
		}
	}
	return cur, peak, nil
}

// benchEnv is the environment of every process the harness starts: its
// own, with GOMAXPROCS set to the thread count the peers get.
func benchEnv() []string {
	return append(os.Environ(), fmt.Sprintf("GOMAXPROCS=%d", *threads))
}
