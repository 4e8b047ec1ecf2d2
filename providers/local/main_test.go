//go:build unix

package local

import (
	"os"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/supervisor"
)

// The test binary is its own supervisor, as the server binary is.
func TestMain(m *testing.M) {
	supervisor.Main()
	os.Exit(m.Run())
}
