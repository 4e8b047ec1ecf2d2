package supervisor

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/internal/testkit"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor/supervisortest"
)

// The real daemon (supervisortest builds it) is what FindBinary finds
// here, and what the tests that need one run.
func TestMain(m *testing.M) { os.Exit(supervisortest.Run(m, SetFallback)) }

// syncBuf is a buffer safe for concurrent writes.
type syncBuf = testkit.Buffer

// sh runs script with the supervisor's shell.
func sh(c *Conn, ctx context.Context, script string, timeout time.Duration) (string, sandbox.ExecResult, error) {
	var out syncBuf
	res, err := c.Exec(ctx, ExecRequest{Argv: []string{c.Hello().Shell, "-c", script}, Dir: "/", Timeout: timeout, Output: &out})
	return out.String(), res, err
}
