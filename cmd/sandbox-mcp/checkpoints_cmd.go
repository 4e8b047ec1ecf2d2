package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/lmittmann/tint"

	"github.com/sandbox-mcp/sandbox-mcp/checkpoint"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/server"
	"github.com/sandbox-mcp/sandbox-mcp/tools"
)

// The person at the keyboard's checkpoints (SPEC §18):
//
//	sandbox-mcp checkpoints THREAD
//	sandbox-mcp restore THREAD ID [--force]
//	sandbox-mcp fork THREAD@ID NEWTHREAD
//
// with the flags a server is started with (--config, --state-dir,
// --provider, ...), so that they find the threads that server keeps. A
// THREAD is named as a stdio server's --thread or an HTTP client's
// X-Thread-ID names it; the thread of an HTTP token other than the first
// configured one is named by its directory under <state-dir>/threads,
// "@<16 hex>/<id>".
const checkpointsUsage = `Usage:
  sandbox-mcp checkpoints THREAD [flags]       list the thread's checkpoints, newest last
  sandbox-mcp restore THREAD ID [flags]        put the thread's files back as checkpoint ID holds them
  sandbox-mcp fork THREAD@ID NEWTHREAD [flags] make NEWTHREAD (which must not exist) start from checkpoint ID

THREAD is the thread id (--thread, X-Thread-ID); a thread of an HTTP token other than the
first configured one is named by its directory under <state-dir>/threads: @<16 hex>/<id>.

Flags (as for serving):
`

// checkpointsCommand runs one of the commands above; it returns the exit
// code: 0 done, 1 refused or failed, 2 bad usage.
func checkpointsCommand(name string, args []string, stdout, stderr io.Writer, lookup func(string) (string, bool)) int {
	fs := flag.NewFlagSet("sandbox-mcp "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var (
		configFile = fs.String("config", "", "YAML config `FILE`, as for serving")
		stateDir   = fs.String("state-dir", "", "state `DIR`, as for serving")
		provider   = fs.String("provider", "", "local|docker|kubernetes, as for serving")
		image      = fs.String("image", "", "the sandboxes' `IMAGE` (docker, kubernetes), as for serving")
		isolation  = fs.String("isolation", "", "auto|bwrap|none|container, as for serving")
		force      = fs.Bool("force", false, "restore: kill the thread's running jobs first, rather than refuse")
		logLevel   = fs.String("log-level", "warn", "debug|info|warn|error")
	)
	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "sandbox-mcp %s: %s (see --help)\n", name, fmt.Sprintf(format, a...))
		return 2
	}
	// Flags may come before, between or after the arguments.
	var pos []string
	for rest := args; ; {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fmt.Fprint(stdout, checkpointsUsage)
				fs.SetOutput(stdout)
				fs.PrintDefaults()
				return 0
			}
			return usageErr("%v", err)
		}
		if fs.NArg() == 0 {
			break
		}
		pos, rest = append(pos, fs.Arg(0)), fs.Args()[1:]
	}
	want := map[string]int{"checkpoints": 1, "restore": 2, "fork": 2}[name]
	if len(pos) != want {
		return usageErr("want %d argument(s), got %d", want, len(pos))
	}
	if *force && name != "restore" {
		return usageErr("--force is restore's")
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
	fs.Visit(func(f *flag.Flag) { set[f.Name] = f.Value.String() != "" })
	cfg.flags = map[string]string{}
	for _, o := range []struct {
		flag, key string
		dst       *string
		v         string
	}{{"state-dir", "state_dir", &cfg.StateDir, *stateDir}, {"provider", "provider", &cfg.Provider, *provider},
		{"image", "docker.image", &cfg.Docker.Image, *image}, {"image", "kubernetes.image", &cfg.Kubernetes.Image, *image},
		{"isolation", "local.isolation", &cfg.Local.Isolation, *isolation}} {
		if set[o.flag] {
			*o.dst = o.v
			cfg.flags[o.key] = "--" + o.flag
		}
	}
	// Not a server: nothing is served, and nothing it made is removed
	// or kept warm when it ends (a serving server's containers stay).
	cfg.HTTP.Addr = ""
	cfg.Docker.RemoveOnExit, cfg.Docker.Warm, cfg.Kubernetes.Warm = false, 0, 0
	if err := cfg.Validate(lookup); err != nil {
		fmt.Fprintf(stderr, "sandbox-mcp: %v\n", cfg.located(err))
		return 2
	}
	level, err := parseLevel(*logLevel)
	if err != nil {
		return usageErr("%v", err)
	}
	log := slog.New(tint.NewHandler(stderr, &tint.Options{Level: level, NoColor: !isTerminal(stderr)}))

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if _, err := os.Stat(cfg.StateDir); err != nil {
		fmt.Fprintf(stderr, "sandbox-mcp %s: state_dir: %v\n", name, err)
		return 1
	}
	p, err := newProvider(ctx, &cfg, log)
	if err != nil {
		fmt.Fprintf(stderr, "sandbox-mcp %s: provider %s: %v\n", name, cfg.Provider, err)
		return 1
	}
	defer p.Close()
	c := cliCheckpoints{ctx: ctx, p: p, cfg: &cfg, stdout: stdout}
	switch name {
	case "checkpoints":
		err = c.list(pos[0])
	case "restore":
		err = c.restore(pos[0], pos[1], *force)
	case "fork":
		err = c.fork(pos[0], pos[1])
	}
	if err != nil {
		fmt.Fprintf(stderr, "sandbox-mcp %s: %s\n", name, strings.ReplaceAll(err.Error(), "\n", " "))
		return 1
	}
	return 0
}

// cliCheckpoints runs the commands on the configured provider.
type cliCheckpoints struct {
	ctx    context.Context
	p      sandbox.Provider
	cfg    *Config
	stdout io.Writer
}

// threadKey checks a THREAD argument: a thread id, or a namespaced
// thread's directory (@<16 hex>/<id>).
func threadKey(arg string) error {
	if sandbox.ValidThreadKey(arg) != nil {
		return fmt.Errorf("thread %q: want a thread id ([A-Za-z0-9][A-Za-z0-9._-]{0,127}), or a token's thread as @<16 hex>/<id>", cutArg(arg))
	}
	return nil
}

// open acquires an existing thread's sandbox; release lets it go.
func (c cliCheckpoints) open(thread string) (sb sandbox.Sandbox, cp tools.Checkpointer, release func(), err error) {
	if err := threadKey(thread); err != nil {
		return nil, nil, nil, err
	}
	ok, err := c.p.Exists(c.ctx, thread)
	if err != nil {
		return nil, nil, nil, err
	}
	if !ok {
		return nil, nil, nil, fmt.Errorf("no thread %s in %s (a thread of an HTTP token other than the first is @<16 hex>/%s, as under %s/threads)",
			thread, c.cfg.StateDir, thread, c.cfg.StateDir)
	}
	sb, err = c.p.Acquire(c.ctx, thread)
	if err != nil {
		return nil, nil, nil, err
	}
	cp, isCP := sb.(tools.Checkpointer)
	if !isCP {
		c.p.Release(thread)
		return nil, nil, nil, fmt.Errorf("the %s provider keeps no checkpoints", c.p.Name())
	}
	return sb, cp, func() { c.p.Release(thread) }, nil
}

func (c cliCheckpoints) list(thread string) error {
	_, cp, release, err := c.open(thread)
	if err != nil {
		return err
	}
	defer release()
	list, err := cp.ListCheckpoints(c.ctx)
	if err != nil {
		return err
	}
	if len(list) == 0 {
		fmt.Fprintf(c.stdout, "thread %s has no checkpoints\n", thread)
		return nil
	}
	fmt.Fprintf(c.stdout, "thread %s: %d checkpoint(s), newest last\n", thread, len(list))
	for _, info := range list {
		fmt.Fprintln(c.stdout, tools.FormatCheckpoint(info))
	}
	return nil
}

func (c cliCheckpoints) restore(thread, id string, force bool) error {
	if !forkID(id) {
		return fmt.Errorf("%q is not a checkpoint id (1, 2, …; sandbox-mcp checkpoints %s lists them)", cutArg(id), thread)
	}
	sb, cp, release, err := c.open(thread)
	if err != nil {
		return err
	}
	defer release()
	run, err := tools.RunningJobs(c.ctx, sb)
	if err != nil {
		return err
	}
	if len(run) > 0 && !force {
		return fmt.Errorf("refused: job(s) of thread %s still run and could write meanwhile: %s; stop them, or pass --force to kill them first", thread, tools.JobNames(run))
	}
	if len(run) > 0 {
		if err := tools.KillJobs(c.ctx, sb, run); err != nil {
			return err
		}
		fmt.Fprintf(c.stdout, "killed job(s) %s\n", tools.JobNames(run))
	}
	res, err := cp.RestoreCheckpoint(c.ctx, id, "before restore of checkpoint "+id+" (command line)", *c.cfg.Checkpoints.MaxBytes)
	if errors.Is(err, checkpoint.ErrNotFound) {
		return fmt.Errorf("no checkpoint %s in thread %s (sandbox-mcp checkpoints %s lists them)", id, thread, thread)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "thread %s restored to checkpoint %s: %d path(s) changed\n", thread, id, len(res.Changes))
	for _, ch := range res.Changes {
		fmt.Fprintf(c.stdout, "%-8s %s\n", ch.Kind, tools.Printable(ch.Path))
	}
	for _, sk := range res.Skipped {
		fmt.Fprintf(c.stdout, "skipped  %s (%s)\n", tools.Printable(sk.Path), tools.Printable(sk.Reason))
	}
	fmt.Fprintf(c.stdout, "undo: sandbox-mcp restore %s %s\n", thread, res.Undo.ID)
	return nil
}

func (c cliCheckpoints) fork(spec, dst string) error {
	src, id, err := server.ParseFork(spec)
	if err != nil {
		return err
	}
	if err := threadKey(dst); err != nil {
		return err
	}
	info, made, err := server.ForkThread(c.ctx, c.p, c.cfg.StateDir, src, id, dst)
	if err != nil {
		return err
	}
	if !made {
		return fmt.Errorf("thread %s exists already (it is that fork already)", dst)
	}
	fmt.Fprintf(c.stdout, "thread %s made from %s@%s: its checkpoint %s (%d files)\n", dst, src, id, info.ID, info.Files)
	return nil
}

func forkID(id string) bool {
	_, _, err := server.ParseFork("x@" + id)
	return err == nil
}

func cutArg(s string) string {
	if len(s) > 40 {
		return strings.ToValidUTF8(s[:40], "") + "..."
	}
	return s
}
