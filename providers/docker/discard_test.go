package docker

import (
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox/sandboxtest"
)

func TestDiscardContract(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	sandboxtest.Discard(t, f.p)
}
