package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/providers/local"
	"github.com/sandbox-mcp/sandbox-mcp/tools"
)

// env is a lookup func over a map: tests never read the real environment.
func env(kv ...string) func(string) (string, bool) {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

func writeConfig(t *testing.T, yaml string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func mkdir(t *testing.T, p string) string {
	t.Helper()
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func intp(v int) *int       { return &v }
func int64p(v int64) *int64 { return &v }

func TestLoadConfigExpandsEnv(t *testing.T) {
	t.Parallel()
	file := writeConfig(t, `
provider: ${PROVIDER}
state_dir: ${BASE}/state
skills_dir: $HOME/skills
env_inherit: [LANG, "${UNSET:-}"]
docker:
  image: img:${TAG}
  environment: {API_KEY: "${API_KEY}"}
http: {auth_tokens: ["${TOKEN}"]}
`)
	c, err := loadConfig(file, env("PROVIDER", "docker", "BASE", "/srv/sb", "API_KEY", "k-123", "TOKEN", "tok", "HOME", "/home/me", "TAG", "v1"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, got, want string }{
		{"provider", c.Provider, "docker"},
		{"state_dir", c.StateDir, "/srv/sb/state"},
		{"skills_dir ($HOME without braces is left alone)", c.SkillsDir, "$HOME/skills"},
		{"env_inherit[1] (unset variable with an empty default)", c.EnvInherit[1], ""},
		{"docker.image", c.Docker.Image, "img:v1"},
		{"docker.environment.API_KEY", c.Docker.Environment["API_KEY"], "k-123"},
		{"http.auth_tokens[0]", c.HTTP.AuthTokens[0], "tok"},
	} {
		if c.got != c.want {
			t.Errorf("%s = %q, want %q", c.name, c.got, c.want)
		}
	}
}

// A variable's value is data: whatever it holds, it becomes the value of
// the field that names it, and never adds or changes other settings
// (SPEC §8: "${VAR} expands from the environment").
func TestLoadConfigEnvValueIsLiteral(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, yaml, value string
		check             func(Config) bool
	}{
		{"plain token", "http: {auth_tokens: [${V}]}\n", "plain",
			func(c Config) bool { return len(c.HTTP.AuthTokens) == 1 && c.HTTP.AuthTokens[0] == "plain" }},
		{"token with a comma stays one token", "http: {auth_tokens: [${V}]}\n", "a, b",
			func(c Config) bool { return len(c.HTTP.AuthTokens) == 1 && c.HTTP.AuthTokens[0] == "a, b" }},
		{"token with a hash", "http:\n  auth_tokens:\n    - ${V}\n", "p@ss #1",
			func(c Config) bool { return len(c.HTTP.AuthTokens) == 1 && c.HTTP.AuthTokens[0] == "p@ss #1" }},
		{"value with a colon", "docker:\n  environment:\n    API_KEY: ${V}\n", "x: y",
			func(c Config) bool { return c.Docker.Environment["API_KEY"] == "x: y" }},
		{"value with a newline adds no setting", "docker:\n  image: ${V}\n", "img\nlocal: {allow_host_bash: true}",
			func(c Config) bool {
				return !c.Local.AllowHostBash && c.Docker.Image == "img\nlocal: {allow_host_bash: true}"
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := loadConfig(writeConfig(t, c.yaml), env("V", c.value))
			if err != nil {
				t.Fatalf("loadConfig(%q) with V=%q: %v", c.yaml, c.value, err)
			}
			if !c.check(cfg) {
				t.Errorf("loadConfig(%q) with V=%q: value not taken literally: auth_tokens %q, docker.image %q, docker.environment %q, local.allow_host_bash %v",
					c.yaml, c.value, cfg.HTTP.AuthTokens, cfg.Docker.Image, cfg.Docker.Environment, cfg.Local.AllowHostBash)
			}
		})
	}
}

func TestLoadConfigRefuses(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, yaml string
		want       []string // substrings of the error
	}{
		{"unknown top-level key", "provider: local\nbogus_key: 1\n", []string{"bogus_key"}},
		{"unknown nested key", "local:\n  allow_host_bashh: true\n", []string{"allow_host_bashh"}},
		{"unknown mount key", "mounts:\n  - {host_path: /tmp, container_path: /mnt/x, readonly: true}\n", []string{"readonly"}},
		{"two unknown keys, one line", "aaa: 1\nbbb: 2\n", []string{"aaa", "bbb"}},
		{"wrong type", "limits: {bash_output_max_chars: lots}\n", []string{"lots"}},
		{"not yaml", "provider: [local\n", []string{"config"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			file := writeConfig(t, c.yaml)
			_, err := loadConfig(file, env())
			if err == nil {
				t.Fatalf("loadConfig(%q) = nil error", c.yaml)
			}
			msg := err.Error()
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not name %q", msg, w)
				}
			}
			if strings.Contains(msg, "\n") {
				t.Errorf("error is more than one line: %q", msg)
			}
		})
	}
	if _, err := loadConfig(filepath.Join(t.TempDir(), "missing.yaml"), env()); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("missing config file: err = %v, want one naming the file", err)
	}
}

func TestLoadConfigEmptyFile(t *testing.T) {
	t.Parallel()
	c, err := loadConfig(writeConfig(t, ""), env())
	if err != nil {
		t.Fatalf("empty config: %v", err)
	}
	if c.Provider != "" || c.StateDir != "" {
		t.Errorf("empty config = %+v, want the zero Config", c)
	}
}

func TestValidateDefaults(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name      string
		lookup    func(string) (string, bool)
		stateDir  string
		wantState string
	}{
		{"XDG_STATE_HOME", env("XDG_STATE_HOME", "/x/state", "HOME", "/h"), "", "/x/state/sandbox-mcp"},
		{"HOME", env("HOME", "/h"), "", "/h/.local/state/sandbox-mcp"},
		{"empty XDG_STATE_HOME falls back to HOME", env("XDG_STATE_HOME", "", "HOME", "/h"), "", "/h/.local/state/sandbox-mcp"},
		{"~ in state_dir", env("HOME", "/h"), "~/sb", "/h/sb"},
		{"explicit state_dir wins", env("XDG_STATE_HOME", "/x"), "/srv/sb", "/srv/sb"},
		{"unclean state_dir is cleaned", env(), "/srv//sb/../sb2/", "/srv/sb2"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cfg := Config{StateDir: c.stateDir}
			if err := cfg.Validate(c.lookup); err != nil {
				t.Fatal(err)
			}
			if cfg.StateDir != c.wantState {
				t.Errorf("StateDir = %q, want %q", cfg.StateDir, c.wantState)
			}
			if want := filepath.Join(c.wantState, "audit.jsonl"); cfg.Audit.Path != want {
				t.Errorf("Audit.Path = %q, want %q", cfg.Audit.Path, want)
			}
			if cfg.Thread != "default" || cfg.Provider != "local" || cfg.Local.Isolation != "auto" || cfg.LogLevel != "info" {
				t.Errorf("thread %q provider %q isolation %q log level %q, want default local auto info",
					cfg.Thread, cfg.Provider, cfg.Local.Isolation, cfg.LogLevel)
			}
			if cfg.Local.AllowHostBash {
				t.Errorf("allow_host_bash is on by default")
			}
		})
	}
}

func TestValidateAuditPath(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want string }{
		{"-", "-"},
		{"off", "off"},
		{"/var/log/a.jsonl", "/var/log/a.jsonl"},
		{"~/a.jsonl", "/h/a.jsonl"},
	} {
		cfg := Config{StateDir: "/srv/sb", Audit: AuditConfig{Path: c.in}}
		if err := cfg.Validate(env("HOME", "/h")); err != nil {
			t.Errorf("audit %q: %v", c.in, err)
			continue
		}
		if cfg.Audit.Path != c.want {
			t.Errorf("audit %q -> %q, want %q", c.in, cfg.Audit.Path, c.want)
		}
	}
}

// A valid config for Validate to refuse one thing of: its state dir and
// an existing host dir outside it.
type fixture struct {
	root, state, data, other string
}

func newFixture(t *testing.T) fixture {
	t.Helper()
	root := t.TempDir()
	return fixture{
		root:  root,
		state: mkdir(t, filepath.Join(root, "state")),
		data:  mkdir(t, filepath.Join(root, "data")),
		other: mkdir(t, filepath.Join(root, "other")),
	}
}

func TestValidateAccepts(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for _, c := range []struct {
		name string
		edit func(*Config)
	}{
		{"no mounts", func(*Config) {}},
		{"a mount", func(c *Config) {
			c.Mounts = []MountConfig{{HostPath: f.data, ContainerPath: "/mnt/data", ReadOnly: true}}
		}},
		{"two disjoint mounts", func(c *Config) {
			c.Mounts = []MountConfig{{HostPath: f.data, ContainerPath: "/mnt/data"}, {HostPath: f.other, ContainerPath: "/mnt/data2"}}
		}},
		{"a mount next to a reserved prefix, not in it", func(c *Config) {
			c.Mounts = []MountConfig{{HostPath: f.data, ContainerPath: "/mnt/user-data-x"}}
		}},
		{"a mount next to /mnt/skills", func(c *Config) {
			c.Mounts = []MountConfig{{HostPath: f.data, ContainerPath: "/mnt/skillset"}}
		}},
		{"a mount outside /mnt", func(c *Config) {
			c.Mounts = []MountConfig{{HostPath: f.data, ContainerPath: "/data"}}
		}},
		{"skills dir", func(c *Config) { c.SkillsDir = f.data }},
		{"zero limits mean no limit", func(c *Config) {
			c.Limits.Limits = tools.Limits{}
		}},
		{"every provider", func(c *Config) { c.Provider = "kubernetes" }},
		{"isolation none", func(c *Config) { c.Local.Isolation = "none" }},
		{"local limits", func(c *Config) { c.Local.Limits = local.Limits{Pids: 64, Memory: "512m", CPU: 0.5} }},
		{"log level debug", func(c *Config) { c.LogLevel = "debug" }},
		{"log level error", func(c *Config) { c.LogLevel = "error" }},
		{"thread with dots and dashes", func(c *Config) { c.Thread = "a.b-c_d" }},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cfg := Config{StateDir: f.state}
			c.edit(&cfg)
			if err := cfg.Validate(env("HOME", f.root)); err != nil {
				t.Errorf("Validate: %v", err)
			}
		})
	}
}

func TestValidateRefuses(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	file := filepath.Join(f.root, "file")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	inState := mkdir(t, filepath.Join(f.state, "threads", "default"))
	stateLink := filepath.Join(f.root, "state-link")
	if err := os.Symlink(f.state, stateLink); err != nil {
		t.Fatal(err)
	}
	mount := func(host, virtual string) func(*Config) {
		return func(c *Config) { c.Mounts = append(c.Mounts, MountConfig{HostPath: host, ContainerPath: virtual}) }
	}
	both := func(a, b func(*Config)) func(*Config) { return func(c *Config) { a(c); b(c) } }

	for _, c := range []struct {
		name string
		edit func(*Config)
		want []string // substrings of the error
	}{
		{"bad provider", func(c *Config) { c.Provider = "podman" }, []string{"provider", "podman"}},
		{"bad isolation", func(c *Config) { c.Local.Isolation = "gvisor" }, []string{"isolation", "gvisor"}},
		{"negative docker idle", func(c *Config) { c.Docker.IdleTimeout = -time.Second }, []string{"docker.idle_timeout"}},
		{"bad docker prefix", func(c *Config) { c.Docker.ContainerPrefix = "-x" }, []string{"docker.container_prefix"}},
		{"negative kubernetes start", func(c *Config) { c.Kubernetes.StartTimeout = -time.Second }, []string{"kubernetes.start_timeout"}},
		{"bad kubernetes storage", func(c *Config) { c.Kubernetes.Storage.Mode = "nfs" }, []string{"kubernetes.storage.mode", "nfs"}},
		{"bad kubernetes pull policy", func(c *Config) { c.Kubernetes.ImagePullPolicy = "Sometimes" }, []string{"kubernetes.image_pull_policy"}},
		{"bad log level", func(c *Config) { c.LogLevel = "verbose" }, []string{"verbose"}},
		{"bad thread", func(c *Config) { c.Thread = "../x" }, []string{"thread"}},
		{"thread too long", func(c *Config) { c.Thread = strings.Repeat("a", 129) }, []string{"thread"}},
		{"negative bash_output_max_chars", func(c *Config) { c.Limits.BashOutputMaxChars = -1 }, []string{"bash_output_max_chars"}},
		{"negative read_file_output_max_chars", func(c *Config) { c.Limits.ReadFileOutputMaxChars = -5 }, []string{"read_file_output_max_chars"}},
		{"negative ls_output_max_chars", func(c *Config) { c.Limits.LsOutputMaxChars = -1 }, []string{"ls_output_max_chars"}},
		{"negative bash_timeout_max", func(c *Config) { c.Limits.BashTimeoutMax = -time.Second }, []string{"bash_timeout_max"}},
		{"negative grep_max_file_bytes", func(c *Config) { c.Limits.GrepMaxFileBytes = -1 }, []string{"grep_max_file_bytes"}},
		{"negative read_file_max_scan_bytes", func(c *Config) { c.Limits.ReadFileMaxScanBytes = -1 }, []string{"read_file_max_scan_bytes"}},
		{"negative local pids", func(c *Config) { c.Local.Limits.Pids = -1 }, []string{"local.limits.pids"}},
		{"bad local memory", func(c *Config) { c.Local.Limits.Memory = "lots" }, []string{"local.limits.memory", "lots"}},
		{"tiny local memory", func(c *Config) { c.Local.Limits.Memory = "1m" }, []string{"local.limits.memory", "at least 32m"}},
		{"negative local cpu", func(c *Config) { c.Local.Limits.CPU = -2 }, []string{"local.limits.cpu"}},
		{"bad env_inherit", func(c *Config) { c.EnvInherit = []string{"A=B"} }, []string{"env_inherit"}},
		{"empty auth token", func(c *Config) { c.HTTP.AuthTokens = []string{"x", " "} }, []string{"http.auth_tokens[1] is empty"}},

		{"mount at /mnt/user-data", mount(f.data, "/mnt/user-data"), []string{"/mnt/user-data"}},
		{"mount inside /mnt/user-data", mount(f.data, "/mnt/user-data/workspace/x"), []string{"/mnt/user-data"}},
		{"mount at /mnt/skills", mount(f.data, "/mnt/skills"), []string{"/mnt/skills"}},
		{"mount inside /mnt/skills", mount(f.data, "/mnt/skills/mine"), []string{"/mnt/skills"}},
		{"mount at /mnt, parent of the reserved", mount(f.data, "/mnt"), []string{"/mnt"}},
		{"two mounts at one path", both(mount(f.data, "/mnt/data"), mount(f.other, "/mnt/data")), []string{"/mnt/data"}},
		{"a mount inside another", both(mount(f.data, "/mnt/data"), mount(f.other, "/mnt/data/sub")), []string{"/mnt/data/sub", "/mnt/data"}},
		{"a mount holding another", both(mount(f.data, "/mnt/data/sub"), mount(f.other, "/mnt/data")), []string{"/mnt/data"}},
		{"relative container path", mount(f.data, "data"), []string{"data"}},
		{"container path /", mount(f.data, "/"), []string{"container_path"}},
		{"unclean container path", mount(f.data, "/mnt/data/../user-data"), []string{"container_path"}},
		{"empty container path", mount(f.data, ""), []string{"container_path"}},
		{"empty host path", mount("", "/mnt/data"), []string{"host_path"}},
		{"host path does not exist", mount(filepath.Join(f.root, "nope"), "/mnt/data"), []string{"nope"}},
		{"host path is a file", mount(file, "/mnt/data"), []string{"not a directory"}},
		{"host path is the state dir", mount(f.state, "/mnt/data"), []string{"state dir"}},
		{"host path inside the state dir", mount(inState, "/mnt/data"), []string{"state dir"}},
		{"host path holds the state dir", mount(f.root, "/mnt/data"), []string{"state dir"}},
		{"host path is / (holds everything)", mount("/", "/mnt/data"), []string{"state dir"}},
		{"host path is a symlink to the state dir", mount(stateLink, "/mnt/data"), []string{"state dir"}},
		{"host path with .. into the state dir", mount(f.data+"/../state", "/mnt/data"), []string{"state dir"}},
		{"skills dir inside the state dir", func(c *Config) { c.SkillsDir = inState }, []string{"skills_dir", "state dir"}},
		{"skills dir holds the state dir", func(c *Config) { c.SkillsDir = f.root }, []string{"skills_dir", "state dir"}},
		{"skills dir does not exist", func(c *Config) { c.SkillsDir = filepath.Join(f.root, "nope") }, []string{"skills_dir", "nope"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cfg := Config{StateDir: f.state}
			c.edit(&cfg)
			err := cfg.Validate(env("HOME", f.root))
			if err == nil {
				t.Fatalf("Validate accepted %+v", cfg)
			}
			msg := err.Error()
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not name %q", msg, w)
				}
			}
			if strings.Contains(msg, "\n") {
				t.Errorf("error is more than one line: %q", msg)
			}
		})
	}
}

// The state dir need not exist yet (first run); a mount must not contain
// the place it will be created, even when its path runs through a symlink.
func TestValidateRefusesMountHoldingFutureStateDir(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	real := mkdir(t, filepath.Join(root, "real"))
	link := filepath.Join(root, "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, state, host string }{
		{"plain", filepath.Join(real, "state"), real},
		{"state dir through a symlink, mount by its real path", filepath.Join(link, "state"), real},
		{"state dir by its real path, mount through a symlink", filepath.Join(real, "state"), link},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cfg := Config{StateDir: c.state, Mounts: []MountConfig{{HostPath: c.host, ContainerPath: "/mnt/data"}}}
			err := cfg.Validate(env())
			if err == nil || !strings.Contains(err.Error(), "state dir") {
				t.Errorf("state dir %s (not yet created), mount of %s: err = %v, want it refused as holding the state dir", c.state, c.host, err)
			}
		})
	}
}

func TestParseMount(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   string
		want MountConfig
	}{
		{"/srv/data:/mnt/data", MountConfig{HostPath: "/srv/data", ContainerPath: "/mnt/data"}},
		{"/srv/data:/mnt/data:ro", MountConfig{HostPath: "/srv/data", ContainerPath: "/mnt/data", ReadOnly: true}},
		{"/srv/data:/mnt/data:rw", MountConfig{HostPath: "/srv/data", ContainerPath: "/mnt/data"}},
		{"./rel:/mnt/rel", MountConfig{HostPath: "./rel", ContainerPath: "/mnt/rel"}},
	} {
		got, err := parseMount(c.in)
		if err != nil || got != c.want {
			t.Errorf("parseMount(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
	for _, in := range []string{
		"",
		"/srv/data",
		"/srv/data:",
		":/mnt/data",
		":",
		"/srv/data:/mnt/data:",
		"/srv/data:/mnt/data:RO",
		"/srv/data:/mnt/data:readonly",
		"/srv/data:/mnt/data:ro:x",
		"/a:/b:/c",
	} {
		if got, err := parseMount(in); err == nil {
			t.Errorf("parseMount(%q) = %+v, want an error", in, got)
		} else if !strings.Contains(err.Error(), "--mount") {
			t.Errorf("parseMount(%q) error %q does not name --mount", in, err)
		}
	}
}

// run with a bad configuration prints one line to stderr and returns 2,
// and never starts serving.
func TestRunBadConfig(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	state := filepath.Join(root, "state")
	data := mkdir(t, filepath.Join(root, "data"))
	badYAML := filepath.Join(root, "bad.yaml")
	if err := os.WriteFile(badYAML, []byte("bogus_key: 1\nother: 2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		args []string
		want string // a substring of the line
	}{
		{"bad provider", []string{"--provider", "podman"}, "podman"},
		{"bad thread", []string{"--thread", "../x"}, "thread"},
		{"bad isolation", []string{"--isolation", "gvisor"}, "gvisor"},
		{"bad log level", []string{"--log-level", "loud"}, "loud"},
		{"bad --mount form", []string{"--mount", "/srv/data"}, "--mount"},
		{"mount over reserved", []string{"--mount", data + ":/mnt/user-data"}, "/mnt/user-data"},
		{"mount at /mnt", []string{"--mount", data + ":/mnt:ro"}, "/mnt"},
		{"mount missing host", []string{"--mount", filepath.Join(root, "nope") + ":/mnt/data"}, "nope"},
		{"mount holding the state dir", []string{"--mount", root + ":/mnt/data"}, "state dir"},
		{"overlapping mounts", []string{"--mount", data + ":/mnt/data", "--mount", data + ":/mnt/data/x"}, "/mnt/data"},
		{"unknown config key", []string{"--config", badYAML}, "bogus_key"},
		{"missing config file", []string{"--config", filepath.Join(root, "missing.yaml")}, "missing.yaml"},
		{"unknown flag", []string{"--bogus"}, "bogus"},
		{"flag without value", []string{"--thread"}, "thread"},
		{"extra argument", []string{"serve"}, "serve"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var stdin, stdout, stderr bytes.Buffer
			args := append([]string{"--state-dir", state}, c.args...)
			code := run(args, &stdin, &stdout, &stderr, env("HOME", root))
			if code != 2 {
				t.Errorf("run(%q) = %d, want 2", args, code)
			}
			line := stderr.String()
			if !strings.HasSuffix(line, "\n") || strings.Count(line, "\n") != 1 {
				t.Errorf("run(%q) stderr = %q, want exactly one line", args, line)
			}
			if !strings.Contains(line, c.want) {
				t.Errorf("run(%q) stderr = %q, want it to name %q", args, line, c.want)
			}
			if stdout.Len() != 0 {
				t.Errorf("run(%q) wrote to stdout: %q", args, stdout.String())
			}
			if _, err := os.Stat(state); err == nil {
				t.Errorf("run(%q) created the state dir before refusing", args)
			}
		})
	}
}

func TestRunVersionHelp(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	if code := run([]string{"--version"}, strings.NewReader(""), &stdout, &stderr, env()); code != 0 {
		t.Errorf("--version = %d, want 0", code)
	}
	if got := stdout.String(); !strings.HasPrefix(got, "sandbox-mcp ") || strings.Count(got, "\n") != 1 || stderr.Len() != 0 {
		t.Errorf("--version: stdout %q stderr %q, want one line \"sandbox-mcp <version>\"", got, stderr.String())
	}
	stdout.Reset()
	if code := run([]string{"--help"}, strings.NewReader(""), &stdout, &stderr, env()); code != 0 {
		t.Errorf("--help = %d, want 0", code)
	}
	if !strings.Contains(stdout.String(), "Usage") || !strings.Contains(stdout.String(), "-allow-host-bash") {
		t.Errorf("--help stdout = %q, want the usage with the flags", stdout.String())
	}
}

// Flags override the config file.
func TestRunFlagsOverrideConfig(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	file := filepath.Join(root, "c.yaml")
	// The config's provider is bad; the flag replaces it, so only the
	// config's other bad value is left to refuse.
	if err := os.WriteFile(file, []byte("provider: podman\nlog_level: loud\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	code := run([]string{"--config", file, "--provider", "local", "--state-dir", filepath.Join(root, "s")}, strings.NewReader(""), &stdout, &stderr, env("HOME", root))
	if code != 2 || !strings.Contains(stderr.String(), "loud") || strings.Contains(stderr.String(), "podman") {
		t.Errorf("run = %d, stderr %q; want 2 and the config's log level named, not its overridden provider", code, stderr.String())
	}
}

// Every limit of the config reaches the tools.
func TestToolLimitsFromConfig(t *testing.T) {
	t.Parallel()
	c, err := loadConfig(writeConfig(t, "limits: {bash_output_max_chars: 1, read_file_output_max_chars: 2, ls_output_max_chars: 3, bash_timeout_max: 4, grep_max_file_bytes: 5, read_file_max_scan_bytes: 6}\n"), env())
	if err != nil {
		t.Fatal(err)
	}
	l := c.Limits.Limits
	if l.BashOutputMaxChars != 1 || l.ReadFileOutputMaxChars != 2 || l.LsOutputMaxChars != 3 || l.BashTimeoutMax != 4*time.Second || l.GrepMaxFileBytes != 5 || l.ReadFileMaxScanBytes != 6 {
		t.Errorf("toolLimits = %+v", l)
	}
	// A key left out keeps its default; 0 is no limit.
	c, err = loadConfig(writeConfig(t, "limits: {bash_output_max_chars: 0, jobs_max: 3}\n"), env())
	if err != nil {
		t.Fatal(err)
	}
	want := tools.DefaultLimits()
	want.BashOutputMaxChars, want.JobsMax = 0, 3
	if c.Limits.Limits != want {
		t.Errorf("limits %+v, want %+v", c.Limits.Limits, want)
	}
	if newConfig().Limits.Limits != tools.DefaultLimits() {
		t.Errorf("without a config file: %+v", newConfig().Limits.Limits)
	}
}

// http.stateless is on unless set false.
func TestHTTPStatelessDefault(t *testing.T) {
	t.Parallel()
	for yaml, want := range map[string]bool{
		"":                          true,
		"http:\n  addr: x\n":        true,
		"http:\n  stateless: true":  true,
		"http:\n  stateless: false": false,
	} {
		c, err := loadConfig(writeConfig(t, yaml), env())
		if err != nil {
			t.Fatalf("%q: %v", yaml, err)
		}
		if err := c.HTTP.Validate(); err != nil {
			t.Fatalf("%q: %v", yaml, err)
		}
		if got := *c.HTTP.Stateless; got != want {
			t.Errorf("%q: stateless %v, want %v", yaml, got, want)
		}
	}
}

// local.isolation container (the release image's SANDBOX_MCP_ISOLATION)
// is taken where something shows a container, and refused on a host,
// where it would be --allow-host-bash under another name.
func TestIsolationContainer(t *testing.T) {
	t.Parallel()
	c := Config{StateDir: t.TempDir()}
	if err := c.Validate(env("SANDBOX_MCP_ISOLATION", "container", "container", "docker")); err != nil || c.Local.Isolation != "container" {
		t.Fatalf("SANDBOX_MCP_ISOLATION=container in a container: %v, isolation %q", err, c.Local.Isolation)
	}
	c = Config{StateDir: t.TempDir(), Local: local.Config{Isolation: "bwrap"}}
	if err := c.Validate(env("SANDBOX_MCP_ISOLATION", "container")); err != nil || c.Local.Isolation != "bwrap" {
		t.Errorf("the config's isolation gave way to the variable: %v, %q", err, c.Local.Isolation)
	}
	none := func(string) bool { return false }
	if s, ok := containerSignOf(env(), none); ok {
		t.Errorf("a host without a sign of a container: %q", s)
	}
	for _, c := range []struct {
		lookup func(string) (string, bool)
		exists func(string) bool
		want   string
	}{
		{env(), func(f string) bool { return f == "/.dockerenv" }, "/.dockerenv"},
		{env(), func(f string) bool { return f == "/run/.containerenv" }, "/run/.containerenv"},
		{env("container", "podman"), none, "$container"},
		{env("KUBERNETES_SERVICE_HOST", "10.0.0.1"), none, "$KUBERNETES_SERVICE_HOST"},
	} {
		if s, ok := containerSignOf(c.lookup, c.exists); !ok || s != c.want {
			t.Errorf("sign %q %v, want %q", s, ok, c.want)
		}
	}
}

// An extension (manifest.json) passes every setting as --flag=VALUE: one
// left blank arrives empty, or as the unfilled "${user_config.KEY}" that
// MCPB clients keep when a setting has no value; either way it is not
// given, and the config file's setting stands.
func TestRunExtensionArgsLeftBlank(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	file := filepath.Join(root, "c.yaml")
	os.WriteFile(file, []byte("provider: podman\n"), 0o600)
	var stdout, stderr bytes.Buffer
	args := []string{"--config=" + file, "--provider=", "--image=${user_config.image}", "--skills-dir=${user_config.skills_dir}",
		"--isolation=", "--state-dir", filepath.Join(root, "s")}
	code := run(args, strings.NewReader(""), &stdout, &stderr, env("HOME", root))
	if code != 2 || !strings.Contains(stderr.String(), "podman") {
		t.Errorf("run = %d, stderr %q; want 2 and the config's provider named (the blank flags leave it)", code, stderr.String())
	}
	if got := withoutUnfilled([]string{"--thread=${user_config.thread}", "--thread", "${user_config.thread}", "--image=x"}); !slices.Equal(got, []string{"--thread", "${user_config.thread}", "--image=x"}) {
		t.Errorf("withoutUnfilled: %q", got)
	}
}
