// Package docker is the provider that gives every thread its own hardened
// container, through the Docker Engine API. It is the only importer of the
// Docker SDK.
//
// The thread's directories are bind-mounted at their virtual paths, so the
// file tools work on them host-side through hostfs.FS (no API call);
// any other absolute path is the container's own file system, reached
// through the container's supervisor (supervisor.FS), as the container's
// user. bash runs through the same supervisor (see below), in its own
// process group, killed whole when the command ends, times out or is
// cancelled. The sandbox over the supervisor's link is
// providers/internal/supervised's, as every provider's: this package
// makes the container and dials its supervisor (box.go).
//
// Containers are named <prefix>-<16 hex of sha256(state dir, settings,
// thread)> and used only when their labels name the thread, the state dir
// and the settings, so that servers of different settings on one state dir
// never replace each other's containers; created
// on a thread's first use, kept warm after its sessions end, stopped and
// removed after IdleTimeout, capped at Replicas running (least recently
// used goes first, never one in use — a call in flight, its thread held,
// a job running — nor another token's within that token's share; when
// none may go the new thread's call says so: package replicas), removed at
// once when the server discards a thread (Discard), and found again by
// label when the server restarts.
// Their main process is the thread's supervisor (package supervisor): this
// binary, bound read-only, whatever the image's CMD, which runs their
// commands and which the server reaches through a unix socket in a bound
// run directory; their user is not root unless
// docker.user says so. The engine may be down at start-up: each call then
// says so, until it is back. The image — by default a stock one,
// python:3.13-slim — is pulled by the engine when it lacks it (pull.go),
// while the server serves; calls wait for the pull.
//
// Jobs (sandbox.Jobs) belong to the container's supervisor: they outlive
// the call, the thread's sessions and a restart of the server (a new
// server on the state dir reads them by id), and end with the container.
// A container whose supervisor runs a job is in use: neither the idle
// reaper nor Replicas removes it.
package docker
