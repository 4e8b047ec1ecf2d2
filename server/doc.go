// Package server is the one MCP server of sandbox-mcp, independent of the
// transport: it registers the tools, binds every MCP session to a thread and
// the thread's sandbox (sessions.go), masks every result and records every
// call in the audit log. stdio (and, later, HTTP) are thin adapters.
package server
