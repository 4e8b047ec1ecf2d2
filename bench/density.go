package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	units "github.com/docker/go-units"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Density (issue #28): what an idle thread costs on the local provider —
// a Streamable HTTP session, each its own thread, whose one bash call
// started its sandbox (a supervisor under bubblewrap), then left open and
// idle. Measured against the same server with no session at all: the
// server's RSS, the RSS of the processes under it (bwrap and the
// supervisors), how many processes and open files.

// footprint is what a server and the processes under it hold.
type footprint struct {
	serverRSS  int64 // the server's resident set
	childRSS   int64 // the processes under it: the sum of their proportional sets (PSS), shared pages counted once
	procs, fds int
}

// measureFootprint reads the footprint of pid and its descendants.
func measureFootprint(pid int) (footprint, error) {
	var f footprint
	var err error
	if f.serverRSS, _, err = rss(pid); err != nil {
		return f, err
	}
	f.fds = countFDs(pid)
	for _, c := range descendants(pid) {
		f.childRSS += pss(c)
		f.procs++
		f.fds += countFDs(c)
	}
	return f, nil
}

// descendants lists every process under pid (a scan of /proc).
func descendants(pid int) []int {
	parent := map[int]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		if i := strings.LastIndexByte(s, ')'); i >= 0 {
			if f := strings.Fields(s[i+1:]); len(f) > 1 {
				parent[p], _ = strconv.Atoi(f[1])
			}
		}
	}
	var out []int
	for p := range parent {
		for q := parent[p]; q > 1; q = parent[q] {
			if q == pid {
				out = append(out, p)
				break
			}
		}
	}
	return out
}

// pss is a process's proportional set size (its share of pages it shares).
func pss(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "Pss:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

func countFDs(pid int) int {
	ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	return len(ents)
}

// measureDensity opens n idle threads on a server start starts and reports
// the footprint before and after.
func measureDensity(ctx context.Context, start func() (*httpProc, error), n int) (before, after footprint, took time.Duration, err error) {
	return measureDensityThen(ctx, start, n, func() {})
}

// measureDensityThen is measureDensity, calling then while the threads are
// still open and idle.
func measureDensityThen(ctx context.Context, start func() (*httpProc, error), n int, then func()) (before, after footprint, took time.Duration, err error) {
	p, err := start()
	if err != nil {
		return before, after, 0, err
	}
	defer p.Close()
	time.Sleep(500 * time.Millisecond)
	if before, err = measureFootprint(p.cmd.Process.Pid); err != nil {
		return before, after, 0, err
	}
	hc := &http.Client{Transport: &http.Transport{MaxIdleConns: 2 * n, MaxIdleConnsPerHost: 2 * n}}
	defer hc.CloseIdleConnections()
	css := make([]*mcp.ClientSession, n)
	defer func() {
		for _, cs := range css {
			if cs != nil {
				cs.Close()
			}
		}
	}()
	// A few at a time: what is measured is the idle cost, not a stampede.
	t0 := time.Now()
	var mu sync.Mutex
	var first error
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i := range css {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			cs, err := connectHTTP(ctx, hc, p.url)
			if err == nil {
				css[i] = cs
				_, err = call(ctx, cs, "bash", map[string]any{"command": "true"})
			}
			if err != nil {
				mu.Lock()
				if first == nil {
					first = fmt.Errorf("thread %d: %w", i, err)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	took = time.Since(t0)
	if first != nil {
		return before, after, took, first
	}
	time.Sleep(2 * time.Second) // settle: what is idle, not what was just busy
	after, err = measureFootprint(p.cmd.Process.Pid)
	then()
	return before, after, took, err
}

// densityRows are the table's rows of a density measurement of n threads.
func densityRows(n int, before, after footprint, took time.Duration) []row {
	per := func(a, b int64) float64 { return float64(a-b) / float64(n) }
	fig := fmt.Sprintf("local (bubblewrap): %d idle threads (HTTP sessions, one bash call each)", n)
	return []row{
		{figure: fig + ": server RSS", ours: float64(after.serverRSS), peer: float64(before.serverRSS), unit: "bytes",
			target: "< 300 MB", met: metBelow(float64(after.serverRSS), 300<<20), note: "peer: the same server with no session"},
		{figure: "per idle thread: server memory", ours: per(after.serverRSS, before.serverRSS), unit: "bytes"},
		{figure: "per idle thread: its sandbox's processes' memory (bwrap + supervisor, PSS)", ours: per(after.childRSS, before.childRSS), unit: "bytes"},
		{figure: "per idle thread: processes", unit: "", note: fmt.Sprintf("%.2f", float64(after.procs-before.procs)/float64(n))},
		{figure: "per idle thread: open files (server and its sandbox)", unit: "", note: fmt.Sprintf("%.2f", float64(after.fds-before.fds)/float64(n))},
		{figure: fmt.Sprintf("time to open the %d threads, 8 at a time", n), ours: float64(took), unit: "time"},
	}
}

// dockerDensity is the idle cost of a thread on the docker provider: n
// threads made to hold a container each (one bash call), then idle; the
// server's RSS growth per thread and each container's memory as the
// engine counts it (its cgroup's usage: the supervisor, tini, page cache
// of what it ran).
func dockerDensity(ctx context.Context, serverArgs func(string) []string, tmp string, n int) ([]row, error) {
	if exec.Command("docker", "image", "inspect", "sandbox-mcp-base:latest").Run() != nil {
		return nil, nil // no engine or no image: no docker figure
	}
	prefix := fmt.Sprintf("smcp-density-%d", os.Getpid())
	cfg := filepath.Join(tmp, "density-docker.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, "provider: docker\ndocker:\n  image: sandbox-mcp-base:latest\n  container_prefix: %s\n  replicas: %d\n  remove_on_exit: true\nlimits:\n  threads_per_token: %d\n", prefix, n+1, n+1), 0o644); err != nil {
		return nil, err
	}
	defer func() {
		out, _ := exec.Command("docker", "ps", "-aq", "--filter", "label=sandbox-mcp.prefix="+prefix).Output()
		for _, id := range strings.Fields(string(out)) {
			exec.Command("docker", "rm", "-f", id).Run()
		}
	}()
	var mem int64
	before, after, took, err := measureDensityThen(ctx, func() (*httpProc, error) {
		return startHTTP(*serverBin, append([]string{"--http", "127.0.0.1:0", "--config", cfg}, serverArgs("density-docker")...)...)
	}, n, func() { mem = containersMemory(prefix) })
	if err != nil {
		return nil, err
	}
	return []row{
		{figure: fmt.Sprintf("docker: %d idle threads: server RSS", n), ours: float64(after.serverRSS), peer: float64(before.serverRSS), unit: "bytes", note: "peer: the same server with no session"},
		{figure: "docker, per idle thread: server memory", ours: float64(after.serverRSS-before.serverRSS) / float64(n), unit: "bytes"},
		{figure: "docker, per idle thread: its container's memory (the engine's count)", ours: float64(mem) / float64(n), unit: "bytes"},
		{figure: "docker, per idle thread: open files of the server", unit: "", note: fmt.Sprintf("%.2f", float64(after.fds-before.fds)/float64(n))},
		{figure: fmt.Sprintf("docker: time to open the %d threads, 8 at a time", n), ours: float64(took), unit: "time"},
	}, nil
}

// containersMemory sums the memory docker stats reports for the containers
// of prefix.
func containersMemory(prefix string) int64 {
	out, err := exec.Command("docker", "stats", "--no-stream", "--format", "{{.Name}} {{.MemUsage}}").Output()
	if err != nil {
		return 0
	}
	var sum int64
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 || !strings.HasPrefix(f[0], prefix) {
			continue
		}
		if b, err := units.RAMInBytes(f[1]); err == nil {
			sum += b
		}
	}
	return sum
}
