package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// loadResult is one run of concurrent HTTP sessions.
type loadResult struct {
	sessions, calls int
	wall            time.Duration
	lat             []time.Duration // sorted
	rssIdle         int64           // before any session
	rssLoaded       int64           // after the calls, every session still open
	rssPeak         int64
	serverCPU       time.Duration // the server's CPU time over the timed calls
	clientCPU       time.Duration // the harness's (the clients')
}

func (r loadResult) throughput() float64 { return float64(len(r.lat)) / r.wall.Seconds() }

// cpuPerCall is the server's CPU time per call.
func (r loadResult) cpuPerCall() time.Duration {
	return r.serverCPU / time.Duration(max(len(r.lat), 1))
}

// procCPU is a process's user and system CPU time so far.
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command (which may hold spaces) start after ") ".
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * time.Second / clockTicks
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat times: 100 on Linux.
const clockTicks = 100

// measureLoad starts a server, opens sessions concurrent sessions (each its
// own thread), lets each write its file, then has every session make calls
// tool calls at once. ours: read_file of a 1 KiB file; the peer: noop.
func measureLoad(ctx context.Context, start func() (*httpProc, error), tool string, sessions, calls int) (loadResult, error) {
	res := loadResult{sessions: sessions, calls: calls}
	p, err := start()
	if err != nil {
		return res, err
	}
	defer p.Close()
	time.Sleep(500 * time.Millisecond) // let start-up settle before "idle"
	if res.rssIdle, _, err = rss(p.cmd.Process.Pid); err != nil {
		return res, err
	}
	hc := &http.Client{Transport: &http.Transport{MaxIdleConns: 4 * sessions, MaxIdleConnsPerHost: 4 * sessions}}
	defer hc.CloseIdleConnections()
	css := make([]*mcp.ClientSession, sessions)
	defer func() {
		for _, cs := range css {
			if cs != nil {
				cs.Close()
			}
		}
	}()
	args := map[string]any{}
	if tool == "read_file" {
		args["path"] = "small.txt"
	}
	for i := range css {
		cs, err := connectHTTP(ctx, hc, p.url)
		if err != nil {
			return res, fmt.Errorf("session %d: %w", i, err)
		}
		css[i] = cs
		if tool == "read_file" {
			if _, err := call(ctx, cs, "write_file", map[string]any{"path": "small.txt", "content": smallFile}); err != nil {
				return res, err
			}
		}
		if _, err := call(ctx, cs, tool, args); err != nil { // warm
			return res, err
		}
	}
	if err := timeCalls(&res, p.cmd.Process.Pid, func(i, _ int) error {
		_, err := call(ctx, css[i], tool, args)
		return err
	}); err != nil {
		return res, err
	}
	res.rssLoaded, res.rssPeak, err = rss(p.cmd.Process.Pid)
	return res, err
}

// timeCalls has res.sessions sessions make res.calls calls each at once,
// call(i, j) being session i's j-th, and records in res the wall time, the
// sorted latencies and the CPU time of the server (pid) and of this process.
func timeCalls(res *loadResult, pid int, call func(i, j int) error) error {
	lat := make([][]time.Duration, res.sessions)
	errs := make([]error, res.sessions)
	var wg sync.WaitGroup
	begin := make(chan struct{})
	for i := range res.sessions {
		wg.Go(func() {
			<-begin
			for j := range res.calls {
				t := time.Now()
				if err := call(i, j); err != nil {
					errs[i] = err
					return
				}
				lat[i] = append(lat[i], time.Since(t))
			}
		})
	}
	srv0, cli0 := procCPU(pid), selfCPU()
	t0 := time.Now()
	close(begin)
	wg.Wait()
	res.wall = time.Since(t0)
	res.serverCPU, res.clientCPU = procCPU(pid)-srv0, selfCPU()-cli0
	for i := range lat {
		if errs[i] != nil {
			return errs[i]
		}
		res.lat = append(res.lat, lat[i]...)
	}
	res.lat = sortedCopy(res.lat)
	return nil
}
