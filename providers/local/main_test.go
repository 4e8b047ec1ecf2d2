//go:build unix

package local

import (
	"github.com/sandbox-mcp/sandbox-mcp/supervisor"
	"os"
	"testing"
)

// The test binary is its own supervisor, as the server binary is.
func TestMain(m *testing.M) {
	supervisor.Main()
	os.Exit(m.Run())
}
