// Package tools holds the seven tools an agent gets, one per file: each file
// holds the tool's schema, description, annotations and handler, so its whole
// behaviour reads in one place. All lists them.
//
// Handlers get the session's sandbox through Env and return a Result: a
// failure is a result with IsError and one line "Error: ..." naming the
// virtual path, never a Go error. The server masks every result and records
// it in the audit log.
//
// The facts a result carries as data (MCP structuredContent; SPEC §6: in
// structuredContent only, the text block saying the same for clients that
// read text) are a type in the tool's own file. Each is its tool's
// outputSchema too (mcp.WithOutputSchema reflects it), so the schema a
// client is given and what a handler returns are one declaration. A tool
// error carries none. The arguments likewise: a tool's args struct is its
// inputSchema (newTool reads its tags) and what its handler is given.
package tools
