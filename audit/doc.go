// Package audit records every tool call as one JSON line: who (session,
// thread), what (tool, arguments — file content only as size and sha256),
// and how it ended. Lines are written with one write each before the
// result goes back to the client, so a SIGTERM loses nothing.
package audit
