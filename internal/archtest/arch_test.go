package archtest

import (
	"encoding/json"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/sandbox-mcp/sandbox-mcp/"

// listed is what go list says of one package.
type listed struct {
	ImportPath string
	Imports    []string
	Deps       []string
}

// The arrows of the house (docs/architecture.md, STYLE.md): each package
// and what it may never depend on, directly or not. A rule only written
// down erodes.
func TestImportRules(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("go", "list", "-json", "github.com/sandbox-mcp/sandbox-mcp/...")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	pkgs := map[string]listed{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p listed
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs[strings.TrimPrefix(p.ImportPath, module)] = p
	}
	transports := []string{"github.com/mark3labs/mcp-go", "github.com/modelcontextprotocol/go-sdk"}
	engines := []string{"github.com/docker/docker", "k8s.io/client-go", "k8s.io/api"}
	ours := func(names ...string) []string {
		var out []string
		for _, n := range names {
			out = append(out, module+n)
		}
		return out
	}
	// The OpenTelemetry SDK and its exporter are the telemetry package's
	// (and so the command's): the server and the providers make spans
	// through the API alone, and nothing of it runs in a box. The daemon
	// renders no screen either: the terminal emulator is the server's.
	otelSDK := []string{"go.opentelemetry.io/otel/sdk", "go.opentelemetry.io/otel/exporters", module + "telemetry"}
	daemon := append(append(append(ours("providers", "tools", "server", "cmd", "audit", "masking", "hostfs", "telemetry", "terminal"), transports...), engines...), "go.opentelemetry.io", "github.com/charmbracelet")
	for _, rule := range []struct {
		pkg, why string
		never    []string // prefixes of packages it may not depend on
		notPkg   []string // packages (not their subpackages) it may not depend on
		noneOurs bool     // imports no package of this module at all
		only     []string // when set: every dependency outside the standard library has one of these prefixes
	}{
		{pkg: "sandbox", why: "the contract imports nothing of ours", noneOurs: true},
		{pkg: "masking", why: "the masker imports nothing of ours", noneOurs: true},
		{pkg: "terminal", why: "the screens and keys of terminal jobs are a mechanism: they import nothing of ours", noneOurs: true},
		{pkg: "tools", why: "tools never import a provider, the supervisor, the server or an engine's SDK",
			never: append(ours("providers", "supervisor", "server", "cmd"), engines...)},
		{pkg: "supervisor", why: "the server's end of the supervisor's channel imports no transport, tool, provider or engine SDK, nor the daemon",
			never: append(append(ours("providers", "tools", "server", "cmd", "audit", "supervisor/daemon"), transports...), engines...)},
		{pkg: "supervisor/daemon", why: "what runs in the box imports no transport, tool, provider, engine SDK, nor the server's end of the channel",
			never: daemon, notPkg: ours("supervisor")},
		{pkg: "cmd/sandbox-mcp-supervisor", why: "the daemon's binary, in every sandbox, is the standard library and what it needs: no transport, tool, provider or engine SDK",
			never: daemon, notPkg: ours("supervisor")},
		{pkg: "supervisor/wire", why: "the protocol is both sides' and neither's",
			never: append(append(ours("providers", "tools", "server", "cmd", "audit", "supervisor/daemon"), transports...), engines...), notPkg: ours("supervisor")},
		{pkg: "server", why: "the core knows no provider: main wires them",
			never: append(ours("providers", "supervisor", "cmd"), engines...)},
		{pkg: "server", why: "the server makes spans through the OpenTelemetry API: the SDK is the command's to set up (package telemetry)",
			never: otelSDK},
		{pkg: "providers/local", why: "a provider makes spans through the OpenTelemetry API, from the call's span", never: otelSDK},
		{pkg: "providers/docker", why: "a provider makes spans through the OpenTelemetry API, from the call's span", never: otelSDK},
		{pkg: "providers/kubernetes", why: "a provider makes spans through the OpenTelemetry API, from the call's span", never: otelSDK},
		{pkg: "telemetry", why: "the traces' SDK is a mechanism the command sets up: it imports nothing of ours", noneOurs: true},
		{pkg: "cmd/sandbox-mcp", why: "traces go over OTLP/HTTP by the telemetry package's own exporter: gRPC (which the SDK's OTLP exporters link) brings golang.org/x/net/trace, whose templates keep every exported method in the binary (+33 MB)",
			never: []string{"google.golang.org/grpc", "golang.org/x/net/trace", "go.opentelemetry.io/otel/exporters/otlp"}},
		{pkg: "search", why: "search is a mechanism: no transport, tool or provider",
			never: append(append(ours("providers", "tools", "server", "cmd"), transports...), engines...)},
		{pkg: "metrics", why: "the metric set is a mechanism the command, the server and the providers call: it imports nothing of ours", noneOurs: true},
		{pkg: "egress", why: "the egress proxy is a mechanism the server runs: it knows no provider, tool, transport, engine SDK or the supervisor that carries its connections",
			never: append(append(ours("providers", "tools", "server", "cmd", "supervisor", "sandbox"), transports...), engines...)},
		{pkg: "checkpoint", why: "the checkpoint engine also runs in the supervisor daemon: the standard library, golang.org/x/sys and filelock only",
			only: []string{"golang.org/x/sys/", module + "filelock"}},
		{pkg: "hostfs", why: "the host file system imports no transport, tool or provider",
			never: append(append(ours("providers", "tools", "server", "cmd", "supervisor"), transports...), engines...)},
	} {
		p, ok := pkgs[rule.pkg]
		if !ok {
			t.Errorf("package %s not found by go list", rule.pkg)
			continue
		}
		if rule.noneOurs {
			for _, imp := range p.Imports {
				if strings.HasPrefix(imp, module) {
					t.Errorf("%s imports %s: %s", rule.pkg, imp, rule.why)
				}
			}
		}
		for _, dep := range p.Deps {
			for _, bad := range rule.never {
				if dep == bad || strings.HasPrefix(dep, bad+"/") {
					t.Errorf("%s depends on %s: %s", rule.pkg, dep, rule.why)
				}
			}
			for _, bad := range rule.notPkg {
				if dep == bad {
					t.Errorf("%s depends on %s: %s", rule.pkg, dep, rule.why)
				}
			}
			if rule.only != nil && strings.Contains(strings.Split(dep, "/")[0], ".") &&
				!slices.ContainsFunc(rule.only, func(p string) bool { return strings.HasPrefix(dep, p) }) {
				t.Errorf("%s depends on %s: %s", rule.pkg, dep, rule.why)
			}
		}
	}
	// What tests share (internal/testkit) is for tests: go list's Deps
	// leave test files out, so any package that depends on it is code that
	// ships. Only the test-helper packages (sandboxtest, supervisortest)
	// may.
	kit := module + "internal/testkit"
	for name, p := range pkgs {
		if name == "internal/testkit" || strings.HasSuffix(name, "test") {
			continue
		}
		for _, dep := range p.Deps {
			if dep == kit {
				t.Errorf("%s depends on %s: the tests' helpers ship in no binary", name, kit)
			}
		}
	}
}
