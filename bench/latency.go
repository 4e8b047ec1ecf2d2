package main

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// latencyCase is one tool call timed over stdio.
type latencyCase struct {
	name string
	tool string
	args func(i int) map[string]any
	n    int // samples
}

// smallFile is the file read_file reads: 1 KiB in 20 lines.
var smallFile = strings.Repeat("the quick brown fox jumps over the lazy dog, 0123456789 abcd\n", 17)[:1024]

func latencyCases(samples int) []latencyCase {
	return []latencyCase{
		{"read_file (1 KiB)", "read_file", func(int) map[string]any { return map[string]any{"path": "small.txt"} }, samples},
		{"ls (workspace, depth 2)", "ls", func(int) map[string]any { return map[string]any{} }, samples},
		{"write_file (1 KiB)", "write_file", func(int) map[string]any {
			return map[string]any{"path": "w.txt", "content": smallFile}
		}, samples},
		{"str_replace (1 KiB file)", "str_replace", func(i int) map[string]any {
			from, to := "alpha", "omega"
			if i%2 == 1 {
				from, to = to, from
			}
			return map[string]any{"path": "edit.txt", "old_str": from, "new_str": to}
		}, samples},
		{"bash `true`", "bash", func(int) map[string]any { return map[string]any{"command": "true"} }, max(samples/10, 50)},
	}
}

// prepareWorkspace writes the files the latency cases use.
func prepareWorkspace(ctx context.Context, cs *mcp.ClientSession) error {
	files := map[string]string{
		"small.txt": smallFile,
		"edit.txt":  "alpha\n" + smallFile[6:],
		"w.txt":     smallFile,
	}
	for i := range 8 {
		files[fmt.Sprintf("src/pkg%d/file.go", i)] = "package x\n"
	}
	for p, c := range files {
		if _, err := call(ctx, cs, "write_file", map[string]any{"path": p, "content": c}); err != nil {
			return err
		}
	}
	return nil
}

type latencyResult struct {
	name     string
	ours     []time.Duration
	peerNoop []time.Duration
}

// measureLatency times each case on ours and the peer's noop alternately,
// in rounds, so that a slow spell of the machine hits both alike.
func measureLatency(ctx context.Context, ours, peer *mcp.ClientSession, cases []latencyCase, rounds int) ([]latencyResult, []time.Duration, error) {
	timeCall := func(cs *mcp.ClientSession, tool string, args map[string]any) (time.Duration, error) {
		start := time.Now()
		_, err := call(ctx, cs, tool, args)
		return time.Since(start), err
	}
	// Warm up both: first calls pay for page faults and lazy set-up.
	for i := range 100 {
		for _, c := range cases[:4] {
			if _, err := timeCall(ours, c.tool, c.args(i)); err != nil {
				return nil, nil, err
			}
		}
		if _, err := timeCall(peer, "noop", nil); err != nil {
			return nil, nil, err
		}
	}
	results := make([]latencyResult, len(cases))
	var peerAll []time.Duration
	for r := range rounds {
		for ci, c := range cases {
			results[ci].name = c.name
			per := c.n / rounds
			for i := range per {
				d, err := timeCall(ours, c.tool, c.args(r*per+i))
				if err != nil {
					return nil, nil, err
				}
				results[ci].ours = append(results[ci].ours, d)
				d, err = timeCall(peer, "noop", nil)
				if err != nil {
					return nil, nil, err
				}
				results[ci].peerNoop = append(results[ci].peerNoop, d)
				peerAll = append(peerAll, d)
			}
		}
	}
	return results, peerAll, nil
}

// measurePair times one call on a and on b alternately, n times each, after
// a warm-up.
func measurePair(ctx context.Context, a, b *mcp.ClientSession, tool string, args map[string]any, n int) (ta, tb []time.Duration, err error) {
	for range 20 {
		for _, cs := range []*mcp.ClientSession{a, b} {
			if _, err := call(ctx, cs, tool, args); err != nil {
				return nil, nil, err
			}
		}
	}
	for range n {
		for i, cs := range []*mcp.ClientSession{a, b} {
			start := time.Now()
			if _, err := call(ctx, cs, tool, args); err != nil {
				return nil, nil, err
			}
			if i == 0 {
				ta = append(ta, time.Since(start))
			} else {
				tb = append(tb, time.Since(start))
			}
		}
	}
	return ta, tb, nil
}

// measureJobOutput starts a job that prints a line every 5 ms, then times
// bash_output of it and bash `true` alternately, n times each; the job is
// killed at the end.
func measureJobOutput(ctx context.Context, cs *mcp.ClientSession, n int) (out, bash []time.Duration, err error) {
	started, err := call(ctx, cs, "bash", map[string]any{"command": "while :; do echo tick; sleep 0.005; done", "run_in_background": true})
	if err != nil {
		return nil, nil, err
	}
	m := regexp.MustCompile(`\[job (j\d+) started\]`).FindStringSubmatch(started)
	if m == nil {
		return nil, nil, fmt.Errorf("bash run_in_background answered %q", started)
	}
	defer call(context.WithoutCancel(ctx), cs, "bash_kill", map[string]any{"job": m[1], "signal": "KILL"})
	timed := func(tool string, args map[string]any) (time.Duration, error) {
		start := time.Now()
		_, err := call(ctx, cs, tool, args)
		return time.Since(start), err
	}
	for i := range n + 20 {
		// Let the job print between two reads, as an agent's polls would.
		time.Sleep(10 * time.Millisecond)
		o, err := timed("bash_output", map[string]any{"job": m[1]})
		if err != nil {
			return nil, nil, err
		}
		b, err := timed("bash", map[string]any{"command": "true"})
		if err != nil {
			return nil, nil, err
		}
		if i >= 20 { // warm-up
			out, bash = append(out, o), append(bash, b)
		}
	}
	return out, bash, nil
}
