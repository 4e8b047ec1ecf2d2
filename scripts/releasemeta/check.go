package main

import (
	"archive/zip"
	"bytes"
	"debug/elf"
	"debug/macho"
	"debug/pe"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// check is the release dry run's look at what a client gets (release-check.sh):
//   - the bundle's manifest.json against the MCPB rules of the version it
//     declares (mcpbschema.go), and every promise it makes: for each platform
//     it names, the command (platform_overrides applied) is in the bundle,
//     executable and built for that OS and both its architectures; every
//     ${variable} is one a client fills; an optional setting left blank
//     cannot stop the server (--flag=${user_config.KEY}, one argument);
//     the icon is a small square PNG;
//   - server.json against the MCP Registry's own schema (-registry-schema,
//     the schema file of modelcontextprotocol/registry), and that a client
//     can pick its package: one package per registryType, the bundle's
//     sha256 and name, the image's tag.
//
//	releasemeta check -version V -dist DIR -registry-schema FILE

// maxIcon bounds the icon's size.
const maxIcon = 50 << 10

// dirVars are the variables a client fills besides user_config.*.
var dirVars = []string{"__dirname", "HOME", "DESKTOP", "DOCUMENTS", "DOWNLOADS", "pathSeparator", "/"}

var varRef = regexp.MustCompile(`\$\{([^}]*)\}`)

// checkBundle is what is wrong with the bundle at path.
func checkBundle(path string) []string {
	var errs []string
	bad := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	zr, err := zip.OpenReader(path)
	if err != nil {
		return []string{err.Error()}
	}
	defer zr.Close()
	files := map[string]*zip.File{}
	for _, f := range zr.File {
		files[f.Name] = f
	}
	read := func(name string) ([]byte, error) {
		f := files[name]
		if f == nil {
			return nil, fmt.Errorf("%s is not in the bundle", name)
		}
		rc, err := f.Open()
		if err != nil {
			return nil, err
		}
		defer rc.Close()
		return io.ReadAll(rc)
	}
	raw, err := read("manifest.json")
	if err != nil {
		return []string{err.Error()}
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return []string{"manifest.json: " + err.Error()}
	}
	errs = append(errs, validateManifest(m)...)
	if len(errs) > 0 {
		return errs
	}
	var man mcpbManifest
	json.Unmarshal(raw, &man)
	cfg := man.Server.MCPConfig

	// In the bundle, executable, of the OS and architectures: a path
	// named from ${__dirname}.
	inBundle := func(ref string) (string, bool) {
		rel, ok := strings.CutPrefix(ref, "${__dirname}/")
		return rel, ok
	}
	executable := func(name string, want func([]byte) error) {
		f := files[name]
		if f == nil {
			bad("%s: not in the bundle", name)
			return
		}
		if f.Mode()&0o111 == 0 {
			bad("%s: not executable in the bundle (mode %v)", name, f.Mode())
		}
		b, err := read(name)
		if err == nil {
			err = want(b)
		}
		if err != nil {
			bad("%s: %v", name, err)
		}
	}
	if _, ok := files[man.Server.EntryPoint]; !ok {
		bad("server.entry_point %s: not in the bundle", man.Server.EntryPoint)
	}
	platforms := man.Compatibility.Platforms
	for _, want := range []string{"darwin", "win32", "linux"} {
		if !slices.Contains(platforms, want) {
			bad("compatibility.platforms: no %s (the bundle is for every platform)", want)
		}
	}
	for _, p := range platforms {
		cmd, args := cfg.Command, cfg.Args
		if o, ok := cfg.PlatformOverrides[p]; ok {
			if o.Command != "" {
				cmd = o.Command
			}
			if o.Args != nil {
				args = o.Args
			}
		}
		switch p {
		case "darwin":
			if rel, ok := inBundle(cmd); !ok {
				bad("darwin: command %s is not the bundle's", cmd)
			} else {
				executable(rel, isMac)
				executable(bundleDarwinDaemon, isMac)
			}
		case "win32":
			if rel, ok := inBundle(cmd); !ok || !strings.HasSuffix(rel, ".exe") {
				bad("win32: command %s is not the bundle's .exe", cmd)
			} else {
				executable(rel, isPE)
			}
		case "linux":
			script := ""
			if len(args) > 0 {
				script, _ = inBundle(args[0])
			}
			if cmd != "/bin/sh" || script == "" {
				bad("linux: want /bin/sh running the bundle's launcher, not %s %v", cmd, args)
			} else if _, ok := files[script]; !ok {
				bad("linux: %s is not in the bundle", script)
			}
			for arch, name := range bundleLinuxBuilds {
				executable(name, isELF(arch))
				executable(bundleLinuxDaemons[arch], isELF(arch))
			}
		}
		for _, a := range args {
			checkArg(p, a, man.UserConfig, bad)
		}
		checkArg(p, cmd, man.UserConfig, bad)
	}
	if man.Icon == "" {
		bad("manifest: no icon")
	} else if b, err := read(man.Icon); err != nil {
		bad("icon: %v", err)
	} else if img, err := png.Decode(bytes.NewReader(b)); err != nil {
		bad("icon %s: not a PNG: %v", man.Icon, err)
	} else if r := img.Bounds(); r.Dx() != r.Dy() || r.Dx() < 128 || len(b) > maxIcon {
		bad("icon %s: %dx%d, %d bytes: want a square of 128 pixels or more, at most %d bytes", man.Icon, r.Dx(), r.Dy(), len(b), maxIcon)
	}
	return errs
}

// checkArg says what is wrong with one argument of a platform's command
// line: a variable no client fills, or an optional setting that, left
// blank, would reach the server as an argument of its own.
func checkArg(platform, a string, uc map[string]userOption, bad func(string, ...any)) {
	for _, ref := range varRef.FindAllStringSubmatch(a, -1) {
		name := ref[1]
		key, isUser := strings.CutPrefix(name, "user_config.")
		switch {
		case isUser:
			o, ok := uc[key]
			if !ok {
				bad("%s: argument %q: user_config has no %s", platform, a, key)
				continue
			}
			if !o.Required && !regexp.MustCompile(`^--[a-z-]+=\$\{user_config\.`+regexp.QuoteMeta(key)+`\}$`).MatchString(a) {
				bad("%s: argument %q: the optional %s, left blank, reaches the server as it is: pass it as --flag=${user_config.%s}", platform, a, key, key)
			}
		case !slices.Contains(dirVars, name):
			bad("%s: argument %q: ${%s} is no variable a client fills", platform, a, name)
		}
	}
}

func isMac(b []byte) error {
	f, err := macho.NewFatFile(bytes.NewReader(b))
	if err != nil {
		return fmt.Errorf("not a universal Mach-O: %v", err)
	}
	var cpus []macho.Cpu
	for _, a := range f.Arches {
		cpus = append(cpus, a.Cpu)
	}
	if !slices.Contains(cpus, macho.CpuAmd64) || !slices.Contains(cpus, macho.CpuArm64) {
		return fmt.Errorf("a universal Mach-O of %v, want amd64 and arm64", cpus)
	}
	return nil
}

func isPE(b []byte) error {
	f, err := pe.NewFile(bytes.NewReader(b))
	if err != nil {
		return fmt.Errorf("not a Windows executable: %v", err)
	}
	if f.Machine != pe.IMAGE_FILE_MACHINE_AMD64 {
		return fmt.Errorf("a Windows executable for machine %#x, want amd64", f.Machine)
	}
	return nil
}

func isELF(arch string) func([]byte) error {
	want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[arch]
	return func(b []byte) error {
		f, err := elf.NewFile(bytes.NewReader(b))
		if err != nil {
			return fmt.Errorf("not a Linux (ELF) build: %v", err)
		}
		if f.Machine != want {
			return fmt.Errorf("an ELF for %v, want %s", f.Machine, arch)
		}
		return nil
	}
}

// checkServerJSON is what is wrong with server.json: against the
// registry's schema (schemaFile), and for a client picking its package.
func checkServerJSON(raw []byte, version, bundle, schemaFile string) []string {
	var errs []string
	bad := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return []string{"server.json: " + err.Error()}
	}
	sf, err := os.Open(schemaFile)
	if err != nil {
		return []string{"the registry's schema: " + err.Error()}
	}
	schemaDoc, err := jsonschema.UnmarshalJSON(sf)
	sf.Close()
	if err != nil {
		return []string{"the registry's schema: " + err.Error()}
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("registry-server.schema.json", schemaDoc); err != nil {
		return []string{err.Error()}
	}
	sch, err := c.Compile("registry-server.schema.json")
	if err != nil {
		return []string{"the registry's schema: " + err.Error()}
	}
	if err := sch.Validate(doc); err != nil {
		bad("server.json against the registry's schema: %s", strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	var s serverJSON
	if err := json.Unmarshal(raw, &s); err != nil {
		return append(errs, "server.json: "+err.Error())
	}
	if s.Version != version {
		bad("server.json: version %s, want %s", s.Version, version)
	}
	seen := map[string]int{}
	for _, p := range s.Packages {
		seen[p.RegistryType]++
		if p.Transport.Type != "stdio" {
			bad("server.json: the %s package's transport is %s, want stdio", p.RegistryType, p.Transport.Type)
		}
		switch p.RegistryType {
		case "oci":
			if !strings.HasSuffix(p.Identifier, ":"+version) || p.RuntimeHint != "docker" {
				bad("server.json: the oci package %s (runtimeHint %q): want the image tagged %s, run with docker", p.Identifier, p.RuntimeHint, version)
			}
		case "mcpb":
			if filepath.Base(p.Identifier) != filepath.Base(bundle) {
				bad("server.json: the mcpb package is %s, the bundle %s", p.Identifier, filepath.Base(bundle))
			}
			if sum, err := fileSHA256(bundle); err != nil || sum != p.FileSHA256 {
				bad("server.json: the mcpb package's fileSha256 %s is not the bundle's (%s %v)", p.FileSHA256, sum, err)
			}
		default:
			bad("server.json: a %s package, which this release does not make", p.RegistryType)
		}
	}
	for _, rt := range []string{"oci", "mcpb"} {
		if seen[rt] != 1 {
			bad("server.json: %d %s packages: a client picks by registryType, so want exactly one", seen[rt], rt)
		}
	}
	return errs
}

func checkCmd(args []string) error {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	version := fs.String("version", "", "the release's version")
	dist := fs.String("dist", "", "the release's directory")
	schema := fs.String("registry-schema", "", "the MCP Registry's server.json schema (modelcontextprotocol/registry, internal/validators/schemas/2025-12-11.json)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *version == "" || *dist == "" || *schema == "" {
		return fmt.Errorf("check: -version, -dist and -registry-schema are required")
	}
	bundles, _ := filepath.Glob(filepath.Join(*dist, "*.mcpb"))
	if len(bundles) != 1 || filepath.Base(bundles[0]) != "sandbox-mcp_"+*version+".mcpb" {
		return fmt.Errorf("check: bundles %v, want one, sandbox-mcp_%s.mcpb", bundles, *version)
	}
	errs := checkBundle(bundles[0])
	raw, err := os.ReadFile(filepath.Join(*dist, "server.json"))
	if err != nil {
		return err
	}
	errs = append(errs, checkServerJSON(raw, *version, bundles[0], *schema)...)
	if len(errs) > 0 {
		return errors.New("check:\n  " + strings.Join(errs, "\n  "))
	}
	fi, _ := os.Stat(bundles[0])
	fmt.Fprintf(os.Stderr, "releasemeta check: %s (%.1f MB): manifest 0.4 valid, darwin/win32/linux commands in it and built for them; server.json valid against the registry's schema, one oci and one mcpb package\n", filepath.Base(bundles[0]), float64(fi.Size())/(1<<20))
	return nil
}
