package supervisor

import (
	"context"
	"errors"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor/wire"
)

// Usage asks the supervisor what its box uses and its limits (one request,
// no shell), and the bytes of the files under dir as it sees them ("":
// none counted).
func (c *Conn) Usage(ctx context.Context, dir string) (sandbox.Usage, error) {
	m, _, err := c.job(ctx, wire.JobRequest{Op: wire.JobUsage, Dir: dir})
	if err != nil {
		return sandbox.Usage{}, err
	}
	if err := replyError("", m); err != nil {
		return sandbox.Usage{}, err
	}
	u := m.Usage
	out := sandbox.Usage{Cgroup: u.Cgroup, MemoryBytes: u.MemoryBytes, MemoryPeakBytes: u.MemoryPeakBytes,
		MemoryMaxBytes: u.MemoryMaxBytes, OOMKills: u.OOMKills, Pids: u.Pids, PidsMax: u.PidsMax,
		CPUUserSec: u.CPUUserSec, CPUSystemSec: u.CPUSystemSec, CPULimit: u.CPULimit}
	jobs := u.JobsRunning
	out.JobsRunning = &jobs
	if dir != "" {
		b := u.DiskBytes
		out.DiskBytes, out.DiskFiles, out.DiskCut = &b, u.DiskFiles, u.DiskCut
	}
	return out, nil
}

// checkUsage checks a usage answer: known numbers are not negative.
func checkUsage(u *wire.Usage) error {
	if u == nil {
		return errors.New("a usage answer without its usage")
	}
	for _, p := range []*int64{u.MemoryBytes, u.MemoryPeakBytes, u.MemoryMaxBytes, u.OOMKills, u.Pids, u.PidsMax} {
		if p != nil && *p < 0 {
			return errors.New("a negative usage")
		}
	}
	for _, p := range []*float64{u.CPUUserSec, u.CPUSystemSec, u.CPULimit} {
		if p != nil && !(*p >= 0 && *p < 1e15) {
			return errors.New("a CPU time out of range")
		}
	}
	if u.JobsRunning < 0 || u.JobsRunning > wire.MaxJobsRunning || u.DiskBytes < 0 || u.DiskFiles < 0 || u.DiskFiles > wire.MaxUsageFiles {
		return errors.New("a usage out of range")
	}
	if u.Cgroup != "" && u.Cgroup != "v1" && u.Cgroup != "v2" {
		return errors.New("an unknown cgroup version")
	}
	return nil
}

// Usage is Conn.Usage on the link's channel.
func (l *Link) Usage(ctx context.Context, dir string) (sandbox.Usage, error) {
	return linkDo(ctx, l, func(c *Conn) (sandbox.Usage, error) { return c.Usage(ctx, dir) })
}
