// Package local is the zero-dependency provider: a thread's sandbox is a set
// of directories on the host, its file system is hostfs.FS, and bash
// runs on the host in its own process group — only when the operator allowed
// it (--allow-host-bash), because on the host a command can reach whatever
// the server's user can.
//
// Each thread's commands — with bubblewrap, everything in its sandbox —
// are bounded together like a container's, by cgroups (Config.Limits:
// processes, memory with swap, CPU; package providers/internal/cgroups),
// where the host lets the server make them; Provider.Limits says which
// hold. What a provider keeps on the host while it runs — those cgroups,
// and the link to (or copy of) this binary that bubblewrap binds as the
// supervisor, so a sandbox's mount table never names the binary's host
// path — is recorded under <state>/instances/<id> (instance.go), and what
// a killed server left there is removed by the next start.
//
// Jobs (sandbox.Jobs: background commands, and foreground ones past
// YieldAfter) run under the thread's supervisor, a child of the server
// started on the thread's first command. A running job keeps the thread's
// sandbox after its last user released it (a client that reconnects finds
// its dev server), until no job runs (linger.go); the jobs end with the
// server. Unlike docker and kubernetes, a job here does not survive a
// restart of the server.
package local
