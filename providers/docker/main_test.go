package docker

import (
	"os"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/supervisor"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor/supervisortest"
)

// The containers run the real daemon, built for this test process (static,
// as releases build it; with -race, a cgo build bound with its loader and
// libraries).
func TestMain(m *testing.M) { os.Exit(supervisortest.Run(m, supervisor.SetFallback)) }
