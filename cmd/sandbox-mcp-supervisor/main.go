// Command sandbox-mcp-supervisor is the supervisor daemon that runs inside
// every sandbox of sandbox-mcp: it runs the sandbox's commands and jobs,
// keeps its shell state and serves its files, for the server at the other
// end of its channel (package supervisor/daemon). The server starts it, or
// the sandbox's container does; nobody else needs to.
//
//	sandbox-mcp-supervisor [supervise] [--listen SOCKET [--mkdir DIR]... [--keep-env NAMES]]
//	sandbox-mcp-supervisor [supervise] --install DEST [--hold] | --await DEST | --connect SOCKET
//	sandbox-mcp-supervisor --version
//
// It is small on purpose: the standard library, and the protocol, search
// and file-lock packages of this module; no MCP SDK, Docker SDK or
// client-go. Build it static (CGO_ENABLED=0), beside the server: the
// server finds it there.
package main

import (
	"os"

	"github.com/sandbox-mcp/sandbox-mcp/supervisor/daemon"
)

func main() { os.Exit(daemon.Main(os.Args[1:])) }
