// Package kubernetes is the provider that gives every thread its own
// hardened Pod, through the Kubernetes API. It is the only importer of
// k8s.io/client-go.
//
// A thread's Pod is named <pod_prefix>-<first 16 hex of sha256(thread)>, so
// every server replica finds it by name, and used only when its annotation
// names the thread; it is made on the thread's first
// command or file operation, and AlreadyExists means another replica (or a
// concurrent call) made it: that one is used. The thread's files live
// outside the Pod — in a host directory (storage mode host_path) or a
// PersistentVolumeClaim per thread (mode pvc) — whose workspace, uploads
// and outputs are mounted (subPaths) at their virtual paths, so a Pod may
// come and go and the files stay. The same volume holds the thread's
// checkpoints (SPEC §18), mounted outside the agent's paths at
// /.sandbox-mcp-checkpoints, which the Pod's supervisor saves and restores
// (pods.go says why and how).
//
// bash goes through the Pod's supervisor: the Pod's first container, of
// supervisor_image (the server's own image), copies the binary into an
// emptyDir, its postStart hook holding the sandbox container's start until
// the copy is whole (pods.go), and the sandbox container runs it as its
// main process; the
// server keeps one long-lived pods/exec per Pod of its relay (supervise
// --connect) and runs every command, job and file operation as a stream
// of that channel (exec.go dials it; the sandbox over it is
// providers/internal/supervised's, as every provider's). containerd can
// truncate exec stdin silently, so every write is checked against a size
// and sha256 computed inside the Pod, and every frame of the channel
// carries a checksum; an edit is a compare-and-swap inside the Pod, so
// replicas editing one file lose no update.
//
// Last use is kept in an annotation on the Pod, so any replica may reap an
// idle Pod or, beyond Replicas running, the least recently used one that
// no replica uses: each replica says in an annotation of its own, while
// a call is in flight there or the thread is held there, that it uses the
// Pod (package replicas has the rest of the cap's rules: a token's share,
// and the new thread's error when nothing may go). Discard deletes a
// thread's Pod and its files at once, for a thread no one can name again. Jobs
// (sandbox.Jobs) belong to the Pod's supervisor and outlive the call and
// any replica; before deleting a Pod as unused, the reaper asks its
// supervisor over a channel of its own, and a Pod running a job counts as
// used now (its annotation is refreshed).
//
// kubernetes.warm keeps Pods started for threads to come, shared by the
// replicas (warm.go): a new thread's first call claims one — a patch with
// the Pod's resourceVersion as precondition, then a rename of the Pod's
// own directory into the thread's place, or in pvc mode the Pod's own
// claim taken for the thread — and the Pod keeps its name, which the
// thread's directory records, or in pvc mode the thread's record, a Lease
// (records.go).
package kubernetes
