package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/egress"
	"github.com/sandbox-mcp/sandbox-mcp/providers/docker"
	"github.com/sandbox-mcp/sandbox-mcp/providers/local"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// doctorTimeout bounds each probe of an engine or a cluster: a hung one
// is a broken one, and doctor answers in seconds.
const doctorTimeout = 8 * time.Second

// finding is one line of doctor's report.
type finding struct {
	status string // ok, warn, FAIL, info
	what   string
	detail string
}

// doctorCommand is `sandbox-mcp doctor [flags]`: it takes the server's
// flags, checks what the configured provider needs on this machine —
// bubblewrap and who bash runs as, the docker engine and image, the
// cluster and namespace, the state dir, the audit log — and prints a
// client config line for this machine. It exits 1 when the configured
// provider cannot work, 2 on bad flags or config.
func doctorCommand(args []string, stdout, stderr io.Writer, lookup func(string) (string, bool)) int {
	fs := flag.NewFlagSet("sandbox-mcp doctor", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var (
		configFile    = fs.String("config", "", "YAML config `FILE`, as for serving")
		stateDir      = fs.String("state-dir", "", "state `DIR`, as for serving")
		provider      = fs.String("provider", "", "local|docker|kubernetes, as for serving")
		thread        = fs.String("thread", "", "the thread the printed client config serves")
		skillsDir     = fs.String("skills-dir", "", "skills `DIR`, as for serving")
		isolation     = fs.String("isolation", "", "auto|bwrap|none|container, as for serving")
		allowHostBash = fs.Bool("allow-host-bash", false, "as for serving")
		image         = fs.String("image", "", "the sandboxes' `IMAGE` (docker, kubernetes), as for serving")
		auditLog      = fs.String("audit-log", "", "audit log `FILE`, - or off, as for serving")
		client        = fs.String("client", "claude", "the client whose config to print: "+strings.Join(clientNames, ", "))
		mounts        multiFlag
	)
	fs.Var(&mounts, "mount", "extra mount `HOST:VIRTUAL[:ro]`, as for serving")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stdout, "Usage: sandbox-mcp doctor [flags]\n\nChecks what the server needs here, with the flags you serve with, and prints\na client config for this machine. Exits 1 when the provider cannot work.\n\nFlags:")
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return 0
		}
		fmt.Fprintf(stderr, "sandbox-mcp doctor: %v (see --help)\n", err)
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "sandbox-mcp doctor: unexpected argument %q (see --help)\n", fs.Arg(0))
		return 2
	}
	if !slices.Contains(clientNames, *client) {
		fmt.Fprintf(stderr, "sandbox-mcp doctor: --client %q: want one of %s\n", *client, strings.Join(clientNames, ", "))
		return 2
	}

	// The config's ${VAR}s: a client starts the server without them.
	var (
		varsMu sync.Mutex
		vars   []string
	)
	recording := func(k string) (string, bool) {
		v, ok := lookup(k)
		if ok {
			varsMu.Lock()
			if !slices.Contains(vars, k) {
				vars = append(vars, k)
			}
			varsMu.Unlock()
		}
		return v, ok
	}
	cfg := newConfig()
	if *configFile != "" {
		var err error
		if cfg, err = loadConfig(*configFile, recording); err != nil {
			fmt.Fprintf(stderr, "sandbox-mcp doctor: %v\n", err)
			return 2
		}
	}
	configVars := slices.Clone(vars)
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	override := func(name string, dst *string, v string) {
		if set[name] {
			*dst = v
		}
	}
	if *image != "" {
		cfg.Docker.Image, cfg.Kubernetes.Image = *image, *image
	}
	override("state-dir", &cfg.StateDir, *stateDir)
	override("provider", &cfg.Provider, *provider)
	override("thread", &cfg.Thread, *thread)
	override("skills-dir", &cfg.SkillsDir, *skillsDir)
	override("isolation", &cfg.Local.Isolation, *isolation)
	override("audit-log", &cfg.Audit.Path, *auditLog)
	if set["allow-host-bash"] {
		cfg.Local.AllowHostBash = *allowHostBash
	}
	for _, m := range mounts {
		mc, err := parseMount(m)
		if err != nil {
			fmt.Fprintf(stderr, "sandbox-mcp doctor: %v\n", err)
			return 2
		}
		cfg.Mounts = append(cfg.Mounts, mc)
	}
	cfg.HTTP = HTTPConfig{} // doctor is about stdio clients
	if err := cfg.Validate(lookup); err != nil {
		fmt.Fprintf(stderr, "sandbox-mcp doctor: %v\n", err)
		return 2
	}

	fmt.Fprintf(stdout, "sandbox-mcp %s on %s/%s, provider %s\n\n", versionString(), runtime.GOOS, runtime.GOARCH, cfg.Provider)
	ctx := context.Background()
	var found []finding
	fatal := false
	add := func(f finding, counts bool) {
		if counts && f.status == "FAIL" {
			fatal = true
		} else if !counts && f.status == "FAIL" {
			f.status = "warn"
		}
		found = append(found, f)
	}
	bash := checkBash(ctx, &cfg)
	add(bash, cfg.Provider == "local")
	if cfg.Provider == "local" {
		add(checkLimits(&cfg, bash.status == "ok" || cfg.Local.AllowHostBash && bash.status != "FAIL"), false)
	}
	add(checkDocker(ctx, &cfg, lookup), cfg.Provider == "docker")
	if cfg.Provider == "kubernetes" || kubeconfigGiven(&cfg, lookup) {
		// Another provider's server has no cluster to check unless one is set up.
		add(checkKubernetes(ctx, &cfg, lookup), cfg.Provider == "kubernetes")
	}
	add(checkStateDir(cfg.StateDir), true)
	add(auditFinding(&cfg), true)
	for _, f := range found {
		fmt.Fprintf(stdout, "%-5s %s\n", f.status, f.what)
		for line := range strings.SplitSeq(f.detail, "\n") {
			if line != "" {
				fmt.Fprintf(stdout, "      %s\n", line)
			}
		}
	}

	entry, notes := clientConfig(&cfg, set, *configFile, mounts, lookup, configVars)
	if *client == "docker" {
		// The server image instead of this binary: its container is the
		// sandbox (docs/install.md).
		image := serverImage()
		if image == "" {
			image = "ghcr.io/sandbox-mcp/sandbox-mcp:VERSION"
			notes = append(notes, "this build is of no release: put the image you run (its tag) in place of "+image)
		}
		docker, err := exec.LookPath("docker")
		if err != nil {
			docker = "docker"
			notes = append(notes, "docker is not on this PATH: put its absolute path in \"command\" (clients do not search PATH)")
		}
		entry = stdioEntry{Command: docker, Args: append(slices.Clone(imageRunArgs), image, "--thread", cfg.Thread)}
	}
	where, text := clientSnippet(*client, entry, lookup)
	fmt.Fprintf(stdout, "\nClient config for this machine (%s):\n%s\n", where, text)
	for _, n := range notes {
		fmt.Fprintf(stdout, "  note: %s\n", n)
	}
	if fatal {
		fmt.Fprintf(stdout, "\nThe %s provider cannot work here: see FAIL above.\n", cfg.Provider)
		return 1
	}
	return 0
}

// checkBash says whether bash can run and, if so, as whom.
func checkBash(ctx context.Context, cfg *Config) finding {
	const what = "bash (local provider)"
	probe := probeBwrap(ctx)
	off := "bash is off: the file tools work, bash answers an error"
	alternatives := "for bash, use --provider docker, or --allow-host-bash (unisolated, runs as you)"
	bwrap := cfg.Local.Isolation != "none" && cfg.Local.Isolation != local.IsolationContainer && probe == nil
	switch {
	case cfg.Network.Mode == egress.ModeAllowlist && !bwrap && (cfg.Local.AllowHostBash || cfg.Local.Isolation == local.IsolationContainer):
		return finding{"FAIL", what + ": network.mode allowlist needs bubblewrap", "bash would run with this machine's network; the server refuses to start; " + bwrapHint()}
	case cfg.Local.Isolation == local.IsolationContainer:
		sign, _ := containerSign(os.LookupEnv)
		if err := cfg.Local.CheckShell(); err != nil {
			return finding{"FAIL", what + ": isolation container, but " + firstLine(err.Error()), "the server refuses to start"}
		}
		return finding{"ok", what + ": runs in this container (isolation container; " + sign + ")",
			"the container is the sandbox: bash runs as " + bashUser(false) + ", unisolated from the server, and reaches what the container reaches"}
	case cfg.Local.Isolation != "none" && probe == nil:
		return finding{"ok", what + ": bubblewrap works", "bash runs isolated in bubblewrap as " + bashUser(true) +
			"; network " + networkSummary(cfg)}

	case cfg.Local.Isolation == "bwrap":
		return finding{"FAIL", what + ": --isolation bwrap, but bubblewrap cannot run here", probe.Error() + "\nthe server refuses to start; " + bwrapHint()}
	case cfg.Local.AllowHostBash:
		reason := "isolation none"
		if probe != nil && cfg.Local.Isolation != "none" {
			reason = "no bubblewrap: " + probe.Error()
		}
		return finding{"warn", what + ": runs on the host, unisolated (--allow-host-bash)", reason + "\nbash runs as " + bashUser(false) + " and can read and write whatever that user can"}
	case cfg.Local.Isolation == "none":
		return finding{"info", what + ": isolation none", off + "\n" + alternatives}
	default:
		return finding{"warn", what + ": bubblewrap cannot run here", probe.Error() + "\n" + off + "\n" + bwrapHint() + "; or " + alternatives}
	}
}

// networkSummary is the sandbox's network as network.mode says it.
func networkSummary(cfg *Config) string {
	switch cfg.Network.Mode {
	case egress.ModeAllowlist:
		return fmt.Sprintf("allowlist (%d hosts, through the server's proxy)", len(cfg.Network.Allow))
	case egress.ModeOpen:
		return "open (the host's)"
	}
	return "off"
}

func bwrapHint() string {
	if runtime.GOOS != "linux" {
		return "bubblewrap is Linux only"
	}
	return "install bubblewrap 0.5 or later (apt-get install bubblewrap) where user namespaces are allowed"
}

// bashUser is who a command runs as: inside bubblewrap a root server's
// commands run as nobody (see providers/local).
func bashUser(isolated bool) string {
	uid := os.Geteuid()
	if isolated && uid == 0 {
		return "nobody (uid 65534; the server runs as root and drops to nobody)"
	}
	if u, err := user.Current(); err == nil {
		if uid < 0 {
			return u.Username
		}
		return fmt.Sprintf("%s (uid %d)", u.Username, uid)
	}
	return "uid " + strconv.Itoa(uid)
}

// recorder is a slog handler that keeps what a provider logs, so that
// doctor can read what it said (the docker provider serves with the
// engine down and only logs it).
type recorder struct {
	mu   sync.Mutex
	msgs []string
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *recorder) WithGroup(string) slog.Handler            { return r }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	msg := rec.Message
	rec.Attrs(func(a slog.Attr) bool {
		msg += " " + a.Key + "=" + a.Value.String()
		return true
	})
	r.mu.Lock()
	r.msgs = append(r.msgs, msg)
	r.mu.Unlock()
	return nil
}

func (r *recorder) find(s string) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range r.msgs {
		if strings.Contains(m, s) {
			return m, true
		}
	}
	return "", false
}

// dockerEnv are the variables the Docker client reads (client.FromEnv).
var dockerEnv = []string{"DOCKER_HOST", "DOCKER_API_VERSION", "DOCKER_CERT_PATH", "DOCKER_TLS_VERIFY"}

// checkDocker starts the docker provider with the configured settings on
// a throw-away state dir, so that nothing of the real one (its
// containers) is touched: it connects to the engine and inspects the image
// as a server's start-up does.
func checkDocker(ctx context.Context, cfg *Config, lookup func(string) (string, bool)) finding {
	const what = "docker"
	tmp, err := os.MkdirTemp("", "sandbox-mcp-doctor-")
	if err != nil {
		return finding{"FAIL", what, err.Error()}
	}
	defer os.RemoveAll(tmp)
	c := *cfg
	c.Provider, c.StateDir = "docker", tmp
	c.Docker.RemoveOnExit = true     // the container of the test command below
	c.Docker.Pull = docker.PullNever // doctor pulls nothing; it says what the server would
	rec := &recorder{}
	ctx, cancel := context.WithTimeout(ctx, doctorTimeout)
	defer cancel()
	p, err := newProvider(ctx, &c, slog.New(rec))
	host := "the default socket"
	if h, ok := lookup("DOCKER_HOST"); ok && h != "" {
		host = "DOCKER_HOST=" + h
	}
	if errors.Is(err, docker.ErrImageMissing) && cfg.Docker.Pull != docker.PullNever {
		image := cmp.Or(cfg.Docker.Image, docker.DefaultImage)
		return finding{"warn", what + ": engine reachable; image " + image + " is not on it yet: the server pulls it on its first call",
			"engine at " + host + "\n`docker pull " + image + "` pulls it now (progress shown); docker.pull: never forbids pulling"}
	}
	if err != nil {
		return finding{"FAIL", what + ": " + firstLine(strings.TrimPrefix(err.Error(), "docker provider: ")), "engine at " + host}
	}
	defer p.Close()
	if msg, down := rec.find("engine not reachable"); down {
		detail := "engine at " + host + ": " + msg
		if _, ok := lookup("DOCKER_HOST"); !ok && runtime.GOOS == "darwin" {
			detail += "\nDocker Desktop: start it, or set DOCKER_HOST=unix://$HOME/.docker/run/docker.sock"
		}
		return finding{"FAIL", what + ": engine not reachable", detail}
	}
	image := cmp.Or(c.Docker.Image, docker.DefaultImage)
	// A command in a container of its own, through the supervisor and
	// the channel a server would use (on Docker Desktop: the exec channel
	// and docker.supervisor_binary).
	detail := "engine at " + host
	if ch, ok := p.(interface{ Channel() string }); ok {
		detail += ", channel " + ch.Channel()
	}
	if b := c.Docker.SupervisorBinary; b != "" {
		detail += ", supervisor " + b
	}
	if err := runTrue(ctx, p); err != nil {
		return finding{"FAIL", what + ": engine reachable, image " + image + " present, but a command in a container failed: " + firstLine(err.Error()), detail}
	}
	return finding{"ok", what + ": engine reachable, image " + image + " present, a command ran in a container", detail}
}

// runTrue runs `true` in a thread of p's.
func runTrue(ctx context.Context, p sandbox.Provider) error {
	const thread = "doctor"
	sb, err := p.Acquire(ctx, thread)
	if err != nil {
		return err
	}
	defer p.Release(thread)
	res, err := sb.Exec(ctx, sandbox.ExecRequest{Command: "true", Timeout: 30 * time.Second, Output: io.Discard})
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("exit code %d", res.ExitCode)
	}
	return err
}

// checkKubernetes starts the kubernetes provider as a server would, but
// without making the NetworkPolicy: it reads the cluster configuration
// and lists the namespace's Pods, nothing is written.
func checkKubernetes(ctx context.Context, cfg *Config, lookup func(string) (string, bool)) finding {
	const what = "kubernetes"
	k := cfg.Kubernetes
	source := "~/.kube/config"
	switch v, ok := lookup("KUBECONFIG"); {
	case k.Kubeconfig != "":
		source = "kubernetes.kubeconfig " + k.Kubeconfig
	case ok && v != "":
		source = "KUBECONFIG=" + v
	}
	if k.Context != "" {
		source += ", context " + k.Context
	}
	ns := k.Namespace
	if ns == "" {
		ns = "sandbox-mcp"
	}
	c := *cfg
	c.Provider = "kubernetes"
	off := false
	c.Kubernetes.NetworkPolicy = &off
	ctx, cancel := context.WithTimeout(ctx, doctorTimeout)
	defer cancel()
	p, err := newProvider(ctx, &c, slog.New(&recorder{}))
	if err != nil {
		detail := "cluster from " + source
		if !kubeconfigGiven(cfg, lookup) {
			detail = "" // there is none: the message says where it was looked for
		}
		return finding{"FAIL", what + ": " + firstLine(strings.TrimPrefix(err.Error(), "kubernetes provider: ")), detail}
	}
	p.Close()
	return finding{"ok", what + ": namespace " + ns + " reachable", "cluster from " + source}
}

// kubeconfigGiven: a cluster configuration is named or there (the config's
// kubeconfig, $KUBECONFIG, ~/.kube/config, or in a Pod).
func kubeconfigGiven(cfg *Config, lookup func(string) (string, bool)) bool {
	if cfg.Kubernetes.Kubeconfig != "" {
		return true
	}
	if v, ok := lookup("KUBECONFIG"); ok && v != "" {
		return true
	}
	if v, ok := lookup("KUBERNETES_SERVICE_HOST"); ok && v != "" {
		return true
	}
	home, _ := lookup("HOME")
	_, err := os.Stat(filepath.Join(home, ".kube", "config"))
	return home != "" && err == nil
}

// checkStateDir reports the state dir's owner and mode: it holds every
// thread's files and the audit log.
func checkStateDir(dir string) finding {
	what := "state dir " + dir
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		parent := filepath.Dir(dir)
		for {
			if _, err := os.Stat(parent); err == nil || filepath.Dir(parent) == parent {
				break
			}
			parent = filepath.Dir(parent)
		}
		if err := writable(parent); err != nil {
			return finding{"FAIL", what + ": cannot be created", err.Error()}
		}
		return finding{"ok", what + ": not there yet", "made (mode 0700) on the first start"}
	case err != nil:
		return finding{"FAIL", what, err.Error()}
	case !fi.IsDir():
		return finding{"FAIL", what + ": not a directory", ""}
	}
	if err := writable(dir); err != nil {
		return finding{"FAIL", what + ": not writable", err.Error()}
	}
	owner := fileOwnerName(fi)
	mode := fi.Mode().Perm()
	if runtime.GOOS != "windows" && mode&0o077 != 0 {
		return finding{"warn", fmt.Sprintf("%s: owner %s, mode %04o", what, owner, mode),
			fmt.Sprintf("other users can reach it (threads' files, the audit log): chmod 700 %s", dir)}
	}
	return finding{"ok", fmt.Sprintf("%s: owner %s, mode %04o", what, owner, mode), ""}
}

// writable: a file can be made in dir.
func writable(dir string) error {
	f, err := os.CreateTemp(dir, ".sandbox-mcp-doctor-*")
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			return fmt.Errorf("%s: %w", dir, pe.Err)
		}
		return err
	}
	f.Close()
	return os.Remove(f.Name())
}

func fileOwnerName(fi fs.FileInfo) string {
	uid, _, ok := statOwner(fi)
	if !ok {
		return "you"
	}
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		return fmt.Sprintf("%s (uid %d)", u.Username, uid)
	}
	return "uid " + strconv.Itoa(uid)
}

func auditFinding(cfg *Config) finding {
	switch cfg.Audit.Path {
	case "off":
		return finding{"warn", "audit log: off", "no record of the calls is kept"}
	case "-":
		return finding{"info", "audit log: stderr", "MCP clients keep a server's stderr in their own log"}
	}
	return finding{"info", "audit log: " + cfg.Audit.Path, "check it with: sandbox-mcp audit verify " + cfg.Audit.Path}
}

// clientConfig is a stdio client's config entry for this machine: the
// binary's absolute path (clients do not search the user's PATH), the
// flags given to doctor with their paths absolute, and the environment the
// provider relies on — MCP clients start servers with a minimal one (the
// TypeScript SDK passes only HOME, LOGNAME, PATH, SHELL, TERM, USER).
func clientConfig(cfg *Config, set map[string]bool, configFile string, mounts []string, lookup func(string) (string, bool), configVars []string) (stdioEntry, []string) {
	var notes []string
	bin, err := os.Executable()
	if err != nil {
		bin = "sandbox-mcp"
		notes = append(notes, "the binary's path is unknown: put its absolute path in \"command\"")
	}
	args := []string{}
	abs := func(p string) string {
		if a, err := filepath.Abs(p); err == nil {
			return a
		}
		return p
	}
	if configFile != "" {
		args = append(args, "--config", abs(configFile))
	}
	if set["provider"] {
		args = append(args, "--provider", cfg.Provider)
	}
	// A client passes HOME but not XDG_STATE_HOME: name the state dir
	// whenever it is not the one a client's server would find by itself.
	homeOnly := func(k string) (string, bool) {
		if k == "HOME" {
			return lookup(k)
		}
		return "", false
	}
	if def, err := expandHome(defaultStateDir(homeOnly), homeOnly); err != nil || def != cfg.StateDir {
		args = append(args, "--state-dir", cfg.StateDir)
	}
	if set["skills-dir"] {
		args = append(args, "--skills-dir", cfg.SkillsDir)
	}
	for _, m := range mounts {
		if mc, err := parseMount(m); err == nil {
			m = abs(mc.HostPath) + ":" + mc.ContainerPath
			if mc.ReadOnly {
				m += ":ro"
			}
		}
		args = append(args, "--mount", m)
	}
	if set["isolation"] {
		args = append(args, "--isolation", cfg.Local.Isolation)
	}
	if set["image"] && cfg.Docker.Image != "" {
		args = append(args, "--image", cfg.Docker.Image)
	}
	if set["allow-host-bash"] {
		args = append(args, "--allow-host-bash="+strconv.FormatBool(cfg.Local.AllowHostBash))
	}
	if set["audit-log"] {
		a := cfg.Audit.Path
		if a != "-" && a != "off" {
			a = abs(a)
		}
		args = append(args, "--audit-log", a)
	}
	args = append(args, "--thread", cfg.Thread)

	env := map[string]string{}
	switch cfg.Provider {
	case "docker":
		for _, k := range dockerEnv {
			if v, ok := lookup(k); ok && v != "" {
				env[k] = v
			}
		}
	case "kubernetes":
		if v, ok := lookup("KUBECONFIG"); ok && v != "" && cfg.Kubernetes.Kubeconfig == "" {
			env["KUBECONFIG"] = v
		}
	}
	var missing []string
	for _, v := range configVars {
		switch v {
		case "HOME", "USER", "LOGNAME", "PATH", "SHELL", "TERM":
		default:
			if _, ok := env[v]; !ok {
				missing = append(missing, v)
			}
		}
	}
	if len(missing) > 0 {
		notes = append(notes, fmt.Sprintf("the config reads ${%s} from the environment, which a client does not pass: add it to \"env\"", strings.Join(missing, "}, ${")))
	}
	return stdioEntry{Command: bin, Args: args, Env: env}, notes
}

// stdioEntry is how a client starts the server: the same for every client,
// written in each one's own format (clientSnippet).
type stdioEntry struct {
	Command string
	Args    []string
	Env     map[string]string
}

// clientNames are the clients doctor writes a config for.
var clientNames = []string{"claude", "cursor", "vscode", "codex", "docker"}

// imageRunArgs are the docker run arguments of the server image, as the
// release's server.json gives a registry client (scripts/releasemeta,
// server): stdio, the state volume, the container hardened as the sandbox
// it is.
var imageRunArgs = []string{"run", "-i", "--rm", "-v", "sandbox-mcp-state:/var/lib/sandbox-mcp",
	"--cap-drop", "ALL", "--security-opt", "no-new-privileges", "--network", "none",
	"--pids-limit", "1024", "--memory", "4g"}

// serverImage is the image of this release ("" for a build of no release).
func serverImage() string {
	if version == "" {
		return ""
	}
	return "ghcr.io/sandbox-mcp/sandbox-mcp:" + version
}

// clientSnippet is entry in the config format of client, and where that
// client keeps it.
func clientSnippet(client string, e stdioEntry, lookup func(string) (string, bool)) (where, text string) {
	home, _ := lookup("HOME")
	server := map[string]any{"command": e.Command, "args": e.Args}
	if len(e.Env) > 0 {
		server["env"] = e.Env
	}
	switch client {
	case "cursor":
		b, _ := json.Marshal(map[string]any{"mcpServers": map[string]any{"sandbox": server}})
		return "merge into the \"mcpServers\" of " + filepath.Join(home, ".cursor", "mcp.json") + ", or .cursor/mcp.json in a project", string(b)
	case "vscode":
		server["type"] = "stdio"
		b, _ := json.Marshal(map[string]any{"servers": map[string]any{"sandbox": server}})
		return "merge into the \"servers\" of .vscode/mcp.json in your workspace (or run \"MCP: Open User Configuration\")", string(b)
	case "codex":
		var b strings.Builder
		b.WriteString("[mcp_servers.sandbox]\n")
		b.WriteString("command = " + tomlString(e.Command) + "\n")
		quoted := make([]string, len(e.Args))
		for i, a := range e.Args {
			quoted[i] = tomlString(a)
		}
		b.WriteString("args = [" + strings.Join(quoted, ", ") + "]\n")
		if len(e.Env) > 0 {
			keys := slices.Sorted(maps.Keys(e.Env))
			pairs := make([]string, len(keys))
			for i, k := range keys {
				pairs[i] = tomlString(k) + " = " + tomlString(e.Env[k])
			}
			b.WriteString("env = { " + strings.Join(pairs, ", ") + " }\n")
		}
		return "add to " + filepath.Join(home, ".codex", "config.toml"), strings.TrimSuffix(b.String(), "\n")
	}
	b, _ := json.Marshal(map[string]any{"mcpServers": map[string]any{"sandbox": server}})
	return "merge into the \"mcpServers\" of " + desktopConfigPath(lookup), string(b)
}

// tomlString quotes s as a TOML basic string.
func tomlString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\t':
			b.WriteString(`\t`)
		case '\r':
			b.WriteString(`\r`)
		default:
			if r < 0x20 || r == 0x7f {
				fmt.Fprintf(&b, `\u%04X`, r)
			} else {
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
	return b.String()
}

// desktopConfigPath is where Claude Desktop keeps its config on this OS.
func desktopConfigPath(lookup func(string) (string, bool)) string {
	home, _ := lookup("HOME")
	switch runtime.GOOS {
	case "darwin":
		return filepath.Join(home, "Library/Application Support/Claude/claude_desktop_config.json")
	case "windows":
		appdata, _ := lookup("APPDATA")
		return filepath.Join(appdata, "Claude", "claude_desktop_config.json")
	}
	return "your MCP client's config (Claude Desktop's claude_desktop_config.json)"
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}
