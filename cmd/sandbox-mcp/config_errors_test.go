package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// configErrorCases: a config, its environment, and the one line that
// refuses it (after "config FILE "): the line of the file, the key's path,
// what it wants.
var configErrorCases = []struct {
	name, yaml string
	env        []string
	want       string
}{
	{"unknown top-level key", "stat_dir: /x\n", nil,
		`line 1: unknown key "stat_dir" (did you mean "state_dir"?)`},
	{"unknown nested key", "provider: docker\ndocker:\n  imagee: x\n", nil,
		`line 3: unknown key "docker.imagee" (did you mean "docker.image"?)`},
	{"unknown key, nothing near", "docker:\n  colour: red\n", nil,
		`line 2: unknown key "docker.colour"`},
	{"unknown mount key", "mounts:\n  - {host_path: /tmp, container_path: /mnt/x, readonly: true}\n", nil,
		`line 2: unknown key "mounts[0].readonly" (did you mean "mounts[0].read_only"?)`},
	{"not an integer", "limits: {bash_output_max_chars: lots}\n", nil,
		`line 1: limits.bash_output_max_chars: want an integer, got "lots"`},
	{"not a bool", "local:\n  allow_host_bash: maybe\n", nil,
		`line 2: local.allow_host_bash: want true or false, got "maybe"`},
	{"unknown local limit", "local:\n  limits: {pid: 64}\n", nil,
		`line 2: unknown key "local.limits.pid" (did you mean "local.limits.pids"?)`},
	{"local limit not an integer", "local: {limits: {pids: many}}\n", nil,
		`line 1: local.limits.pids: want an integer, got "many"`},
	{"not a number", "docker: {cpus: many}\n", nil,
		`line 1: docker.cpus: want a number, got "many"`},
	{"not a time", "docker: {idle_timeout: soon}\n", nil,
		`line 1: docker.idle_timeout: want seconds (like 600) or a duration (like 10m), got "soon"`},
	{"a time of the wrong type", "docker: {idle_timeout: 1.5}\n", nil,
		`line 1: docker.idle_timeout: want seconds (like 600) or a duration (like 10m), got "1.5"`},
	{"not a list", "env_inherit: LANG\n", nil,
		`line 1: env_inherit: want a list of strings, got "LANG"`},
	{"not a mapping", "docker: x\n", nil,
		`line 1: docker: want a mapping, got "x"`},
	{"a list for a mapping", "docker: {environment: [a]}\n", nil,
		`line 1: docker.environment: want a mapping of strings, got a list`},
	{"a mapping for a string", "provider: {a: b}\n", nil,
		`line 1: provider: want a string, got a mapping`},
	{"set twice", "provider: local\nprovider: docker\n", nil,
		`line 2: provider is set twice (first on line 1)`},
	{"every problem at once", "aaa: 1\nlimits: {ls_output_max_chars: x}\n", nil,
		`line 1: unknown key "aaa"; line 2: limits.ls_output_max_chars: want an integer, got "x"`},
	{"a variable of the wrong type", "limits:\n  bash_output_max_chars: ${T}\n", []string{"T", "abc"},
		`line 2: limits.bash_output_max_chars: want an integer, got "abc" (from ${T})`},
	{"a time of the wrong kind", "limits:\n  bash_timeout_max: ${T}\n", []string{"T", "abc"},
		`line 2: limits.bash_timeout_max: want seconds (like 600) or a duration (like 10m), got "abc" (from ${T})`},
	// SPEC §10: an empty token stops start-up, never turns auth off.
	{"README's token, variable unset", "http: {addr: 127.0.0.1:8080, auth_tokens: [${SANDBOX_MCP_AUTH_TOKEN}]}\n", nil,
		`line 1: http.auth_tokens[0]: ${SANDBOX_MCP_AUTH_TOKEN} is not set (an empty token would turn auth off)`},
	{"token variable set but empty", "http:\n  auth_tokens:\n    - good\n    - ${TOK}\n", []string{"TOK", ""},
		`line 4: http.auth_tokens[1] is empty (${TOK} is set but empty): an empty token would turn auth off`},
	{"token with an empty default", "http: {auth_tokens: [\"${TOK:-}\"]}\n", nil,
		`line 1: http.auth_tokens[0] is empty: an empty token would turn auth off`},
	{"empty token", "http: {auth_tokens: [\"\", x]}\n", nil,
		`line 1: http.auth_tokens[0] is empty: an empty token would turn auth off`},
	{"blank token", "http: {auth_tokens: [\"  \"]}\n", nil,
		`line 1: http.auth_tokens[0] is empty: an empty token would turn auth off`},
	{"not yaml", "provider: [local\n", nil,
		`line 1: did not find expected ',' or ']'`},
	// yaml.v3 gives its parser's errors the line before (#25 item 6).
	{"not yaml, on line 3", "provider: local\nstate_dir: /x\nfoo: [1, 2\n", nil,
		`line 3: did not find expected ',' or ']'`},
	{"not yaml, a flow mapping on line 2", "# c\ndocker: {image: x\n\n", nil,
		`line 2: did not find expected ',' or '}'`},
	{"a scanner error keeps its line", "provider: local\nlog_level: info\n  bad: indent\n", nil,
		`line 3: mapping values are not allowed in this context`},
}

// Every fatal start-up error of a config file's value is one line naming
// the file, the line, the key and what is wanted (#25 item 6).
func TestE2EConfigValueErrorsNameFileLineAndKey(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, yaml, want string }{
		{"provider", "provider: dockr\n", `line 1: provider "dockr": want local, docker or kubernetes`},
		{"log level", "# logs\nlog_level: verbose\n", `line 2: log_level "verbose": want debug, info, warn or error`},
		{"negative limit", "limits:\n  jobs_max: -1\n", `line 2: limits.jobs_max -1: want 0 (no limit) or more`},
		{"docker memory", "docker:\n  memory: lots\n", `line 2: docker.memory "lots": want a size like 512m or 1g`},
		{"docker warm", "docker:\n  warm: -1\n", `line 2: docker.warm -1: want 0 (the default) or more`},
		{"docker warm too many", "docker:\n  warm: 1000\n", `line 2: docker.warm 1000: at most 64`},
		{"kubernetes warm pool", "kubernetes:\n  warm_pool: agent_sandbox\n", `line 2: kubernetes.warm_pool "agent_sandbox": want auto, pods or agent-sandbox`},
		{"local memory", "local:\n  limits: {memory: lots}\n", `line 2: local.limits.memory "lots": want a size like 512m or 4g, at least 32m`},
		{"missing mount", "mounts:\n  - {host_path: /nonexistent-sandbox-mcp, container_path: /mnt/x}\n", `line 2: mounts[0].host_path /nonexistent-sandbox-mcp: no such file or directory`},
		{"missing skills dir", "\nskills_dir: /nonexistent-sandbox-mcp\n", `line 2: skills_dir /nonexistent-sandbox-mcp: no such file or directory`},
		{"negative http limit", "http:\n  max_connections: -5\n", `line 2: http.max_connections -5: want 0 (the default) or more`},
		{"bad isolation", "local: {isolation: box}\n", `line 1: local.isolation "box": want auto, bwrap, none or container`},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			file := writeConfig(t, c.yaml)
			_, stderr, code := runBinary(t, "--config", file, "--state-dir", filepath.Join(t.TempDir(), "state"))
			want := "sandbox-mcp: config " + file + " " + c.want + "\n"
			if code != 2 || stderr != want {
				t.Errorf("exit %d, stderr %q\nwant exit 2, %q", code, stderr, want)
			}
		})
	}
	// A value a flag gave is the flag's, even where the file sets the key.
	file := writeConfig(t, "log_level: info\n")
	_, stderr, code := runBinary(t, "--config", file, "--log-level", "loud", "--state-dir", filepath.Join(t.TempDir(), "state"))
	if want := "sandbox-mcp: --log-level \"loud\": want debug, info, warn or error\n"; code != 2 || stderr != want {
		t.Errorf("a bad --log-level: exit %d, stderr %q\nwant exit 2, %q", code, stderr, want)
	}
}

func TestLoadConfigErrorsNameTheKey(t *testing.T) {
	t.Parallel()
	for _, c := range configErrorCases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			file := writeConfig(t, c.yaml)
			_, err := loadConfig(file, env(c.env...))
			want := "config " + file + " " + c.want
			if err == nil || err.Error() != want {
				t.Errorf("loadConfig(%q) = %v\nwant %s", c.yaml, err, want)
			}
		})
	}
}

func TestLoadConfigVariableDefaults(t *testing.T) {
	t.Parallel()
	c, err := loadConfig(writeConfig(t, "docker: {image: \"${NOPE:-img:1}\", network: \"${NET:-none}\", runtime: \"${EMPTY:-runc}\"}\n"), env("NET", "bridge", "EMPTY", ""))
	if err != nil {
		t.Fatal(err)
	}
	if c.Docker.Image != "img:1" || c.Docker.Network != "bridge" || c.Docker.Runtime != "runc" {
		t.Errorf("image %q network %q runtime %q, want img:1 (default) bridge (set) runc (empty: default)", c.Docker.Image, c.Docker.Network, c.Docker.Runtime)
	}
}

// An unset variable outside the tokens is empty, as in docker compose, and
// named in a warning: SPEC's sample config (environment: {API_KEY:
// ${MY_API_KEY}}) starts without MY_API_KEY.
func TestLoadConfigUnsetVariableWarns(t *testing.T) {
	t.Parallel()
	file := writeConfig(t, "docker:\n  environment: {API_KEY: ${MY_API_KEY}}\n")
	c, err := loadConfig(file, env())
	if err != nil {
		t.Fatal(err)
	}
	if c.Docker.Environment["API_KEY"] != "" {
		t.Errorf("API_KEY = %q, want empty", c.Docker.Environment["API_KEY"])
	}
	want := "config " + file + " line 2: docker.environment.API_KEY: ${MY_API_KEY} is not set: using an empty value (write ${MY_API_KEY:-} to mean empty)"
	if len(c.Warnings) != 1 || c.Warnings[0] != want {
		t.Errorf("warnings = %q, want [%q]", c.Warnings, want)
	}
}

// runEnv runs the binary to completion with no stdin and exactly env
// (HOME, a temp dir, and PATH added when env has none).
func runEnv(t *testing.T, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary(t), args...)
	cmd.Env = env
	if !slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "PATH=") }) {
		cmd.Env = append([]string{"HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH")}, env...)
	}
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		t.Fatalf("run %v: %v", args, err)
	}
	return o.String(), e.String(), code
}

// The real binary refuses a bad config with exit 2 and exactly one line
// on stderr, naming the file, the line and the key; every other start-up
// failure the same way.
func TestE2EStartupErrors(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() }) // after the parallel subtests
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o600)

	type tc struct {
		name string
		args []string
		env  []string
		want string // the whole line, without "sandbox-mcp: " and the newline
	}
	var cases []tc
	for _, c := range configErrorCases {
		cfg := writeConfig(t, c.yaml)
		var env []string
		for i := 0; i+1 < len(c.env); i += 2 {
			env = append(env, c.env[i]+"="+c.env[i+1])
		}
		cases = append(cases, tc{"config: " + c.name, []string{"--config", cfg}, env, "config " + cfg + " " + c.want})
	}
	cases = append(cases,
		tc{"empty --auth-token", []string{"--auth-token", ""}, nil,
			"--auth-token is empty: an empty token would turn auth off"},
		tc{"SANDBOX_MCP_AUTH_TOKEN set but empty", []string{"--http", "127.0.0.1:0"}, []string{"SANDBOX_MCP_AUTH_TOKEN="},
			"SANDBOX_MCP_AUTH_TOKEN is set but empty: give it a token or unset it (an empty token would turn auth off)"},
		tc{"state dir is a file", []string{"--state-dir", file}, nil,
			"state_dir: mkdir " + file + ": not a directory"},
		tc{"audit log cannot be made", []string{"--audit-log", filepath.Join(file, "audit.jsonl")}, nil,
			"audit.path: audit log: mkdir " + file + ": not a directory"},
		tc{"address in use", []string{"--http", ln.Addr().String()}, nil,
			"--http: listen tcp " + ln.Addr().String() + ": bind: address already in use"},
	)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			args := c.args
			if !strings.Contains(strings.Join(args, " "), "--state-dir") {
				args = append([]string{"--state-dir", filepath.Join(t.TempDir(), "state")}, args...)
			}
			stdout, stderr, code := runEnv(t, c.env, args...)
			// Log lines of what started before the failure may come first
			// (the provider's "bash runs inside bubblewrap"); the error is
			// the last line, whole.
			want := "sandbox-mcp: " + c.want + "\n"
			if code != 2 || !(stderr == want || strings.HasSuffix(stderr, "\n"+want)) || stdout != "" {
				t.Errorf("sandbox-mcp %q = exit %d, stderr\n%q\nwant exit 2, stderr ending in\n%q", args, code, stderr, want)
			}
		})
	}
}

// TestLoadConfigTimes: a provider's times are seconds when plain numbers
// (SPEC §8), Go durations when strings; a variable holding seconds works.
func TestLoadConfigTimes(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		yaml string
		env  []string
		want time.Duration
	}{
		{"docker: {idle_timeout: 600}\n", nil, 600 * time.Second},
		{"docker: {idle_timeout: 0}\n", nil, 0},
		{"docker: {idle_timeout: 10m}\n", nil, 10 * time.Minute},
		{"docker: {idle_timeout: \"90s\"}\n", nil, 90 * time.Second},
		{"docker: {idle_timeout: ${IDLE}}\n", []string{"IDLE", "30"}, 30 * time.Second},
		{"kubernetes: {start_timeout: 2m, idle_timeout: 60}\n", nil, 2 * time.Minute},
	} {
		cfg, err := loadConfig(writeConfig(t, c.yaml), env(c.env...))
		if err != nil {
			t.Errorf("%q: %v", c.yaml, err)
			continue
		}
		got := cfg.Docker.IdleTimeout
		if strings.HasPrefix(c.yaml, "kubernetes") {
			got = cfg.Kubernetes.StartTimeout
			if cfg.Kubernetes.IdleTimeout != time.Minute {
				t.Errorf("%q: kubernetes idle_timeout %v", c.yaml, cfg.Kubernetes.IdleTimeout)
			}
		}
		if got != c.want {
			t.Errorf("%q: %v, want %v", c.yaml, got, c.want)
		}
	}
}
