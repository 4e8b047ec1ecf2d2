package main

import (
	"os"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/supervisor"
)

// The test binary is its own sandboxes' supervisor, as the server binary is.
func TestMain(m *testing.M) {
	supervisor.Main()
	os.Exit(m.Run())
}
