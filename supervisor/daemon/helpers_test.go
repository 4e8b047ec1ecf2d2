//go:build linux

package daemon

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/internal/testkit"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	client "github.com/sandbox-mcp/sandbox-mcp/supervisor"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor/supervisortest"
)

// The daemon's tests run the real binary (supervisortest builds it) and
// drive it with the real client, package supervisor.
func TestMain(m *testing.M) { os.Exit(supervisortest.Run(m, nil)) }

// start runs the daemon over pipes, as the local provider does without
// isolation.
func start(t *testing.T) *client.Conn {
	t.Helper()
	c, err := client.StartProcess(context.Background(), supervisortest.Command(t, "supervise"), true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// listen starts the daemon serving a socket in a new directory, as a
// docker container's or a Pod's does, and returns a dialer of channels to
// it: each Link dialing with it is one server replica.
func listen(tb testing.TB) client.Dialer {
	tb.Helper()
	dir := supervisortest.Listen(tb)
	return func(ctx context.Context) (*client.Conn, error) {
		s, err := client.DialSocket(dir, supervisortest.Socket)
		if err != nil {
			return nil, err
		}
		return client.NewConn(ctx, s, s, s)
	}
}

// jobLink is one server replica's channel to the supervisor of dial.
func jobLink(t *testing.T, dial client.Dialer) *client.Link {
	l := client.NewLink(dial)
	t.Cleanup(l.Close)
	return l
}

// syncBuf is a buffer safe for concurrent writes.
type syncBuf = testkit.Buffer

func sh(c *client.Conn, ctx context.Context, script string, timeout time.Duration) (string, sandbox.ExecResult, error) {
	var out syncBuf
	res, err := c.Exec(ctx, client.ExecRequest{Argv: []string{c.Hello().Shell, "-c", script}, Dir: "/", Timeout: timeout, Output: &out})
	return out.String(), res, err
}
