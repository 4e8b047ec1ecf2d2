// Package daemon is the supervisor that runs inside every sandbox (the
// sandbox-mcp-supervisor binary, cmd/sandbox-mcp-supervisor; the server's
// `sandbox-mcp supervise` where no daemon is beside it): it runs commands
// and jobs, serves file operations and searches, and carries TCP
// connections of the sandbox's loopback (its proxy listener's, and dials
// to a port: net.go, pipe.go), for every server replica of its thread,
// over the channel of package supervisor/wire (dispatch.go is what it
// does with each kind of frame).
//
// It also keeps the sandbox's one shell state (SPEC §15): the working
// directory and exported variables the last Shell command (wire.Exec.Shell)
// left when it exited in the foreground, which the next Shell command and
// every Shell job start from. The state lives in the daemon's memory and
// is lost when it ends (commands then start afresh); a command that sets
// its own EXIT trap, execs, or is killed leaves it unchanged
// (shellstate.go says how it is taken).
//
// Where the sandbox's user-data lives in it (a Pod's volume), it keeps the
// thread's checkpoints (SPEC §18): the checkpoint engine run on the one
// store and user-data root of its command line (checkpoints.go).
//
// It is small on purpose, and so is what it imports: the standard library,
// the protocol, and the search, file-lock and checkpoint mechanisms of this module;
// never an MCP SDK, the Docker SDK, client-go, or the server's end of the
// channel (internal/archtest holds it to that).
package daemon
