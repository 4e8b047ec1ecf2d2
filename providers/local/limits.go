package local

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"

	"github.com/sandbox-mcp/sandbox-mcp/providers/internal/cgroups"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor"
)

// LimitsReport says which of the limits on each thread's commands
// (local.limits) hold here.
type LimitsReport struct {
	Holding []string // "pids 1024", "memory 4g", "cpu 2"
	Missing []string // the same, of those that do not hold
	Reason  string   // why the Missing do not
	Cgroup  string   // "cgroup v1", "cgroup v2" or "cgroup v1 and v2": what holds them
	Dirs    []string // the server's cgroups, one per hierarchy
}

// Limits says which limits hold; bash being off, none is needed.
func (p *Provider) Limits() LimitsReport {
	if p.inst == nil {
		return LimitsReport{}
	}
	return limitsReport(p.limits, p.inst.cg.Report())
}

// ProbeLimits says which limits a server with these settings would have
// here, by making (and removing) cgroups as its start-up does.
func ProbeLimits(l Limits) (LimitsReport, error) {
	lim, err := l.resolve()
	if err != nil {
		return LimitsReport{}, err
	}
	var b [8]byte
	rand.Read(b[:])
	t := cgroups.Open("sandbox-mcp-probe-"+hex.EncodeToString(b[:]), lim)
	defer t.Close()
	return limitsReport(lim, t.Report()), nil
}

func limitsReport(lim cgroups.Limits, r cgroups.Report) LimitsReport {
	named := func(cs []string) []string {
		var out []string
		for _, c := range cs {
			switch c {
			case cgroups.Pids:
				out = append(out, fmt.Sprintf("pids %d", lim.Pids))
			case cgroups.Memory:
				out = append(out, "memory "+cgroups.FormatBytes(lim.Memory))
			case cgroups.CPU:
				out = append(out, "cpu "+strconv.FormatFloat(lim.CPU, 'f', -1, 64))
			}
		}
		return out
	}
	out := LimitsReport{Holding: named(r.Holding), Missing: named(r.Missing), Reason: r.Reason, Dirs: r.Dirs}
	if r.Version != "" {
		out.Cgroup = "cgroup " + r.Version
	}
	return out
}

// group is the sandbox's cgroups, made on first use: nil when no limit
// holds here.
func (s *Sandbox) group() (*cgroups.Group, error) {
	s.cgMu.Lock()
	defer s.cgMu.Unlock()
	if s.cgClosed {
		return nil, supervisor.ErrClosed
	}
	if s.cg == nil && s.p.inst != nil {
		g, err := s.p.inst.group(s.thread)
		if err != nil {
			return nil, fmt.Errorf("thread %s: %w", s.thread, err)
		}
		s.cg = g
	}
	return s.cg, nil
}
