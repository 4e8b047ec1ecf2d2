// Package audit records every tool call as one JSON line: who (session,
// thread), what (tool, arguments — file content only as size and sha256),
// and how it ended. Lines are written with one write each before the
// result goes back to the client, so a SIGTERM loses nothing.
//
// The audit fails closed: before a call runs, Begin checks that its line
// can be written (the log is still there and the disk has room) and
// reserves the room in the file system, so a call that fills the disk
// still gets its line; a call whose line cannot be written is not run.
// A line is written whole or not at all: a write cut short is undone, and
// a line torn by a writer killed mid-write is cut off by the next one, so
// the hash chain never breaks.
package audit
