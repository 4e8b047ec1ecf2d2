// Package supervised is the one sandbox of every provider: a box whose
// supervisor (package supervisor) runs its commands and jobs, and serves
// the files of its own, over one supervisor.Link. A provider makes boxes
// and reaches them — it gives a Box (dial, enter, the remedy for a
// supervisor that does not answer) and a Config (the thread, its mounts,
// its directories on the host) — and hands out a Sandbox: everything
// between the contract (sandbox.Sandbox, sandbox.Jobs, the FS and its
// search fast paths) and the link is written here once, so that a new
// exec option is a change to the contract, this package and the wire, not
// to three providers.
package supervised
