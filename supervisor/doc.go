// Package supervisor is the server's end of the channel to a sandbox's
// supervisor daemon (supervisor/daemon, the sandbox-mcp-supervisor binary):
// it dials it (Link, Conn), runs commands and jobs, serves the sandbox's
// files and searches through it (FS), and carries TCP connections to and
// from the sandbox's loopback as net.Conns (Conn.DialPort, Conn.Listen:
// SPEC §17), asks it for the checkpoints it keeps of a box's user-data
// (Checkpoints, SPEC §18), all in the sandbox's own types and sentinels; it finds the daemon's binary for the providers
// (FindBinary) and says what a container needs to run it (Binary). The
// protocol both sides speak is supervisor/wire; this package never imports
// the daemon.
//
// Every byte from the daemon is treated as hostile: frames are checked,
// each stream holds at most wire.Window bytes (a pipe wire.PipeWindow, at
// most wire.MaxPipes pipes), and anything malformed ends the channel
// (dispatch.go is what the client does with each kind of frame).
//
// The daemon keeps the sandbox's one shell state (SPEC §15): the working
// directory and exported variables the last Shell command
// (ExecRequest.Shell) left when it exited in the foreground, which the
// next Shell command and every Shell job start from
// (supervisor/daemon/shellstate.go says how it is taken). The next Shell
// command's bash is started ahead from it, as the last one's answer
// leaves, and waits for the command's text (supervisor/daemon/spare.go).
package supervisor
