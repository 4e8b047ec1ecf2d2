// Package cgroups bounds a sandbox's processes, memory and CPU with the
// kernel's control groups, as a container engine does: one cgroup per
// thread, under one per provider instance, on cgroup v2 where the host
// gives it the controllers and on v1 where it has only v1 (a hybrid host
// may use both: each controller where it is mounted).
//
// Layout. The limits sit on the thread's cgroup; its processes live in a
// leaf below it (<instance>/<thread>/sandbox), so that a process that could
// see its own cgroup (a nested cgroup namespace) finds only the leaf, never
// the files of its limits. Names are the instance's (sandbox-mcp-<state
// dir hash>-<random id>) and a hash of the thread id: nothing a client
// chose is ever a path component.
//
// Accounting. On v1 the CPU time a cgroup used is the cpuacct
// controller's (cpuacct.stat), which bounds nothing: a thread has a cgroup
// in its hierarchy too — the same one as cpu's where a host mounts them
// together (cpu,cpuacct) — so that what the thread used can be read
// (sandbox_info). On v2 every cgroup has its cpu.stat.
//
// Placement. A command joins the thread's cgroup before it runs anything:
// Group.Command starts it through /bin/sh, which writes its own pid into
// the leaf's cgroup.procs of each hierarchy and then execs the command
// (bwrap, which forks the sandbox only after that). Every process of the
// sandbox is born inside. One mechanism for v1 and v2 (v2 alone could use
// clone3's CLONE_INTO_CGROUP, v1 has nothing like it), for an exec of sh
// per sandbox start (about a millisecond).
//
// Where. v1: under the server's own cgroup of each hierarchy, so a bound
// an operator put on the server (a systemd unit's MemoryMax) bounds its
// sandboxes too. v2 forbids processes in a cgroup that hands controllers
// to children, so there: as root, under the hierarchy's root (as Docker's
// cgroupfs driver does); otherwise under the nearest ancestor of the
// server's cgroup that this user may write (a systemd user manager's
// delegated subtree, user@UID.service). Open proves each choice by
// placing a short-lived process in a cgroup with the limits written.
package cgroups
