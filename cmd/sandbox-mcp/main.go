// Command sandbox-mcp serves the Model Context Protocol and gives an AI
// agent seven tools inside a sandbox, one sandbox per thread.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"regexp"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/lmittmann/tint"

	"github.com/sandbox-mcp/sandbox-mcp/audit"
	"github.com/sandbox-mcp/sandbox-mcp/providers/docker"
	"github.com/sandbox-mcp/sandbox-mcp/providers/kubernetes"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/server"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor/daemon"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = ""

func main() {
	if len(os.Args) > 1 && os.Args[1] == "supervise" {
		// A sandbox's supervisor, where no sandbox-mcp-supervisor is
		// beside this binary (a server built alone): the daemon's code is
		// in the server too.
		os.Exit(daemon.Main(os.Args[2:]))
	}
	if exe, err := os.Executable(); err == nil {
		supervisor.SetFallback(exe)
	}
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.LookupEnv))
}

const usage = `sandbox-mcp serves MCP tools (bash, ls, glob, grep, read_file, write_file,
str_replace) inside a per-thread sandbox.

Usage:
  sandbox-mcp [flags]                  serve MCP over stdio (default)
  sandbox-mcp --http 127.0.0.1:8080    serve Streamable HTTP (/mcp) and SSE (/sse, /message)
  sandbox-mcp audit verify FILE        check an audit log's hash chain
  sandbox-mcp doctor [flags]           check what works here; print a client config
  sandbox-mcp checkpoints THREAD       list a thread's checkpoints (flags as for serving)
  sandbox-mcp restore THREAD ID        put a thread's files back as checkpoint ID holds them (--force: kill its jobs first)
  sandbox-mcp fork THREAD@ID NEWTHREAD make a new thread that starts from a checkpoint
  sandbox-mcp supervise [--listen S]   internal: a sandbox's supervisor, where no sandbox-mcp-supervisor is beside this binary

Flags:
`

// multiFlag collects a repeatable flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func versionString() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

// run is main without the process: it returns the exit code.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer, lookup func(string) (string, bool)) int {
	if len(args) > 0 && args[0] == "audit" {
		return auditCommand(args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "doctor" {
		return doctorCommand(args[1:], stdout, stderr, lookup)
	}
	if len(args) > 0 && (args[0] == "checkpoints" || args[0] == "restore" || args[0] == "fork") {
		return checkpointsCommand(args[0], args[1:], stdout, stderr, lookup)
	}
	args = withoutUnfilled(args)
	fs := flag.NewFlagSet("sandbox-mcp", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var (
		configFile    = fs.String("config", "", "YAML config `FILE` (flags override it)")
		stateDir      = fs.String("state-dir", "", "where threads, audit log and locks live `DIR` (default $XDG_STATE_HOME/sandbox-mcp or ~/.local/state/sandbox-mcp)")
		provider      = fs.String("provider", "", "sandbox provider: local|docker|kubernetes (default local)")
		thread        = fs.String("thread", "", "stdio only: the thread this process serves (default \"default\")")
		skillsDir     = fs.String("skills-dir", "", "host `DIR` shown read-only at /mnt/skills")
		isolation     = fs.String("isolation", "", "local provider: how bash is isolated: auto|bwrap|none|container (default auto, or $SANDBOX_MCP_ISOLATION)")
		allowHostBash = fs.Bool("allow-host-bash", false, "local provider without isolation: allow bash on the host")
		image         = fs.String("image", "", "docker and kubernetes providers: the sandboxes' `IMAGE` (docker.image, kubernetes.image)")
		httpAddr      = fs.String("http", "", "serve Streamable HTTP (and the deprecated SSE) on `ADDR` instead of stdio")
		authToken     = fs.String("auth-token", "", "HTTP: require \"Authorization: Bearer `TOKEN`\" (also env SANDBOX_MCP_AUTH_TOKEN)")
		auditLog      = fs.String("audit-log", "", "audit log `FILE`, - for stderr, or off (default <state-dir>/audit.jsonl)")
		metricsAddr   = fs.String("metrics", "", "serve Prometheus metrics at GET /metrics on `ADDR` (host:port, e.g. 127.0.0.1:9090; default off)")
		logLevel      = fs.String("log-level", "", "debug|info|warn|error (default info)")
		showVersion   = fs.Bool("version", false, "print the version and exit")
		mounts        multiFlag
	)
	fs.Var(&mounts, "mount", "extra mount `HOST:VIRTUAL[:ro]`, repeatable")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, usage)
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return 0
		}
		fmt.Fprintf(stderr, "sandbox-mcp: %v (see --help)\n", err)
		return 2
	}
	if *showVersion {
		fmt.Fprintln(stdout, "sandbox-mcp", versionString())
		return 0
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "sandbox-mcp: unexpected argument %q (see --help)\n", fs.Arg(0))
		return 2
	}

	cfg := newConfig()
	if *configFile != "" {
		var err error
		if cfg, err = loadConfig(*configFile, lookup); err != nil {
			fmt.Fprintf(stderr, "sandbox-mcp: %v\n", err)
			return 2
		}
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) {
		// Empty, these leave the config's setting as it is: an extension's
		// settings left blank (manifest.json) pass them so.
		if f.Value.String() != "" || !emptyIsUnset[f.Name] {
			set[f.Name] = true
		}
	})
	cfg.flags = map[string]string{}
	override := func(name, key string, dst *string, v string) {
		if set[name] {
			*dst = v
			cfg.flags[key] = "--" + name
		}
	}
	override("image", "docker.image", &cfg.Docker.Image, *image)
	override("image", "kubernetes.image", &cfg.Kubernetes.Image, *image)
	override("state-dir", "state_dir", &cfg.StateDir, *stateDir)
	override("provider", "provider", &cfg.Provider, *provider)
	override("thread", "", &cfg.Thread, *thread)
	override("skills-dir", "skills_dir", &cfg.SkillsDir, *skillsDir)
	override("isolation", "local.isolation", &cfg.Local.Isolation, *isolation)
	override("http", "http.addr", &cfg.HTTP.Addr, *httpAddr)
	configAddr := ""
	if !set["http"] && cfg.HTTP.Addr != "" {
		// stdio is the default mode (SPEC §2): only --http serves HTTP, so a
		// config with an http section (SPEC's own sample has one) still
		// serves stdio. Its addr is named in a start-up line.
		configAddr, cfg.HTTP.Addr = cfg.HTTP.Addr, ""
	}
	override("audit-log", "audit.path", &cfg.Audit.Path, *auditLog)
	override("metrics", "metrics.addr", &cfg.Metrics.Addr, *metricsAddr)
	override("log-level", "log_level", &cfg.LogLevel, *logLevel)
	if set["allow-host-bash"] {
		cfg.Local.AllowHostBash = *allowHostBash
	}
	// A token given empty never turns auth off (SPEC §10).
	if set["auth-token"] {
		if strings.TrimSpace(*authToken) == "" {
			fmt.Fprintln(stderr, "sandbox-mcp: --auth-token is empty: an empty token would turn auth off")
			return 2
		}
		cfg.HTTP.AuthTokens = append(cfg.HTTP.AuthTokens, *authToken)
	} else if t, ok := lookup("SANDBOX_MCP_AUTH_TOKEN"); ok {
		if strings.TrimSpace(t) == "" {
			fmt.Fprintln(stderr, "sandbox-mcp: SANDBOX_MCP_AUTH_TOKEN is set but empty: give it a token or unset it (an empty token would turn auth off)")
			return 2
		}
		cfg.HTTP.AuthTokens = append(cfg.HTTP.AuthTokens, t)
	}
	for _, m := range mounts {
		mc, err := parseMount(m)
		if err != nil {
			fmt.Fprintf(stderr, "sandbox-mcp: %v\n", err)
			return 2
		}
		cfg.Mounts = append(cfg.Mounts, mc)
	}
	if err := cfg.Validate(lookup); err != nil {
		fmt.Fprintf(stderr, "sandbox-mcp: %v\n", cfg.located(err))
		return 2
	}

	level, _ := parseLevel(cfg.LogLevel)
	log := slog.New(tint.NewHandler(stderr, &tint.Options{Level: level, NoColor: !isTerminal(stderr)}))
	for _, w := range cfg.Warnings {
		log.Warn(w)
	}
	if configAddr != "" {
		log.Info("the config's http.addr is not served without --http: serving stdio", "addr", configAddr)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	// A client gone from stdout (or a log reader from stderr) would have
	// Go kill the server at its next write there, before it ends its
	// sandboxes' commands; asked for, SIGPIPE makes the write fail and
	// the session ends as at the end of its input.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	if err := serve(ctx, &cfg, stdin, stdout, stderr, log); err != nil {
		var se startupError
		if errors.As(err, &se) {
			// Start-up failed: one line, as for a bad flag or config.
			fmt.Fprintf(stderr, "sandbox-mcp: %v\n", err)
			return 2
		}
		log.Error(err.Error())
		return 1
	}
	return 0
}

// emptyIsUnset are the flags that, given empty, are not given: the
// config file's setting (or the default) stands.
var emptyIsUnset = map[string]bool{"provider": true, "image": true, "skills-dir": true, "isolation": true}

// unfilled is a flag whose value is a variable of an MCPB manifest that
// the client left as it was: MCPB clients keep "${user_config.KEY}" when
// the user gave KEY no value and it has no default (modelcontextprotocol/mcpb,
// replaceVariables), so an optional setting left blank arrives so.
var unfilled = regexp.MustCompile(`^--?[a-z-]+=\$\{user_config\.[A-Za-z0-9_]+\}$`)

// withoutUnfilled is args without the flags whose value is an unfilled
// manifest variable: not given.
func withoutUnfilled(args []string) []string {
	out := args[:0:0]
	for _, a := range args {
		if !unfilled.MatchString(a) {
			out = append(out, a)
		}
	}
	return out
}

// startupError is an error before serving began (the state dir, the
// provider, the audit log, the listener): reported as one line, exit 2.
type startupError struct{ err error }

func (e startupError) Error() string { return e.err.Error() }
func (e startupError) Unwrap() error { return e.err }

// newProvider builds the configured provider.
func newProvider(ctx context.Context, cfg *Config, log *slog.Logger) (sandbox.Provider, error) {
	var mounts []sandbox.Mount
	for _, m := range cfg.Mounts {
		mounts = append(mounts, sandbox.Mount{Virtual: m.ContainerPath, Host: m.HostPath, ReadOnly: m.ReadOnly})
	}
	switch cfg.Provider {
	case "docker":
		d := cfg.Docker
		d.StateDir, d.SkillsDir, d.Mounts, d.EnvInherit, d.Logger = cfg.StateDir, cfg.SkillsDir, mounts, cfg.EnvInherit, log
		p, err := docker.New(ctx, d)
		if err != nil {
			return nil, err
		}
		log.Info("sandboxes are docker containers", "image", p.Image(), "network", p.Network())
		return p, nil
	case "kubernetes":
		k := cfg.Kubernetes
		if k.SupervisorImage == "" && version != "" {
			k.SupervisorImage = "ghcr.io/sandbox-mcp/sandbox-mcp:" + version // a release build: its own image (scripts/release.sh)
		}
		k.StateDir, k.SkillsDir, k.Mounts, k.EnvInherit, k.Logger = cfg.StateDir, cfg.SkillsDir, mounts, cfg.EnvInherit, log
		p, err := kubernetes.New(ctx, k)
		if err != nil {
			return nil, err
		}
		log.Info("sandboxes are kubernetes Pods", "namespace", p.Namespace())
		return p, nil
	case "local":
	default:
		return nil, fmt.Errorf("provider %q: want local, docker or kubernetes", cfg.Provider)
	}
	return newLocalProvider(cfg, mounts, log)
}

// serve builds the provider, the audit sink and the server, and serves.
func serve(ctx context.Context, cfg *Config, stdin io.Reader, stdout, stderr io.Writer, log *slog.Logger) error {
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return startupError{fmt.Errorf("state_dir: %w", err)}
	}
	var sink audit.Sink
	switch cfg.Audit.Path {
	case "off":
		sink = audit.Discard{}
	case "-":
		sink = audit.NewWriter(stderr)
	default:
		w, err := audit.OpenFile(cfg.Audit.Path)
		if err != nil {
			return startupError{fmt.Errorf("audit.path: %w", err)}
		}
		sink = w
	}
	m := newMetrics(cfg, &sink)
	tracing, err := newTracing(ctx, cfg, log)
	if err != nil {
		sink.Close()
		return startupError{err}
	}
	// Last, once every call has ended (srv.Close, below) and the provider
	// has closed: the spans still held are sent, as long as a few seconds
	// allow.
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := tracing.Shutdown(sctx); err != nil {
			log.Warn(err.Error())
		}
	}()
	proxy, err := newEgress(cfg, sink, log)
	if err != nil {
		sink.Close()
		return startupError{err}
	}
	p, err := newProvider(ctx, cfg, log)
	if err != nil {
		sink.Close()
		return startupError{fmt.Errorf("provider %s: %w", cfg.Provider, err)}
	}
	defer p.Close()

	var httpCfg *server.HTTPConfig
	if cfg.HTTP.Addr != "" {
		httpCfg = &cfg.HTTP.HTTPConfig
	}
	srv := server.New(server.Config{
		Provider: p,
		Audit:    sink,
		Logger:   log,
		Limits:   cfg.Limits.Limits,
		StateDir: cfg.StateDir,
		Version:  versionString(),
		HTTP:     httpCfg,
		Bounds:   cfg.Limits.Bounds,
		Hidden:   cfg.binaryPaths(),
		Secrets:  proxy.Secrets(),
		Network:  cfg.networkPolicy(),
		Skills:   cfg.SkillsDir != "",
		Metrics:  m,
		Tracer:   tracing.TracerProvider(),

		Checkpoints: cfg.Checkpoints,
	})
	defer srv.Close()
	if m != nil {
		stopMetrics, err := serveMetrics(ctx, cfg, m, log)
		if err != nil {
			return startupError{err}
		}
		defer stopMetrics()
	}
	// What start-up left behind (package initialisation, mostly client-go's
	// API schemes, and the configuration) goes back to the OS before
	// serving: 1.2 MB of an idle server's RSS, for one collection.
	debug.FreeOSMemory()
	if cfg.HTTP.Addr != "" {
		ln, err := net.Listen("tcp", cfg.HTTP.Addr)
		if err != nil {
			return startupError{fmt.Errorf("--http: %w", err)}
		}
		return srv.ServeHTTP(ctx, ln)
	}
	log.Info("serving MCP over stdio", "thread", cfg.Thread, "provider", p.Name(), "state_dir", cfg.StateDir)
	in, restore := pollable(stdin)
	defer restore()
	return srv.ServeStdio(ctx, cfg.Thread, in, stdout)
}

// auditCommand is "sandbox-mcp audit verify FILE".
func auditCommand(args []string, stdout, stderr io.Writer) int {
	if len(args) != 2 || args[0] != "verify" {
		fmt.Fprintln(stderr, "sandbox-mcp: usage: sandbox-mcp audit verify FILE")
		return 2
	}
	f, err := os.Open(args[1])
	if err != nil {
		fmt.Fprintf(stderr, "sandbox-mcp: audit verify: %v\n", err)
		return 2
	}
	defer f.Close()
	n, err := audit.Verify(f)
	if err != nil {
		fmt.Fprintf(stderr, "sandbox-mcp: audit verify %s: %v\n", args[1], err)
		return 1
	}
	fmt.Fprintf(stdout, "%s: %d lines, hash chain intact\n", args[1], n)
	return 0
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return l, fmt.Errorf("log_level %q: want debug, info, warn or error", s)
	}
	return l, nil
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
