// Package supervisor is the resident process of a sandbox
// (`sandbox-mcp supervise`) and the server's end of its channel: it runs
// commands and jobs, and serves file operations and searches, for every
// server replica of its thread.
//
// It also keeps the sandbox's one shell state (SPEC §15): the working
// directory and exported variables the last Shell command (ExecMsg.Shell)
// left when it exited in the foreground, which the next Shell command and
// every Shell job start from. The state lives in the supervisor's memory
// and is lost when it ends (commands then start afresh); a command that
// sets its own EXIT trap, execs, or is killed leaves it unchanged
// (shellstate_unix.go says how it is taken).
package supervisor
