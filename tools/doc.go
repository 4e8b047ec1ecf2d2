// Package tools holds the seven tools an agent gets, one per file: each file
// holds the tool's schema, description, annotations and handler, so its whole
// behaviour reads in one place. All lists them.
//
// Handlers get the session's sandbox through Env and return a Result: a
// failure is a result with IsError and one line "Error: ..." naming the
// virtual path, never a Go error. The server masks every result and records
// it in the audit log.
package tools
