package tools_test

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/tools"
)

// portsSandbox is a sandbox that reaches its ports (sandbox.Ports); the
// tool only asks whether it does; the server's previews dial.
type portsSandbox struct{ sandbox.Sandbox }

func (portsSandbox) Box(context.Context) (string, error) { return "box-1", nil }
func (portsSandbox) DialPort(context.Context, string, int) (net.Conn, error) {
	return nil, sandbox.ErrPortRefused
}

// plainSandbox hides whatever else the sandbox implements: it has no
// ports.
type plainSandbox struct{ sandbox.Sandbox }

// fakePreviews records what expose_port asks of the server.
type fakePreviews struct {
	open   map[int]string
	max    int
	closed []int
}

func (p *fakePreviews) Open(_ context.Context, port int) (string, error) {
	if u, ok := p.open[port]; ok {
		return u, nil
	}
	if len(p.open) >= p.max {
		return "", fmt.Errorf("%w: at most %d a thread", tools.ErrTooManyPorts, p.max)
	}
	p.open[port] = fmt.Sprintf("http://127.0.0.1:8080/preview/cap%d/", port)
	return p.open[port], nil
}

func (p *fakePreviews) Close(_ context.Context, port int) error {
	if _, ok := p.open[port]; !ok {
		return tools.ErrNotExposed
	}
	delete(p.open, port)
	p.closed = append(p.closed, port)
	return nil
}

func (p *fakePreviews) List(context.Context) ([]tools.ExposedPort, error) {
	var out []tools.ExposedPort
	for port, u := range p.open {
		out = append(out, tools.ExposedPort{Port: port, URL: u})
	}
	slices.SortFunc(out, func(a, b tools.ExposedPort) int { return a.Port - b.Port })
	return out, nil
}

func TestExposePort(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	prev := &fakePreviews{open: map[int]string{}, max: 2}
	env := *f.env
	env.Sandbox, env.Previews = portsSandbox{f.sb}, prev

	res := f.callEnv(&env, "expose_port", map[string]any{"port": 3000.0})
	if got := resultText(t, res); res.IsError || got != "Port 3000 of the sandbox is at http://127.0.0.1:8080/preview/cap3000/" {
		t.Fatalf("expose 3000 = %q", got)
	}
	if m := facts(t, res); m["port"] != 3000.0 || m["url"] != "http://127.0.0.1:8080/preview/cap3000/" || m["exposed"] != true {
		t.Errorf("facts %v", m)
	}
	// Again: the same URL (the server keeps it; the tool passes it on).
	if got := resultText(t, f.callEnv(&env, "expose_port", map[string]any{"port": 3000.0, "close": false})); !strings.HasSuffix(got, "/preview/cap3000/") {
		t.Errorf("expose 3000 again = %q", got)
	}
	f.callEnv(&env, "expose_port", map[string]any{"port": 5173.0})
	res = f.callEnv(&env, "expose_port", map[string]any{"port": 8000.0})
	if got := resultText(t, res); !res.IsError || got != "Error: port 8000: too many exposed ports: at most 2 a thread" {
		t.Errorf("past the cap = %q", got)
	}
	res = f.callEnv(&env, "expose_port", map[string]any{"port": 3000.0, "close": true})
	if got := resultText(t, res); res.IsError || got != "Port 3000 is no longer exposed" {
		t.Errorf("close 3000 = %q", got)
	}
	if m := facts(t, res); m["port"] != 3000.0 || m["exposed"] != false || m["url"] != nil {
		t.Errorf("close facts %v", m)
	}
	res = f.callEnv(&env, "expose_port", map[string]any{"port": 3000.0, "close": true})
	if got := resultText(t, res); !res.IsError || got != "Error: port 3000 is not exposed" {
		t.Errorf("close 3000 again = %q", got)
	}
	if fmt.Sprint(prev.closed) != "[3000]" {
		t.Errorf("closed %v", prev.closed)
	}
}

// A sandbox that cannot reach its ports, or a server without previews:
// an error saying so, and nothing asked of the server.
func TestExposePortNotAvailable(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	prev := &fakePreviews{open: map[int]string{}, max: 16}
	for _, env := range []tools.Env{
		{Sandbox: plainSandbox{f.sb}, Limits: f.env.Limits, Previews: prev},
		{Sandbox: portsSandbox{f.sb}, Limits: f.env.Limits},
	} {
		for _, close := range []bool{false, true} {
			res := f.callEnv(&env, "expose_port", map[string]any{"port": 3000.0, "close": close})
			if got := resultText(t, res); !res.IsError || got != "Error: expose_port is not available with this provider" {
				t.Errorf("%T, previews %v, close %v: %q", env.Sandbox, env.Previews != nil, close, got)
			}
		}
	}
	if len(prev.open) != 0 || len(prev.closed) != 0 {
		t.Errorf("the server was asked: open %v, closed %v", prev.open, prev.closed)
	}
}
