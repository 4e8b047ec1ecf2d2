// Command bench measures sandbox-mcp against real peers on this machine and
// prints a Markdown table: figure, ours, peer, ratio, target, met. See
// bench/README.md; bench/run.sh installs the peers, builds the server and
// runs it.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

var (
	serverBin = flag.String("server", "", "the sandbox-mcp binary to measure (required)")
	threads   = flag.Int("threads", runtime.NumCPU(), "threads for every side: GOMAXPROCS of the servers, -j of rg and fd")
	samples   = flag.Int("samples", 2000, "latency samples per tool (bash: a tenth)")
	rounds    = flag.Int("rounds", 10, "timed runs of each search, alternating ours and the peer")
	sessions  = flag.String("sessions", "10,50,100,200", "HTTP session counts to measure; the figure is taken at 100")
	calls     = flag.Int("calls", 100, "calls per HTTP session")
	density   = flag.Int("density", 1000, "idle threads of the density figure")
	scaling   = flag.Bool("scaling", true, "also measure how cost grows with tree size and sessions")
	only      = flag.String("only", "latency,search,http,density", "which parts to measure: latency (stdio round trips), search (grep, glob), http, density (idle threads on the local provider); run.sh adds docker and kubernetes (the providers' go test benchmarks)")
	peerMode  = flag.String("peer", "", "internal: serve the peer (stdio or http)")
)

func main() {
	flag.Parse()
	if *peerMode != "" {
		if err := runPeer(*peerMode); err != nil {
			fmt.Fprintln(os.Stderr, "peer:", err)
			os.Exit(1)
		}
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	if *serverBin == "" {
		return fmt.Errorf("-server is required (bench/run.sh builds it)")
	}
	if err := haveTools(); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	src := goSrc()
	if src == "" {
		return fmt.Errorf("go env GOROOT: no Go source tree")
	}
	tmp, err := os.MkdirTemp("", "sandbox-mcp-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	serverArgs := func(state string) []string {
		// As shipped: the audit log on, bash isolated with bubblewrap.
		return []string{"--state-dir", filepath.Join(tmp, state), "--mount", src + ":" + goroot + ":ro"}
	}

	header(src)
	var rows []row
	progress := func(format string, args ...any) { fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...) }

	// stdio: latency, idle RSS, and the searches through the server.
	ours, err := startStdio(ctx, *serverBin, serverArgs("stdio")...)
	if err != nil {
		return err
	}
	defer ours.Close()
	peer, err := startStdio(ctx, self, "-peer", "stdio")
	if err != nil {
		return err
	}
	defer peer.Close()
	time.Sleep(500 * time.Millisecond)
	oursIdle, _, _ := rss(ours.cmd.Process.Pid)
	peerIdle, _, _ := rss(peer.cmd.Process.Pid)
	if err := prepareWorkspace(ctx, ours.cs); err != nil {
		return err
	}
	if want("latency") {
		progress("stdio latency, %d samples per tool", *samples)
		lat, _, err := measureLatency(ctx, ours.cs, peer.cs, latencyCases(*samples), 5)
		if err != nil {
			return err
		}
		for i, l := range lat {
			o, p := sortedCopy(l.ours), sortedCopy(l.peerNoop)
			r50 := row{figure: "stdio p50 " + l.name + ", go-sdk client", ours: float64(percentile(o, 50)), peer: float64(percentile(p, 50)), unit: "time"}
			r99 := row{figure: "stdio p99 " + l.name + ", go-sdk client", ours: float64(percentile(o, 99)), peer: float64(percentile(p, 99)), unit: "time"}
			if i == 0 {
				r50.target, r50.met = "≤ 300 µs", metBelow(r50.ours, float64(300*time.Microsecond))
			}
			rows = append(rows, r50, r99)
		}

		// The same read_file without a client library: the server's share.
		rawOurs, err := startRaw(*serverBin, serverArgs("stdio")...)
		if err != nil {
			return err
		}
		defer rawOurs.Close()
		rawPeer, err := startRaw(self, "-peer", "stdio")
		if err != nil {
			return err
		}
		defer rawPeer.Close()
		ro, rp, err := measureRaw(rawOurs, rawPeer, `{"name":"read_file","arguments":{"path":"small.txt"}}`, *samples)
		if err != nil {
			return err
		}
		ro, rp = sortedCopy(ro), sortedCopy(rp)
		rows = append(rows,
			row{figure: "stdio p50 read_file (1 KiB), minimal client (JSON lines, no SDK)", ours: float64(percentile(ro, 50)), peer: float64(percentile(rp, 50)), unit: "time"},
			row{figure: "stdio p99 read_file (1 KiB), minimal client (JSON lines, no SDK)", ours: float64(percentile(ro, 99)), peer: float64(percentile(rp, 99)), unit: "time"})

		mgOurs, err := startMcpgo(ctx, *serverBin, serverArgs("stdio")...)
		if err != nil {
			return err
		}
		defer mgOurs.Close()
		mgPeer, err := startMcpgo(ctx, self, "-peer", "stdio")
		if err != nil {
			return err
		}
		defer mgPeer.Close()
		mo, mp, err := measureMcpgo(ctx, mgOurs, mgPeer, *samples)
		if err != nil {
			return err
		}
		mo, mp = sortedCopy(mo), sortedCopy(mp)
		rows = append(rows,
			row{figure: "stdio p50 read_file (1 KiB), mcp-go v1.2.1 client", ours: float64(percentile(mo, 50)), peer: float64(percentile(mp, 50)), unit: "time",
				target: "≤ 300 µs", met: metBelow(float64(percentile(mo, 50)), float64(300*time.Microsecond))},
			row{figure: "stdio p99 read_file (1 KiB), mcp-go v1.2.1 client", ours: float64(percentile(mo, 99)), peer: float64(percentile(mp, 99)), unit: "time"})

		// bash under bubblewrap against host bash: the same server, the
		// other started with --isolation none --allow-host-bash.
		host, err := startStdio(ctx, *serverBin, "--state-dir", filepath.Join(tmp, "hostbash"), "--isolation", "none", "--allow-host-bash")
		if err != nil {
			return err
		}
		defer host.Close()
		bo, bh, err := measurePair(ctx, ours.cs, host.cs, "bash", map[string]any{"command": "true"}, max(*samples/4, 100))
		if err != nil {
			return err
		}
		bo, bh = sortedCopy(bo), sortedCopy(bh)
		r := row{figure: "stdio p50 bash `true` under bubblewrap vs host bash (--allow-host-bash), go-sdk client", ours: float64(percentile(bo, 50)), peer: float64(percentile(bh, 50)), unit: "time", target: "≤ 1.5× host bash"}
		r.met = metBelow(r.ours/r.peer, 1.5)
		rows = append(rows, r,
			row{figure: "stdio p99 bash `true` under bubblewrap vs host bash, go-sdk client", ours: float64(percentile(bo, 99)), peer: float64(percentile(bh, 99)), unit: "time"})

		// bash_output of a job that prints all the time, against bash
		// `true`, alternated on the same (bubblewrap) server.
		jo, jt, err := measureJobOutput(ctx, ours.cs, max(*samples/4, 100))
		if err != nil {
			return err
		}
		jo, jt = sortedCopy(jo), sortedCopy(jt)
		r = row{figure: "stdio p50 bash_output of a job with new output vs bash `true` (bubblewrap), go-sdk client", ours: float64(percentile(jo, 50)), peer: float64(percentile(jt, 50)), unit: "time", target: "≤ 2× bash `true`"}
		r.met = metBelow(r.ours/r.peer, 2)
		rows = append(rows, r)
	}

	in, err := newInproc(ctx, filepath.Join(tmp, "inproc"), src)
	if err != nil {
		return err
	}
	defer in.close()
	// The target row is the server's round trip as the peer's is timed: the
	// request written, the whole answer read off the pipe, no client library
	// parsing it (rg and fd are not parsed either).
	searchRow := func(fig, peerName string, st searchTimes, limit float64) {
		r := row{figure: fig + ", through the server", ours: float64(st.raw), peer: float64(st.peer), unit: "time",
			target: fmt.Sprintf("≤ %.1f× %s", limit, peerName)}
		r.met = metBelow(r.ours/r.peer, limit)
		if st.mismatch != "" {
			r.met += "; RESULTS DIFFER: " + st.mismatch
		} else {
			r.note = "same results"
		}
		rows = append(rows, r,
			row{figure: fig + ", through the go-sdk client (answer decoded)", ours: float64(st.server), peer: float64(st.peer), unit: "time"},
			row{figure: fig + ", in process", ours: float64(st.inproc), peer: float64(st.peer), unit: "time"})
	}
	rawSearch, err := startRaw(*serverBin, serverArgs("search")...)
	if err != nil {
		return err
	}
	defer rawSearch.Close()
	rawCall := func(tool string, args map[string]any) func() (string, error) {
		params, err := json.Marshal(map[string]any{"name": tool, "arguments": args})
		return func() (string, error) {
			if err != nil {
				return "", err
			}
			line, err := rawSearch.request("tools/call", string(params))
			return string(line), err
		}
	}
	grepSearch := func(c grepCase, sub string, n int) (searchTimes, error) {
		vdir, hdir := goroot, src
		if sub != "" {
			vdir, hdir = goroot+"/"+sub, filepath.Join(src, sub)
		}
		parse := func(out string, isPeer bool) map[string]int {
			if isPeer {
				return grepCounts(out, ".")
			}
			return grepCounts(out, vdir)
		}
		return measureSearch(ctx,
			func() (string, error) { return call(ctx, ours.cs, "grep", grepArgs(c, vdir)) },
			rawCall("grep", grepArgs(c, vdir)),
			func() (string, error) { return in.call(ctx, "grep", grepArgs(c, vdir)) },
			func() (string, error) { return runTool(ctx, hdir, "rg", rgArgs(c)...) },
			parse, n)
	}
	globSearch := func(sub string, n int) (searchTimes, error) {
		vdir, hdir := goroot, src
		if sub != "" {
			vdir, hdir = goroot+"/"+sub, filepath.Join(src, sub)
		}
		parse := func(out string, isPeer bool) map[string]int {
			if isPeer {
				return globPaths(out, ".")
			}
			return globPaths(out, vdir)
		}
		return measureSearch(ctx,
			func() (string, error) { return call(ctx, ours.cs, "glob", globArgs(vdir)) },
			rawCall("glob", globArgs(vdir)),
			func() (string, error) { return in.call(ctx, "glob", globArgs(vdir)) },
			func() (string, error) { return runTool(ctx, hdir, fdName(), fdArgs()...) },
			parse, n)
	}
	if want("search") {
		nfiles := countFiles(src)
		for _, c := range grepCases {
			progress("grep %s", c.name)
			st, err := grepSearch(c, "", *rounds)
			if err != nil {
				return err
			}
			searchRow(fmt.Sprintf("grep %s, GOROOT/src (%d files), count", c.name, nfiles), "rg", st, 1.3)
		}
		progress("glob")
		st, err := globSearch("", *rounds)
		if err != nil {
			return err
		}
		searchRow(fmt.Sprintf("glob `**/*.go`, GOROOT/src (%d files)", nfiles), "fd", st, 1.5)
	}

	// HTTP: sessions and RSS.
	var loads, peerLoads []loadResult
	if want("density") {
		progress("density: %d idle threads on the local provider", *density)
		cfg, err := oneTokenConfig(tmp, "density", *density)
		if err != nil {
			return err
		}
		before, after, took, err := measureDensity(ctx, func() (*httpProc, error) {
			return startHTTP(*serverBin, append([]string{"--http", "127.0.0.1:0", "--config", cfg}, serverArgs("density")...)...)
		}, *density)
		if err != nil {
			return err
		}
		rows = append(rows, densityRows(*density, before, after, took)...)
		progress("density: 20 idle threads on the docker provider")
		drows, err := dockerDensity(ctx, serverArgs, tmp, 20)
		if err != nil {
			return err
		}
		rows = append(rows, drows...)
		progress("density: 10 idle threads on the kubernetes provider (where KUBECONFIG names a cluster)")
		krows, err := kubernetesDensity(ctx, serverArgs, tmp, 10)
		if err != nil {
			return err
		}
		rows = append(rows, krows...)
	}
	if want("http") {
		counts, err := sessionCounts()
		if err != nil {
			return err
		}
		for i, n := range counts {
			progress("HTTP, %d sessions × %d calls", n, *calls)
			cfg, err := oneTokenConfig(tmp, fmt.Sprintf("http%d", i), n)
			if err != nil {
				return err
			}
			o, err := measureLoad(ctx, func() (*httpProc, error) {
				return startHTTP(*serverBin, append([]string{"--http", "127.0.0.1:0", "--config", cfg}, serverArgs(fmt.Sprintf("http%d", i))...)...)
			}, "read_file", n, *calls)
			if err != nil {
				return err
			}
			p, err := measureLoad(ctx, func() (*httpProc, error) { return startHTTP(self, "-peer", "http") }, "noop", n, *calls)
			if err != nil {
				return err
			}
			loads, peerLoads = append(loads, o), append(peerLoads, p)
		}
		for i, o := range loads {
			if o.sessions != 100 {
				continue
			}
			p := peerLoads[i]
			fig := fmt.Sprintf("HTTP %d sessions × %d read_file", o.sessions, o.calls)
			rows = append(rows,
				row{figure: fig + ": throughput", ours: o.throughput(), peer: p.throughput(), unit: "rate", higherBetter: true},
				row{figure: fig + ": p50", ours: float64(percentile(o.lat, 50)), peer: float64(percentile(p.lat, 50)), unit: "time"},
				row{figure: fig + ": p99", ours: float64(percentile(o.lat, 99)), peer: float64(percentile(p.lat, 99)), unit: "time",
					target: "≤ 20 ms", met: metBelow(float64(percentile(o.lat, 99)), float64(20*time.Millisecond))},
				row{figure: fig + ": server CPU per call", ours: float64(o.cpuPerCall()), peer: float64(p.cpuPerCall()), unit: "time"},
				row{figure: fig + ": client CPU per call (the harness, same machine)", ours: float64(o.clientCPU / time.Duration(len(o.lat))),
					peer: float64(p.clientCPU / time.Duration(len(p.lat))), unit: "time"},
			)
			rawCfg, err := oneTokenConfig(tmp, "http-raw", o.sessions)
			if err != nil {
				return err
			}
			ro, err := measureRawLoad(ctx, func() (*httpProc, error) {
				return startHTTP(*serverBin, append([]string{"--http", "127.0.0.1:0", "--config", rawCfg}, serverArgs("http-raw")...)...)
			}, "read_file", o.sessions, o.calls)
			if err != nil {
				return err
			}
			rp, err := measureRawLoad(ctx, func() (*httpProc, error) { return startHTTP(self, "-peer", "http") }, "noop", o.sessions, o.calls)
			if err != nil {
				return err
			}
			rfig := fig + ", minimal client (plain POSTs, answers not decoded)"
			rows = append(rows,
				row{figure: rfig + ": throughput", ours: ro.throughput(), peer: rp.throughput(), unit: "rate", higherBetter: true},
				row{figure: rfig + ": p50", ours: float64(percentile(ro.lat, 50)), peer: float64(percentile(rp.lat, 50)), unit: "time"},
				row{figure: rfig + ": p99", ours: float64(percentile(ro.lat, 99)), peer: float64(percentile(rp.lat, 99)), unit: "time"},
				row{figure: rfig + ": server CPU per call", ours: float64(ro.cpuPerCall()), peer: float64(rp.cpuPerCall()), unit: "time"},
				row{figure: rfig + ": client CPU per call", ours: float64(ro.clientCPU / time.Duration(len(ro.lat))),
					peer: float64(rp.clientCPU / time.Duration(len(rp.lat))), unit: "time"},
				row{figure: "RSS idle, HTTP, no session", ours: float64(o.rssIdle), peer: float64(p.rssIdle), unit: "bytes",
					target: "≤ 30 MB", met: metBelow(float64(o.rssIdle), 30<<20)},
				row{figure: fmt.Sprintf("RSS with %d HTTP sessions, after the calls", o.sessions), ours: float64(o.rssLoaded), peer: float64(p.rssLoaded), unit: "bytes"},
				row{figure: fmt.Sprintf("peak RSS during the %d-session run", o.sessions), ours: float64(o.rssPeak), peer: float64(p.rssPeak), unit: "bytes"},
			)
		}
	}
	rows = append(rows,
		row{figure: "RSS idle, stdio, after initialize", ours: float64(oursIdle), peer: float64(peerIdle), unit: "bytes",
			target: "≤ 30 MB", met: metBelow(float64(oursIdle), 30<<20)},
	)
	fmt.Println()
	fmt.Println("Peers: latency and HTTP — a go-sdk v1.8.0 server whose one tool, noop, answers \"ok\" (the same transport, no work);")
	fmt.Printf("grep — rg -c -j %d; glob — %s -j %d. Searches: median of %d alternating runs; \"through the server\": a stdio round trip, the answer read whole, not parsed, as rg's and fd's output are;\n", *threads, fdName(), *threads, *rounds)
	fmt.Println("the \", in process\" rows call the tool's handler directly in the harness process.")
	fmt.Println()
	printTable(os.Stdout, rows)

	if !*scaling {
		return nil
	}
	fmt.Println()
	fmt.Println("### Cost by tree size (through the server, minimal client; median of alternating runs)")
	fmt.Println()
	fmt.Println("| tree | files | grep literal: ours | rg | ratio | glob: ours | fd | ratio |")
	fmt.Println("|---|---|---|---|---|---|---|---|")
	for _, sub := range []string{"crypto", "cmd", ""} {
		if !want("search") {
			break
		}
		progress("scaling: %q", sub)
		g, err := grepSearch(grepCases[0], sub, *rounds)
		if err != nil {
			return err
		}
		gl, err := globSearch(sub, *rounds)
		if err != nil {
			return err
		}
		name := "GOROOT/src/" + sub
		fmt.Printf("| %s | %d | %s | %s | %.2f× | %s | %s | %.2f× |\n", strings.TrimSuffix(name, "/"), countFiles(filepath.Join(src, sub)),
			fmtDur(g.raw), fmtDur(g.peer), float64(g.raw)/float64(g.peer),
			fmtDur(gl.raw), fmtDur(gl.peer), float64(gl.raw)/float64(gl.peer))
	}
	fmt.Println()
	fmt.Printf("### Cost by HTTP sessions (each makes %d calls at once; ours read_file, peer noop)\n\n", *calls)
	fmt.Println("| sessions | throughput: ours | peer | p50: ours | peer | p99: ours | peer | server CPU/call: ours | peer | RSS after: ours | peer |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|")
	for i, o := range loads {
		p := peerLoads[i]
		fmt.Printf("| %d | %.0f/s | %.0f/s | %s | %s | %s | %s | %s | %s | %.1f MB | %.1f MB |\n", o.sessions, o.throughput(), p.throughput(),
			fmtDur(percentile(o.lat, 50)), fmtDur(percentile(p.lat, 50)), fmtDur(percentile(o.lat, 99)), fmtDur(percentile(p.lat, 99)),
			fmtDur(o.cpuPerCall()), fmtDur(p.cpuPerCall()), float64(o.rssLoaded)/(1<<20), float64(p.rssLoaded)/(1<<20))
	}
	return nil
}

// want reports whether -only names part.
func want(part string) bool {
	for f := range strings.SplitSeq(*only, ",") {
		if strings.TrimSpace(f) == part {
			return true
		}
	}
	return false
}

func sessionCounts() ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(*sessions, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("-sessions %q: want positive numbers", *sessions)
		}
		out = append(out, n)
	}
	return out, nil
}

// header prints the machine, the date and the command.
func header(src string) {
	cpu := "unknown cpu"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for l := range strings.SplitSeq(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				cpu = strings.TrimSpace(v)
				break
			}
		}
	}
	mem := ""
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		if f := strings.Fields(string(b)); len(f) > 1 {
			kb, _ := strconv.ParseFloat(f[1], 64)
			mem = fmt.Sprintf(", %.0f GiB", kb/(1<<20))
		}
	}
	version := func(name string, args ...string) string {
		out, err := exec.Command(name, args...).Output()
		if err != nil {
			return name + " ?"
		}
		return strings.SplitN(strings.TrimSpace(string(out)), "\n", 2)[0]
	}
	fmt.Printf("## sandbox-mcp benchmarks\n\n")
	fmt.Printf("- machine: %s, %d cores%s, %s/%s\n", cpu, runtime.NumCPU(), mem, runtime.GOOS, runtime.GOARCH)
	fmt.Printf("- date: %s\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	fmt.Printf("- %s; %s; %s; threads: %d\n", runtime.Version(), version("rg", "--version"), version(fdName(), "--version"), *threads)
	fmt.Printf("- tree: %s\n", src)
	command := os.Getenv("BENCH_COMMAND") // set by run.sh: the command as typed
	if command == "" {
		command = strings.Join(os.Args, " ")
	}
	fmt.Printf("- command: `%s`\n", command)
}

// goSrc is $(go env GOROOT)/src, or "" when go or the tree is missing.
func goSrc() string {
	out, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		return ""
	}
	src := filepath.Join(strings.TrimSpace(string(out)), "src")
	if _, err := os.Stat(src); err != nil {
		return ""
	}
	return src
}

// oneTokenConfig writes a config under which one token (none: the harness
// has no auth) may hold n threads and sessions: the bounds of SPEC §16
// give a token a share of the server, and the harness is every client at
// once.
func oneTokenConfig(dir, name string, n int) (string, error) {
	cfg := filepath.Join(dir, name+".yaml")
	err := os.WriteFile(cfg, fmt.Appendf(nil, "limits:\n  threads_per_token: %d\nhttp:\n  max_sessions: %d\n", n, n), 0o644)
	return cfg, err
}
