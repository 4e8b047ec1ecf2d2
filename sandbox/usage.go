package sandbox

import (
	"context"
	"time"
)

// UsageReporter is a Sandbox that can say what it uses and its limits
// (SPEC §19 sandbox_info). A Sandbox may implement it.
type UsageReporter interface {
	// Usage reads what the sandbox uses now (a call like any other: it
	// starts the box when none runs).
	Usage(ctx context.Context) (Usage, error)
}

// Usage is what a sandbox uses and its limits. A nil field is not known
// on this provider (no cgroup, a file it cannot read): never a guess.
// A limit of 0 is none.
type Usage struct {
	Provider string // "local", "docker", "kubernetes"
	Image    string // the box's image; "" for none (local)
	Box      string // the box's name (a container's, a Pod's)
	// IdleLeft is the time that was left, when the call came, before the
	// box would be stopped for being idle (IdleTimeout after its last
	// use; the call is a use, and starts it afresh); nil where the
	// provider stops no idle box.
	IdleLeft    *time.Duration
	IdleTimeout time.Duration

	Cgroup                                       string // "v1", "v2": what the numbers come from; "": none
	MemoryBytes, MemoryPeakBytes, MemoryMaxBytes *int64
	OOMKills                                     *int64
	Pids, PidsMax                                *int64
	CPUUserSec, CPUSystemSec, CPULimit           *float64
	JobsRunning                                  *int

	// DiskBytes are the bytes of the files under UserDataDir; DiskCut:
	// the count stopped at DiskFiles entries, so at least that.
	DiskBytes *int64
	DiskFiles int
	DiskCut   bool
}
