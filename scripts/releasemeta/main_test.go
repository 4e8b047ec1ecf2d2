package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// shape is what a spec says of one JSON object: the keys it requires, the
// keys it allows (nil: any), and the shapes of its children.
type shape struct {
	required []string
	allowed  []string
}

// The field lists below are taken from the MCP Registry's server.json
// schema (modelcontextprotocol/registry, docs/reference/server-json,
// 2025-12-11); release-check.sh also validates the real server.json
// against the registry's own schema file (releasemeta check). The MCPB
// manifest's rules are mcpbschema.go's.
var (
	serverTop = shape{
		required: []string{"name", "description", "version"},
		allowed: []string{"$schema", "_meta", "description", "icons", "name", "packages", "remotes",
			"repository", "title", "version", "websiteUrl"},
	}
	serverRepo    = shape{required: []string{"url", "source"}, allowed: []string{"id", "source", "subfolder", "url"}}
	serverPackage = shape{required: []string{"registryType", "identifier", "transport"},
		allowed: []string{"environmentVariables", "fileSha256", "identifier", "packageArguments", "registryBaseUrl",
			"registryType", "runtimeArguments", "runtimeHint", "transport", "version"}}
	serverNamedArg      = shape{required: []string{"type", "name"}}
	serverRegistryTypes = []string{"npm", "pypi", "nuget", "oci", "mcpb"} // the official registry's
	serverTransports    = []string{"stdio", "streamable-http", "sse"}
	serverNameRe        = regexp.MustCompile(`^[a-zA-Z0-9.-]+/[a-zA-Z0-9._-]+$`)
	sha256Re            = regexp.MustCompile(`^[a-f0-9]{64}$`)
)

// check reports the keys obj lacks or should not have.
func (s shape) check(t reporter, where string, obj map[string]any) {
	t.Helper()
	for _, k := range s.required {
		if _, ok := obj[k]; !ok {
			t.Errorf("%s: required key %q missing", where, k)
		}
	}
	if s.allowed == nil {
		return
	}
	for k := range obj {
		if !slices.Contains(s.allowed, k) {
			t.Errorf("%s: key %q is not in the spec", where, k)
		}
	}
}

func object(t reporter, where string, v any) map[string]any {
	t.Helper()
	m, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("%s: want an object, got %T", where, v)
	}
	return m
}

func decode(t reporter, v any) map[string]any {
	t.Helper()
	var buf bytes.Buffer
	if err := writeJSON(&buf, v); err != nil {
		t.Fatalf("%v", err)
	}
	var m map[string]any
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
		t.Fatalf("%v", err)
	}
	return m
}

// The manifest keeps the rules of the MCPB version it declares (0.4): one
// manifest for every platform, each with its command, every tool listed,
// the settings a user needs (the image and a config file for docker) and
// an icon (issue #25 items 3 and 4).
func TestManifestMatchesMCPBSpec(t *testing.T) {
	t.Parallel()
	m := manifest("1.2.3")
	if errs := validateManifest(decode(t, m)); len(errs) > 0 {
		t.Errorf("manifest: %s", strings.Join(errs, "\n"))
	}
	if len(m.Tools) < 7 {
		t.Errorf("%d tools listed, want every tool", len(m.Tools))
	}
	for _, p := range []string{"darwin", "win32", "linux"} {
		if !slices.Contains(m.Compatibility.Platforms, p) {
			t.Errorf("platforms %v: no %s", m.Compatibility.Platforms, p)
		}
	}
	for _, k := range []string{"thread", "skills_dir", "provider", "image", "config_file", "allow_host_bash"} {
		if _, ok := m.UserConfig[k]; !ok {
			t.Errorf("user_config has no %q", k)
		}
	}
	if m.Icon != "icon.png" {
		t.Errorf("icon %q", m.Icon)
	}
	if o := m.Server.MCPConfig.PlatformOverrides; o["win32"].Command != "${__dirname}/server/sandbox-mcp.exe" || o["linux"].Command != "/bin/sh" {
		t.Errorf("platform_overrides %+v", o)
	}
}

// The rules refuse what the spec refuses, naming where.
func TestManifestRulesRefuse(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		edit func(m map[string]any)
		want string
	}{
		{"no author", func(m map[string]any) { delete(m, "author") }, `manifest: "author" is required`},
		{"an unknown key", func(m map[string]any) { m["color"] = "red" }, `manifest: "color" is not a field`},
		{"another version", func(m map[string]any) { m["manifest_version"] = "0.9" }, `manifest_version "0.9": no rules`},
		{"a platform of no OS", func(m map[string]any) {
			m["compatibility"].(map[string]any)["platforms"] = []any{"darwin", "macos"}
		}, `manifest.compatibility.platforms[1]: "macos": want one of darwin, win32, linux`},
		{"a user option of a bad type", func(m map[string]any) {
			m["user_config"].(map[string]any)["image"].(map[string]any)["type"] = "image"
		}, `manifest.user_config.image.type: "image": want one of`},
		{"an override with an unknown key", func(m map[string]any) {
			m["server"].(map[string]any)["mcp_config"].(map[string]any)["platform_overrides"].(map[string]any)["win32"].(map[string]any)["cwd"] = "x"
		}, `manifest.server.mcp_config.platform_overrides.win32: "cwd" is not a field`},
		{"a server of no type", func(m map[string]any) { m["server"].(map[string]any)["type"] = "go" }, `manifest.server: "go": want one of`},
		{"a bad icon size", func(m map[string]any) { m["icons"] = []any{map[string]any{"src": "i.png", "size": "big"}} }, `manifest.icons[0].size: "big" does not match`},
		{"a homepage that is no URI", func(m map[string]any) { m["homepage"] = "sandbox" }, `manifest.homepage: "sandbox" is not a URI`},
		{"an object default", func(m map[string]any) {
			m["user_config"].(map[string]any)["thread"].(map[string]any)["default"] = map[string]any{}
		}, `manifest.user_config.thread.default: want a string`},
	} {
		m := decode(t, manifest("1"))
		c.edit(m)
		errs := strings.Join(validateManifest(m), "\n")
		if !strings.Contains(errs, c.want) {
			t.Errorf("%s: %q, want %q", c.name, errs, c.want)
		}
	}
}

// validateServer checks a server.json against the registry's fields.
func validateServer(t reporter, s map[string]any) {
	t.Helper()
	serverTop.check(t, "server.json", s)
	name, _ := s["name"].(string)
	if !serverNameRe.MatchString(name) || len(name) > 200 {
		t.Errorf("name %q does not match %s", name, serverNameRe)
	}
	if d, _ := s["description"].(string); len(d) == 0 || len(d) > 100 {
		t.Errorf("description is %d characters, want 1 to 100", len(d))
	}
	serverRepo.check(t, "repository", object(t, "repository", s["repository"]))
	pkgs, _ := s["packages"].([]any)
	for i, p := range pkgs {
		pk := object(t, "packages[]", p)
		where := fmt.Sprintf("packages[%d]", i)
		serverPackage.check(t, where, pk)
		rt, _ := pk["registryType"].(string)
		if !slices.Contains(serverRegistryTypes, rt) {
			t.Errorf("%s.registryType %q: want one of %v", where, rt, serverRegistryTypes)
		}
		if rt == "mcpb" && !sha256Re.MatchString(pk["fileSha256"].(string)) {
			t.Errorf("%s: an mcpb package needs fileSha256", where)
		}
		if rt == "oci" && !strings.Contains(pk["identifier"].(string), ":") {
			t.Errorf("%s: an oci identifier needs a tag or digest", where)
		}
		tr := object(t, where+".transport", pk["transport"])
		if !slices.Contains(serverTransports, tr["type"].(string)) {
			t.Errorf("%s.transport.type %v", where, tr["type"])
		}
		for _, key := range []string{"runtimeArguments", "packageArguments"} {
			args, _ := pk[key].([]any)
			for _, a := range args {
				arg := object(t, key, a)
				if arg["type"] == "named" {
					serverNamedArg.check(t, where+"."+key, arg)
				} else if _, ok := arg["value"]; !ok && arg["valueHint"] == nil {
					t.Errorf("%s.%s: a positional argument needs value or valueHint", where, key)
				}
			}
			if len(args) > 0 && key == "runtimeArguments" && pk["runtimeHint"] == nil {
				t.Errorf("%s: runtimeArguments without runtimeHint", where)
			}
		}
	}
}

func TestServerJSONMatchesRegistrySpec(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	b := filepath.Join(dir, "sandbox-mcp_1.2.3.mcpb")
	os.WriteFile(b, []byte("bundle"), 0o644)
	s, err := server("1.2.3", "ghcr.io/sandbox-mcp/sandbox-mcp:1.2.3", "https://example.com/dl/", []string{b})
	if err != nil {
		t.Fatal(err)
	}
	m := decode(t, s)
	validateServer(t, m)
	pkgs := m["packages"].([]any)
	if len(pkgs) != 2 {
		t.Fatalf("%d packages, want the image and the bundle", len(pkgs))
	}
	last := pkgs[1].(map[string]any)
	if last["identifier"] != "https://example.com/dl/sandbox-mcp_1.2.3.mcpb" {
		t.Errorf("identifier %v", last["identifier"])
	}
	if want, _ := fileSHA256(b); last["fileSha256"] != want {
		t.Errorf("fileSha256 %v, want %s", last["fileSha256"], want)
	}
	if _, err := server("1.2.3", "img:1", "https://x", []string{filepath.Join(dir, "other.zip")}); err == nil {
		t.Error("a file not named like the bundle was taken")
	}
	// Per-platform bundles: server.json has no field to tell them apart.
	var six []string
	for _, p := range []string{"darwin_arm64", "windows_amd64"} {
		f := filepath.Join(dir, "sandbox-mcp_1.2.3_"+p+".mcpb")
		os.WriteFile(f, []byte(p), 0o644)
		six = append(six, f)
	}
	if _, err := server("1.2.3", "img:1", "https://x", six); err == nil {
		t.Error("two bundles were listed")
	}
}

// The checks themselves fail on what the specs refuse.
func TestValidatorsRefuse(t *testing.T) {
	t.Parallel()
	bad := []struct {
		name string
		run  func(t reporter)
	}{
		{"server.json with a go package", func(t reporter) {
			s := must(server("1", "img:1", "https://x", nil))
			s.Packages[0].RegistryType = "go"
			validateServer(t, decode(t, s))
		}},
		{"server.json with a long description", func(t reporter) {
			s := must(server("1", "img:1", "https://x", nil))
			s.Description = strings.Repeat("x", 101)
			validateServer(t, decode(t, s))
		}},
	}
	for _, c := range bad {
		ft := &failures{}
		ran := make(chan struct{})
		go func() { defer close(ran); c.run(ft) }()
		<-ran
		if !ft.failed {
			t.Errorf("%s: passed validation", c.name)
		}
	}
}

// reporter is the part of *testing.T the validators use, so that a test
// can run them on bad input and see them fail.
type reporter interface {
	Helper()
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
}

// failures is a reporter that only notes that something failed.
type failures struct{ failed bool }

func (f *failures) Helper()               {}
func (f *failures) Errorf(string, ...any) { f.failed = true }
func (f *failures) Fatalf(string, ...any) { f.failed = true; runtime.Goexit() }

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
