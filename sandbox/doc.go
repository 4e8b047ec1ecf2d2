// Package sandbox is the contract between the tools and the providers, in the
// way database/sql/driver is for databases: a Provider hands out one Sandbox
// per thread, and a Sandbox offers a file system addressed by virtual paths
// and a way to run commands.
//
// It holds the contract only: the interfaces, the path rules of the agent's
// view (Clean, thread ids, reserved prefixes), the sentinel errors and the
// bounded output capture every Exec writes to. The host file system lives in
// package hostfs, the lock table in package filelock.
//
// The package imports nothing of ours.
package sandbox
