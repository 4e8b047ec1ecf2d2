package server

import (
	"github.com/sandbox-mcp/sandbox-mcp/metrics"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/tools"
)

// The server's part in its metrics (Config.Metrics): each call is counted
// by its handler as it answers (Tool.Done, with the audit line's outcome);
// what the server holds — calls in flight, sessions, sandboxes — is asked
// for at each scrape (metricsState), so that the call path stays a few
// atomic adds.

// metricsState is what the server holds now, for a scrape.
func (s *Server) metricsState() metrics.State {
	bound, active := s.sessions.counts()
	st := metrics.State{
		InFlight:  int(s.inflight.Load()),
		Sessions:  int(s.open.Load()),
		Provider:  s.cfg.Provider.Name(),
		Sandboxes: map[string]int{metrics.Bound: bound, metrics.Active: active},
	}
	if n, ok := runningBoxes(s.cfg.Provider); ok {
		st.Sandboxes[metrics.Running] = n
	}
	return st
}

// runningBoxes asks a provider that can tell cheaply (its own table, no
// engine's API) how many of its boxes run: supervisors, containers, Pods.
func runningBoxes(p sandbox.Provider) (int, bool) {
	if r, ok := p.(interface{ RunningBoxes() int }); ok {
		return r.RunningBoxes(), true
	}
	return 0, false
}

// startedJob says whether the call was a bash command that became a job
// (run_in_background, or past yield_after): its result names the job
// (bash's structured content, "job"; masked by now into plain values).
func startedJob(c *call, res *tools.Result) bool {
	if c.tool.Def.Name != "bash" || res.IsError {
		return false
	}
	facts, ok := res.StructuredContent.(map[string]any)
	if !ok {
		return false
	}
	job, _ := facts["job"].(string)
	return job != ""
}
