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

// The field lists below are taken from the specs, not from our structs:
// the MCPB manifest schema (modelcontextprotocol/mcpb,
// schemas/mcpb-manifest-v0.4.schema.json; every object there has
// additionalProperties false) and the MCP Registry's server.json schema
// (modelcontextprotocol/registry, docs/reference/server-json,
// 2025-12-11).
var (
	mcpbTop = shape{
		required: []string{"name", "version", "description", "author", "server"},
		allowed: []string{"$schema", "dxt_version", "manifest_version", "name", "display_name", "version",
			"description", "long_description", "author", "repository", "homepage", "documentation", "support",
			"icon", "icons", "screenshots", "localization", "server", "tools", "tools_generated", "prompts",
			"prompts_generated", "keywords", "license", "privacy_policies", "compatibility", "user_config", "_meta"},
	}
	mcpbAuthorShape     = shape{required: []string{"name"}, allowed: []string{"name", "email", "url"}}
	mcpbRepositoryShape = shape{required: []string{"type", "url"}, allowed: []string{"type", "url"}}
	mcpbBinaryServer    = shape{required: []string{"entry_point", "mcp_config", "type"}, allowed: []string{"entry_point", "mcp_config", "type"}}
	mcpbMCPConfig       = shape{required: []string{"command"}, allowed: []string{"command", "args", "env", "platform_overrides"}}
	mcpbToolShape       = shape{required: []string{"name"}, allowed: []string{"name", "description"}}
	mcpbCompat          = shape{allowed: []string{"claude_desktop", "platforms", "runtimes"}}
	mcpbUserOption      = shape{required: []string{"type", "title", "description"},
		allowed: []string{"type", "title", "description", "required", "default", "multiple", "sensitive", "min", "max"}}
	mcpbUserTypes = []string{"string", "number", "boolean", "directory", "file"}
	mcpbPlatforms = []string{"darwin", "win32", "linux"}

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

// validateManifest checks a manifest.json against the MCPB v0.4 fields.
func validateManifest(t reporter, m map[string]any) {
	t.Helper()
	mcpbTop.check(t, "manifest", m)
	if m["manifest_version"] != "0.4" {
		t.Errorf("manifest_version %v, want \"0.4\"", m["manifest_version"])
	}
	mcpbAuthorShape.check(t, "author", object(t, "author", m["author"]))
	if r, ok := m["repository"]; ok {
		mcpbRepositoryShape.check(t, "repository", object(t, "repository", r))
	}
	srv := object(t, "server", m["server"])
	mcpbBinaryServer.check(t, "server", srv)
	if srv["type"] != "binary" {
		t.Errorf("server.type %v, want binary", srv["type"])
	}
	cfg := object(t, "server.mcp_config", srv["mcp_config"])
	mcpbMCPConfig.check(t, "server.mcp_config", cfg)
	if cmd, _ := cfg["command"].(string); cmd != "${__dirname}/"+srv["entry_point"].(string) {
		t.Errorf("command %q does not run entry_point %v from the bundle", cmd, srv["entry_point"])
	}
	uc := object(t, "user_config", m["user_config"])
	for k, v := range uc {
		o := object(t, "user_config."+k, v)
		mcpbUserOption.check(t, "user_config."+k, o)
		if !slices.Contains(mcpbUserTypes, o["type"].(string)) {
			t.Errorf("user_config.%s.type %v: want one of %v", k, o["type"], mcpbUserTypes)
		}
	}
	refs := regexp.MustCompile(`\$\{user_config\.([a-z_]+)\}`)
	args, _ := cfg["args"].([]any)
	for _, a := range args {
		for _, r := range refs.FindAllStringSubmatch(a.(string), -1) {
			if _, ok := uc[r[1]]; !ok {
				t.Errorf("args use ${user_config.%s}, which user_config does not define", r[1])
			}
		}
	}
	for _, want := range []string{"thread", "skills_dir"} {
		if _, ok := uc[want]; !ok {
			t.Errorf("user_config has no %q", want)
		}
	}
	tools, _ := m["tools"].([]any)
	for _, tl := range tools {
		mcpbToolShape.check(t, "tools[]", object(t, "tools", tl))
	}
	compat := object(t, "compatibility", m["compatibility"])
	mcpbCompat.check(t, "compatibility", compat)
	for _, p := range compat["platforms"].([]any) {
		if !slices.Contains(mcpbPlatforms, p.(string)) {
			t.Errorf("compatibility.platforms: %v is not one of %v", p, mcpbPlatforms)
		}
	}
}

func TestManifestMatchesMCPBSpec(t *testing.T) {
	t.Parallel()
	for _, goos := range []string{"darwin", "windows", "linux"} {
		m, err := manifest("1.2.3", goos, "server/sandbox-mcp")
		if err != nil {
			t.Fatal(err)
		}
		validateManifest(t, decode(t, m))
		if len(m.Tools) < 7 {
			t.Errorf("%s: %d tools listed, want every tool", goos, len(m.Tools))
		}
	}
	if _, err := manifest("1.2.3", "plan9", "x"); err == nil || !strings.Contains(err.Error(), "plan9") {
		t.Errorf("unknown OS: %v, want an error naming it", err)
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
	var bundles []string
	for _, p := range []string{"darwin_arm64", "windows_amd64"} {
		b := filepath.Join(dir, "sandbox-mcp_1.2.3_"+p+".mcpb")
		os.WriteFile(b, []byte(p), 0o644)
		bundles = append(bundles, b)
	}
	s, err := server("1.2.3", "ghcr.io/sandbox-mcp/sandbox-mcp:1.2.3", "https://example.com/dl/", bundles)
	if err != nil {
		t.Fatal(err)
	}
	m := decode(t, s)
	validateServer(t, m)
	pkgs := m["packages"].([]any)
	if len(pkgs) != 3 {
		t.Fatalf("%d packages, want the image and 2 bundles", len(pkgs))
	}
	last := pkgs[2].(map[string]any)
	if last["identifier"] != "https://example.com/dl/sandbox-mcp_1.2.3_windows_amd64.mcpb" {
		t.Errorf("identifier %v", last["identifier"])
	}
	if want, _ := fileSHA256(bundles[1]); last["fileSha256"] != want {
		t.Errorf("fileSha256 %v, want %s", last["fileSha256"], want)
	}
	if _, err := server("1.2.3", "img:1", "https://x", []string{filepath.Join(dir, "other.zip")}); err == nil {
		t.Error("a file not named like a bundle was taken")
	}
}

// The checks themselves fail on what the specs refuse.
func TestValidatorsRefuse(t *testing.T) {
	t.Parallel()
	bad := []struct {
		name string
		run  func(t reporter)
	}{
		{"manifest without author", func(t reporter) {
			m := decode(t, must(manifest("1", "darwin", "server/sandbox-mcp")))
			delete(m, "author")
			validateManifest(t, m)
		}},
		{"manifest with an unknown key", func(t reporter) {
			m := decode(t, must(manifest("1", "darwin", "server/sandbox-mcp")))
			m["color"] = "red"
			validateManifest(t, m)
		}},
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
