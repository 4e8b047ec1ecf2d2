//go:build unix

package local

import (
	"os"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/supervisor"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor/supervisortest"
)

// The sandboxes run the real daemon, built for this test process.
func TestMain(m *testing.M) { os.Exit(supervisortest.Run(m, supervisor.SetFallback)) }
