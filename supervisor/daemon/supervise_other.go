//go:build !unix

package daemon

import (
	"fmt"
	"os"
)

// Name is the daemon's own name, in what it says.
const Name = "sandbox-mcp-supervisor"

// Main: there is no supervisor for this system (a sandbox's supervisor
// runs on Linux, or on the host of a Unix server).
func Main(args []string) int {
	fmt.Fprintln(os.Stderr, Name+": a sandbox's supervisor runs on Linux, or on the host of a Unix server")
	return 2
}
