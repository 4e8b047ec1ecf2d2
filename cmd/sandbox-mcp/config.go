package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/sandbox-mcp/sandbox-mcp/egress"
	"github.com/sandbox-mcp/sandbox-mcp/masking"
	"github.com/sandbox-mcp/sandbox-mcp/metrics"
	"github.com/sandbox-mcp/sandbox-mcp/providers/docker"
	"github.com/sandbox-mcp/sandbox-mcp/providers/kubernetes"
	"github.com/sandbox-mcp/sandbox-mcp/providers/local"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/server"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor"
	"github.com/sandbox-mcp/sandbox-mcp/telemetry"
	"github.com/sandbox-mcp/sandbox-mcp/tools"
)

// Config is the YAML configuration (SPEC §8). Flags override it.
type Config struct {
	Provider   string            `yaml:"provider"`
	StateDir   string            `yaml:"state_dir"`
	SkillsDir  string            `yaml:"skills_dir"`
	Mounts     []MountConfig     `yaml:"mounts"`
	Limits     LimitsConfig      `yaml:"limits"`
	EnvInherit []string          `yaml:"env_inherit"`
	Local      local.Config      `yaml:"local"`
	Docker     docker.Config     `yaml:"docker"`
	Kubernetes kubernetes.Config `yaml:"kubernetes"`
	Network    egress.Config     `yaml:"network"`
	HTTP       HTTPConfig        `yaml:"http"`
	Audit      AuditConfig       `yaml:"audit"`
	Metrics    metrics.Config    `yaml:"metrics"`
	Telemetry  telemetry.Config  `yaml:"telemetry"`
	// Checkpoints: automatic checkpoints and their bound (SPEC §18), the
	// server's settings, declared there.
	Checkpoints server.CheckpointsConfig `yaml:"checkpoints"`
	LogLevel    string                   `yaml:"log_level"`

	// From flags only.
	Thread string `yaml:"-"`
	// file and root are the config file and its parsed tree, to name the
	// line of a key a later check refuses (located).
	file string
	root *yaml.Node
	// flags are the keys a flag set, by key: the flag's name (an error
	// about them names the flag, not the file).
	flags map[string]string
	// Warnings are the config file's problems that do not stop start-up
	// (an unset ${VAR} outside the tokens), logged once the log is set up.
	Warnings []string `yaml:"-"`
}

// MountConfig is one custom mount.
type MountConfig struct {
	HostPath      string `yaml:"host_path"`
	ContainerPath string `yaml:"container_path"`
	ReadOnly      bool   `yaml:"read_only"`
}

// LimitsConfig bounds outputs and time; unset keeps the default, 0 means no limit.
type LimitsConfig struct {
	// The tools' limits, declared there (tools.Limits: keys; newConfig
	// gives their defaults, so a key left out keeps its default and 0 is
	// no limit).
	tools.Limits `yaml:",inline"`
	// The bounds of every tenant (threads_per_token): the server's,
	// declared there.
	server.Bounds `yaml:",inline"`
}

// newConfig is the configuration before any file or flag: the defaults
// that a zero value cannot give (a limit's 0 is no limit).
func newConfig() Config {
	return Config{Limits: LimitsConfig{Limits: tools.DefaultLimits()}}
}

// HTTPConfig is the http section: where --http listens, and the server's
// settings, declared there (server.HTTPConfig: keys, defaults, checks).
type HTTPConfig struct {
	Addr              string `yaml:"addr"`
	server.HTTPConfig `yaml:",inline"`
}

// AuditConfig says where the audit log goes: a file, "-" (stderr) or "off".
type AuditConfig struct {
	Path string `yaml:"path"`
}

// loadConfig reads a YAML config: ${VAR} expanded, unknown keys refused.
// Variables are expanded in the parsed values, not in the text, so a value
// stays one value whatever it holds (a newline, a comma, a "#"). Every
// error is one line naming the file, the line and the key's path.
func loadConfig(file string, lookup func(string) (string, bool)) (Config, error) {
	c := newConfig()
	raw, err := os.ReadFile(file)
	if err != nil {
		return c, fmt.Errorf("config: %w", err)
	}
	fail := func(err error) (Config, error) {
		msg := yamlLine(strings.TrimPrefix(err.Error(), "yaml: "), string(raw))
		return Config{}, fmt.Errorf("config %s %s", file, strings.ReplaceAll(msg, "\n", "; "))
	}
	// ${VAR} may stand where YAML syntax forbids "{" (a flow list, as in
	// "auth_tokens: [${TOKEN}]"): swap each for a plain placeholder, parse,
	// then put the values into the parsed scalars.
	d := &decoder{lookup: lookup, refs: map[string]string{}, vars: map[string][]string{}}
	text := envRef.ReplaceAllStringFunc(string(raw), func(m string) string {
		ph := fmt.Sprintf("SANDBOXMCPENV%dX", len(d.refs))
		d.refs[ph] = m
		return ph
	})
	var root yaml.Node
	if err := yaml.NewDecoder(strings.NewReader(text)).Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			return c, nil
		}
		return fail(err)
	}
	if d.decode(&root, reflect.ValueOf(&c).Elem(), ""); len(d.errs) > 0 {
		return fail(errors.Join(d.errs...)) // one line: "; " between them
	}
	for _, w := range d.warns {
		c.Warnings = append(c.Warnings, fmt.Sprintf("config %s %s", file, w))
	}
	c.file, c.root = file, &root
	// An empty token would turn auth off (SPEC §10): it stops start-up.
	for i, t := range c.HTTP.AuthTokens {
		if strings.TrimSpace(t) == "" {
			key := fmt.Sprintf("http.auth_tokens[%d]", i)
			msg := key + " is empty: an empty token would turn auth off"
			if vars := d.vars[key]; len(vars) > 0 {
				msg = fmt.Sprintf("%s is empty (${%s} is set but empty): an empty token would turn auth off", key, strings.Join(vars, "}, ${"))
			}
			return fail(&configError{line: tokenLine(&root, i), msg: msg})
		}
	}
	return c, nil
}

// tokenLine is the line of http.auth_tokens[i] in the tree.
func tokenLine(root *yaml.Node, i int) int {
	return keyLine(root, fmt.Sprintf("http.auth_tokens[%d]", i))
}

// keyPath is a config key as the checks name it, first in their messages:
// "provider", "limits.jobs_max", "mounts[0].host_path".
var keyPath = regexp.MustCompile(`^[a-z_]+(?:\[\d+\])?(?:\.[a-z_]+(?:\[\d+\])?)*`)

// keyLine is the line of the key path in the tree (its value's line), or
// 0 when the file does not set it.
func keyLine(root *yaml.Node, path string) int {
	n := root
	if n == nil {
		return 0
	}
	for _, part := range strings.Split(path, ".") {
		name, index := part, -1
		if i := strings.IndexByte(part, '['); i >= 0 {
			name = part[:i]
			index, _ = strconv.Atoi(strings.TrimSuffix(part[i+1:], "]"))
		}
		if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
			n = n.Content[0]
		}
		var next *yaml.Node
		for j := 0; j+1 < len(n.Content) && n.Kind == yaml.MappingNode; j += 2 {
			if n.Content[j].Value == name {
				next = n.Content[j+1]
			}
		}
		if next == nil {
			return 0
		}
		n = next
		if index >= 0 {
			if n.Kind != yaml.SequenceNode || index >= len(n.Content) {
				return 0
			}
			n = n.Content[index]
		}
	}
	return n.Line
}

// located names the config file and the line of the key a check refused
// (its message names the key first), so that every fatal start-up error
// of the file is one line with file, line, key and what was expected. A
// key the file does not set (a flag, a default) is left as it was said.
func (c *Config) located(err error) error {
	msg := err.Error()
	key := keyPath.FindString(msg)
	if flag, ok := c.flags[key]; ok && key != "" {
		return errors.New(flag + strings.TrimPrefix(msg, key))
	}
	if c.file == "" || strings.HasPrefix(msg, "config ") {
		return err
	}
	if line := keyLine(c.root, key); line > 0 {
		return fmt.Errorf("config %s line %d: %w", c.file, line, err)
	}
	return err
}

// yamlParserProblems are the problems yaml.v3 reports from its parser
// (not its scanner): for them it prints the 0-based line where the
// construct began, one line early (gopkg.in/yaml.v3 decode.go, fail).
var yamlParserProblems = map[string]bool{
	"did not find expected ',' or ']'": true, "did not find expected ',' or '}'": true,
	"did not find expected '-' indicator": true, "did not find expected <document start>": true,
	"did not find expected <stream-start>": true, "did not find expected key": true,
	"did not find expected node content": true, "found duplicate %TAG directive": true,
	"found duplicate %YAML directive": true, "found incompatible YAML document": true,
	"found undefined tag handle": true,
}

var yamlLineRe = regexp.MustCompile(`^line (\d+): (.*)$`)

// yamlLine corrects the line yaml.v3 gives a parser error in text: one
// more, but never past the last line that has anything (a construct left
// open at the end is reported at the end of the stream).
func yamlLine(msg, text string) string {
	m := yamlLineRe.FindStringSubmatch(msg)
	if m == nil || !yamlParserProblems[m[2]] {
		return msg
	}
	n, _ := strconv.Atoi(m[1])
	last := strings.Count(strings.TrimRight(text, " \t\r\n"), "\n") + 1
	return fmt.Sprintf("line %d: %s", min(n+1, last), m[2])
}

// defaultStateDir is $XDG_STATE_HOME/sandbox-mcp or ~/.local/state/sandbox-mcp.
func defaultStateDir(lookup func(string) (string, bool)) string {
	if x, ok := lookup("XDG_STATE_HOME"); ok && x != "" {
		return filepath.Join(x, "sandbox-mcp")
	}
	home, _ := lookup("HOME")
	if home == "" {
		home, _ = os.UserHomeDir()
	}
	return filepath.Join(home, ".local", "state", "sandbox-mcp")
}

// expandHome turns a leading ~ into the home directory and makes p absolute.
func expandHome(p string, lookup func(string) (string, bool)) (string, error) {
	if p == "~" || strings.HasPrefix(p, "~/") {
		home, _ := lookup("HOME")
		if home == "" {
			return "", fmt.Errorf("cannot expand %s: HOME is not set", p)
		}
		p = filepath.Join(home, p[1:])
	}
	return filepath.Abs(p)
}

// Validate fills defaults, makes paths absolute and refuses insecure or
// contradictory settings with one line naming the problem.
func (c *Config) Validate(lookup func(string) (string, bool)) error {
	var err error
	if c.Provider == "" {
		c.Provider = "local"
	}
	switch c.Provider {
	case "local", "docker", "kubernetes":
	default:
		return fmt.Errorf("provider %q: want local, docker or kubernetes", c.Provider)
	}
	if c.StateDir == "" {
		c.StateDir = defaultStateDir(lookup)
	}
	if c.StateDir, err = expandHome(c.StateDir, lookup); err != nil {
		return fmt.Errorf("state_dir: %w", err)
	}
	if c.Thread == "" {
		c.Thread = "default"
	}
	if err := sandbox.ValidThreadID(c.Thread); err != nil {
		return fmt.Errorf("--thread: %w", err)
	}
	if c.Local.Isolation == "" {
		// The release's image sets SANDBOX_MCP_ISOLATION=container: the
		// container it runs in is the sandbox.
		c.Local.Isolation = local.IsolationAuto
		if v, ok := lookup("SANDBOX_MCP_ISOLATION"); ok && v != "" {
			c.Local.Isolation = v
		}
	}
	if c.LogLevel == "" {
		c.LogLevel = "info"
	}
	if _, err := parseLevel(c.LogLevel); err != nil {
		return err
	}
	if c.SkillsDir != "" {
		if c.SkillsDir, err = c.hostDir("skills_dir", c.SkillsDir, lookup); err != nil {
			return err
		}
	}
	seen := []string{}
	for i, m := range c.Mounts {
		name := fmt.Sprintf("mounts[%d]", i)
		v := m.ContainerPath
		if v == "" || !path.IsAbs(v) || path.Clean(v) != v || v == "/" || strings.ContainsRune(v, 0) {
			return fmt.Errorf("%s.container_path %q: want a clean absolute path other than /", name, v)
		}
		for _, r := range sandbox.ReservedPrefixes {
			if sandbox.Overlaps(v, r) {
				return fmt.Errorf("%s.container_path %s overlaps the reserved %s", name, v, r)
			}
		}
		for _, o := range seen {
			if sandbox.Overlaps(v, o) {
				return fmt.Errorf("%s.container_path %s overlaps the mount at %s", name, v, o)
			}
		}
		seen = append(seen, v)
		if c.Mounts[i].HostPath, err = c.hostDir(name+".host_path", m.HostPath, lookup); err != nil {
			return err
		}
	}
	if err := c.Limits.Limits.Validate(); err != nil {
		return err
	}
	for _, k := range c.EnvInherit {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return fmt.Errorf("env_inherit: %q is not a variable name", k)
		}
	}
	if err := c.Local.Validate(); err != nil {
		return err
	}
	if c.Provider == "local" && c.Local.Isolation == local.IsolationContainer {
		if _, ok := containerSign(lookup); !ok {
			return fmt.Errorf("local.isolation container: this does not look like a container (no /.dockerenv, /run/.containerenv, $container or $KUBERNETES_SERVICE_HOST), and on a host it would run bash unisolated: use bwrap there, or --allow-host-bash to mean it")
		}
	}
	if err := c.Docker.Validate(); err != nil {
		return err
	}
	if err := c.Kubernetes.Validate(); err != nil {
		return err
	}
	if err := c.settleNetwork(); err != nil {
		return err
	}
	if err := c.Limits.Bounds.Validate(); err != nil {
		return err
	}
	if err := c.HTTP.HTTPConfig.Validate(); err != nil {
		return err
	}
	if err := c.Checkpoints.Validate(); err != nil {
		return err
	}
	if c.HTTP.Addr != "" {
		loopback, err := server.IsLoopback(c.HTTP.Addr)
		if err != nil {
			return fmt.Errorf("--http: %w", err)
		}
		if !loopback && len(c.HTTP.AuthTokens) == 0 {
			return fmt.Errorf("--http %s binds beyond loopback without auth tokens: set --auth-token (or SANDBOX_MCP_AUTH_TOKEN), or bind 127.0.0.1", c.HTTP.Addr)
		}
	}
	if err := c.Metrics.Validate(); err != nil {
		return err
	}
	if err := c.Telemetry.Validate(lookup); err != nil {
		return err
	}
	switch c.Audit.Path {
	case "":
		c.Audit.Path = filepath.Join(c.StateDir, "audit.jsonl")
	case "-", "off":
	default:
		if c.Audit.Path, err = expandHome(c.Audit.Path, lookup); err != nil {
			return fmt.Errorf("audit.path: %w", err)
		}
	}
	// The agent must not reach its own audit log through a mount.
	if c.Audit.Path != "-" && c.Audit.Path != "off" {
		dirs := []string{c.SkillsDir}
		for _, m := range c.Mounts {
			dirs = append(dirs, m.HostPath)
		}
		for _, d := range dirs {
			if d != "" && (sandbox.Within(c.Audit.Path, d) || sandbox.Within(resolved(c.Audit.Path), resolved(d))) {
				return fmt.Errorf("audit log %s lies inside the mounted %s", c.Audit.Path, d)
			}
		}
	}
	return nil
}

// hostDir checks a host directory that the agent will see: it must exist
// and must neither hold the state dir nor lie inside it (that would hand the
// agent every thread and the audit log).
func (c *Config) hostDir(name, p string, lookup func(string) (string, bool)) (string, error) {
	if p == "" {
		return "", fmt.Errorf("%s is empty", name)
	}
	abs, err := expandHome(p, lookup)
	if err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return "", fmt.Errorf("%s %s: %w", name, p, errors.Unwrap(err))
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("%s %s: not a directory", name, p)
	}
	state := resolved(c.StateDir)
	for _, h := range []string{abs, resolved(abs)} {
		for _, s := range []string{c.StateDir, state} {
			if sandbox.Overlaps(h, s) {
				return "", fmt.Errorf("%s %s overlaps the state dir %s", name, p, c.StateDir)
			}
		}
	}
	return abs, nil
}

// resolved resolves the symlinks of p, also when p does not exist yet:
// the deepest existing parent is resolved and the rest joined back.
func resolved(p string) string {
	rest := ""
	for dir := p; ; dir = filepath.Dir(dir) {
		if r, err := filepath.EvalSymlinks(dir); err == nil {
			return filepath.Join(r, rest)
		}
		if dir == filepath.Dir(dir) {
			return p
		}
		rest = filepath.Join(filepath.Base(dir), rest)
	}
}

// parseMount parses --mount HOST:VIRTUAL[:ro].
func parseMount(s string) (MountConfig, error) {
	m := MountConfig{}
	parts := strings.Split(s, ":")
	if n := len(parts); n == 3 && (parts[2] == "ro" || parts[2] == "rw") {
		m.ReadOnly = parts[2] == "ro"
		parts = parts[:2]
	}
	if len(parts) != 2 || parts[0] == "" || parts[1] == "" {
		return m, fmt.Errorf("--mount %q: want HOST:VIRTUAL or HOST:VIRTUAL:ro", s)
	}
	m.HostPath, m.ContainerPath = parts[0], parts[1]
	return m, nil
}

// binaryVirtual is what the agent sees in place of the supervisor's
// binary, which sandboxes run: where docker binds it.
const binaryVirtual = "/.sandbox-mcp/sandbox-mcp"

// binaryPaths are the host paths of the binaries bound into sandboxes as
// their supervisor (the daemon beside this binary, this binary as its
// fallback, docker.supervisor_binary): a sandbox's /proc/self/mountinfo
// names them, and a host path says who and where (a home directory), so
// the server masks them (SPEC §16).
func (c *Config) binaryPaths() []masking.Pair {
	var pairs []masking.Pair
	add := func(p string) { pairs = append(pairs, masking.Pair{Host: p, Virtual: binaryVirtual}) }
	if exe, err := os.Executable(); err == nil {
		dirs := []string{filepath.Dir(exe)}
		add(exe)
		if real, err := filepath.EvalSymlinks(exe); err == nil && real != exe {
			dirs = append(dirs, filepath.Dir(real)) // where supervisor.FindBinary looks
			add(real)
		}
		for _, d := range dirs {
			add(filepath.Join(d, supervisor.DaemonName))
			// The Linux build beside a macOS or Windows server (docker):
			// the archives' linux/, the extension's linux-ARCH/.
			add(filepath.Join(d, "linux", supervisor.DaemonName))
			add(filepath.Join(d, "linux-"+runtime.GOARCH, supervisor.DaemonName))
		}
	}
	if c.Docker.SupervisorBinary != "" {
		add(c.Docker.SupervisorBinary)
	}
	return pairs
}
