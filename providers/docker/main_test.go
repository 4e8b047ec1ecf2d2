package docker

import (
	"os"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/supervisor"
)

// The test binary is its containers' supervisor, as the server binary is
// (bound into each one with its loader and libraries: it is a cgo build).
func TestMain(m *testing.M) {
	supervisor.Main()
	os.Exit(m.Run())
}
