// Package wire is the protocol between the server and the supervisor
// daemon inside every sandbox: checksummed, sequenced frames (frame.go),
// every kind of frame with its payload (kinds.go), the credit that bounds
// what a stream holds, and the hello that says which version speaks. Both
// sides import it, and nothing else of each other: the server's end is
// package supervisor, the daemon's supervisor/daemon.
package wire
