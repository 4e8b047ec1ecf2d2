// Package sandbox is the contract between the tools and the providers, in the
// way database/sql/driver is for databases: a Provider hands out one Sandbox
// per thread, and a Sandbox offers a file system addressed by virtual paths
// and a way to run commands.
//
// It also holds the pieces every provider shares: the path rules of the
// agent's view (Clean, thread ids, reserved prefixes), HostFS — the one place
// where a virtual path becomes a host file operation, confined through
// os.Root — the per-file lock table, and the bounded output capture.
//
// The package imports nothing of ours.
package sandbox
