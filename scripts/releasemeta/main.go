// Command releasemeta writes the metadata files of a release, for
// scripts/release.sh: the manifest.json of the Claude Desktop extension
// (.mcpb, manifest_version 0.4; one bundle for every platform, laid out by
// bundle.go), the server.json of the official MCP Registry (schema
// 2025-12-11), and the multi-arch server image (image.go); and it checks
// them for scripts/release-check.sh (check.go, try.go). Their fields are
// typed here; the manifest is checked against the MCPB rules of its
// version (mcpbschema.go), server.json against the registry's schema.
//
//	releasemeta manifest -version V
//	releasemeta server -version V -image REF -download URL FILE.mcpb
//	releasemeta image ... (image.go), try ... (try.go), lipo ... (lipo.go),
//	releasemeta icon -out FILE (icon.go), bundle ... (bundle.go), check ... (check.go)
package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/sandbox-mcp/sandbox-mcp/tools"
)

const (
	repoURL    = "https://github.com/sandbox-mcp/sandbox-mcp"
	serverName = "io.github.sandbox-mcp/sandbox-mcp" // the image's io.modelcontextprotocol.server.name label
	// summary is server.json's description (at most 100 characters).
	summary = "Sandboxed bash and file tools for agents: a sandbox per thread, host paths masked, calls audited"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: releasemeta manifest|server|image|try|lipo|icon|bundle|check [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "manifest":
		err = manifestCmd(os.Args[2:], os.Stdout)
	case "server":
		err = serverCmd(os.Args[2:], os.Stdout)
	case "image":
		err = imageCmd(os.Args[2:])
	case "try":
		err = tryCmd(os.Args[2:])
	case "lipo":
		err = lipoCmd(os.Args[2:])
	case "icon":
		err = iconCmd(os.Args[2:])
	case "check":
		err = checkCmd(os.Args[2:])
	case "bundle":
		err = bundleCmd(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q: want manifest, server, image, try, lipo, icon, bundle or check", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "releasemeta:", err)
		os.Exit(1)
	}
}

// mcpbManifest is an MCPB manifest (manifest_version 0.4).
type mcpbManifest struct {
	ManifestVersion string                `json:"manifest_version"`
	Name            string                `json:"name"`
	DisplayName     string                `json:"display_name,omitempty"`
	Version         string                `json:"version"`
	Description     string                `json:"description"`
	LongDescription string                `json:"long_description,omitempty"`
	Author          mcpbAuthor            `json:"author"`
	Repository      *mcpbRepository       `json:"repository,omitempty"`
	Homepage        string                `json:"homepage,omitempty"`
	Documentation   string                `json:"documentation,omitempty"`
	Support         string                `json:"support,omitempty"`
	Icon            string                `json:"icon,omitempty"`
	Server          mcpbServer            `json:"server"`
	Tools           []mcpbTool            `json:"tools,omitempty"`
	Keywords        []string              `json:"keywords,omitempty"`
	License         string                `json:"license,omitempty"`
	Compatibility   *mcpbCompatibility    `json:"compatibility,omitempty"`
	UserConfig      map[string]userOption `json:"user_config,omitempty"`
}

type mcpbAuthor struct {
	Name string `json:"name"`
	URL  string `json:"url,omitempty"`
}

type mcpbRepository struct {
	Type string `json:"type"`
	URL  string `json:"url"`
}

type mcpbServer struct {
	Type       string    `json:"type"`
	EntryPoint string    `json:"entry_point"`
	MCPConfig  mcpConfig `json:"mcp_config"`
}

type mcpConfig struct {
	Command           string                     `json:"command"`
	Args              []string                   `json:"args,omitempty"`
	Env               map[string]string          `json:"env,omitempty"`
	PlatformOverrides map[string]platformCommand `json:"platform_overrides,omitempty"`
}

// platformCommand is what mcp_config.platform_overrides changes for one
// OS (an MCPB platform: darwin, win32, linux).
type platformCommand struct {
	Command string            `json:"command,omitempty"`
	Args    []string          `json:"args,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
}

type mcpbTool struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
}

type mcpbCompatibility struct {
	Platforms []string `json:"platforms,omitempty"`
}

type userOption struct {
	Type        string `json:"type"`
	Title       string `json:"title"`
	Description string `json:"description"`
	Required    bool   `json:"required"`
	Default     any    `json:"default,omitempty"`
}

// The extension is one bundle for every platform: a client (Claude
// Desktop) runs mcp_config's command, or the platform_overrides entry of
// its OS (process.platform), so one file serves all three and the MCP
// Registry needs one mcpb package. Its files, as release.sh lays them out:
const (
	bundleDarwin  = "server/sandbox-mcp"     // macOS: one universal (amd64 + arm64) Mach-O, releasemeta lipo
	bundleWindows = "server/sandbox-mcp.exe" // Windows: amd64 (Windows 11 on Arm runs it emulated)
	bundleLinux   = "server/linux.sh"        // Linux: runs linux-$(uname -m)/sandbox-mcp
	bundleIcon    = "icon.png"
)

// bundleLinuxBuilds are the Linux builds in the bundle: the Linux
// platform's servers.
var bundleLinuxBuilds = map[string]string{"amd64": "server/linux-amd64/sandbox-mcp", "arm64": "server/linux-arm64/sandbox-mcp"}

// The supervisor daemons in the bundle, each beside its server: the Linux
// builds serve the Linux servers' sandboxes and, found in linux-ARCH/
// beside the server, the docker provider's containers on macOS and
// Windows; the macOS one (universal) the local provider's bash on the host.
var bundleLinuxDaemons = map[string]string{"amd64": "server/linux-amd64/" + daemonName, "arm64": "server/linux-arm64/" + daemonName}

const bundleDarwinDaemon = "server/" + daemonName

// serverArgs are the server's arguments from the extension's settings,
// each one --flag=VALUE: a setting left blank is an empty value, or the
// unfilled ${user_config.KEY} a client keeps when the setting has no value,
// and the server takes either as not given (the config file's, or the
// default, stands).
var serverArgs = []string{
	"--thread=${user_config.thread}",
	"--provider=${user_config.provider}",
	"--image=${user_config.image}",
	"--config=${user_config.config_file}",
	"--skills-dir=${user_config.skills_dir}",
	"--allow-host-bash=${user_config.allow_host_bash}",
}

// manifest is the extension's manifest: one bundle, every platform.
// Claude Desktop fills ${__dirname} and ${user_config.*} into the command
// line.
func manifest(version string) mcpbManifest {
	var ts []mcpbTool
	for _, t := range tools.All() {
		ts = append(ts, mcpbTool{Name: t.Def.Name, Description: firstSentence(t.Def.Description)})
	}
	return mcpbManifest{
		ManifestVersion: "0.4",
		Name:            "sandbox-mcp",
		DisplayName:     "Sandbox MCP",
		Version:         version,
		Description:     "Gives Claude bash and file tools inside a sandbox: its own files per thread, host paths never shown, every call audited.",
		LongDescription: "sandbox-mcp gives the agent bash, ls, glob, grep, read_file, write_file and str_replace in a per-thread sandbox seen under /mnt/user-data. " +
			"The file tools are confined to the thread's directories on every OS. bash runs isolated in bubblewrap on Linux, or in a hardened container per thread with the docker provider " +
			"(Docker Desktop on macOS and Windows; the image, python:3.13-slim by default, is pulled on first use), " +
			"and is off otherwise unless you allow unisolated host bash. See the README's \"safe by default\" section.",
		Author:        mcpbAuthor{Name: "The sandbox-mcp authors", URL: repoURL},
		Repository:    &mcpbRepository{Type: "git", URL: repoURL},
		Homepage:      repoURL,
		Documentation: repoURL + "/blob/main/docs/install.md",
		Support:       repoURL + "/issues",
		Icon:          bundleIcon,
		Server: mcpbServer{
			Type:       "binary",
			EntryPoint: bundleDarwin,
			MCPConfig: mcpConfig{
				Command: "${__dirname}/" + bundleDarwin,
				Args:    serverArgs,
				PlatformOverrides: map[string]platformCommand{
					"win32": {Command: "${__dirname}/" + bundleWindows},
					// Through sh, so that no mode of the script must survive
					// the client's unzip.
					"linux": {Command: "/bin/sh", Args: append([]string{"${__dirname}/" + bundleLinux}, serverArgs...)},
				},
			},
		},
		Tools:         ts,
		Keywords:      []string{"sandbox", "bash", "files", "bubblewrap", "docker", "agent"},
		License:       "Apache-2.0",
		Compatibility: &mcpbCompatibility{Platforms: []string{"darwin", "win32", "linux"}},
		UserConfig: map[string]userOption{
			"thread": {Type: "string", Title: "Thread",
				Description: "Names the sandbox's files; conversations naming the same thread share them. Letters, digits, '.', '_' and '-'.",
				Default:     "default"},
			"provider": {Type: "string", Title: "Provider",
				Description: "Blank: local (files on this machine; bash in bubblewrap on Linux, off on macOS and Windows). docker: a hardened container per thread, bash included (needs Docker Desktop or another Docker engine). kubernetes: a Pod per thread. Blank also leaves the config file's provider.",
				Default:     ""},
			"image": {Type: "string", Title: "Sandbox image (docker)",
				Description: "docker provider: the containers' image, any with sh. Blank: python:3.13-slim (bash, coreutils, Python 3), pulled by Docker on first use, or the config file's docker.image.",
				Default:     ""},
			"config_file": {Type: "file", Title: "Config file",
				Description: "Optional: a sandbox-mcp YAML config (docker: network, memory, environment; mounts; limits; see docs/reference.md). The settings above override it.",
				Default:     ""},
			"skills_dir": {Type: "directory", Title: "Skills directory",
				Description: "Optional: a directory shown to the agent read-only at /mnt/skills.",
				Default:     ""},
			"allow_host_bash": {Type: "boolean", Title: "Allow unisolated bash",
				Description: "Only where bubblewrap cannot run (macOS, Windows) with the local provider: run bash on this machine as you, unisolated. Off by default; docker is the isolated way.",
				Default:     false},
		},
	}
}

// firstSentence is a tool description's first sentence.
func firstSentence(s string) string {
	if i := strings.Index(s, ". "); i >= 0 {
		s = s[:i+1]
	}
	return strings.TrimSpace(strings.SplitN(s, "\n", 2)[0])
}

// serverJSON is server.json of the MCP Registry (schema 2025-12-11).
type serverJSON struct {
	Schema      string       `json:"$schema"`
	Name        string       `json:"name"`
	Title       string       `json:"title,omitempty"`
	Description string       `json:"description"`
	Version     string       `json:"version"`
	Repository  *repoRef     `json:"repository,omitempty"`
	WebsiteURL  string       `json:"websiteUrl,omitempty"`
	Packages    []regPackage `json:"packages,omitempty"`
	Meta        *metaBlock   `json:"_meta,omitempty"`
}

type repoRef struct {
	URL    string `json:"url"`
	Source string `json:"source"`
}

type metaBlock struct {
	Publisher map[string]any `json:"io.modelcontextprotocol.registry/publisher-provided,omitempty"`
}

type regPackage struct {
	RegistryType     string     `json:"registryType"`
	Identifier       string     `json:"identifier"`
	Version          string     `json:"version,omitempty"`
	FileSHA256       string     `json:"fileSha256,omitempty"`
	RuntimeHint      string     `json:"runtimeHint,omitempty"`
	Transport        transport  `json:"transport"`
	RuntimeArguments []argument `json:"runtimeArguments,omitempty"`
	PackageArguments []argument `json:"packageArguments,omitempty"`
	Environment      []keyValue `json:"environmentVariables,omitempty"`
}

type transport struct {
	Type string `json:"type"`
}

type argument struct {
	Type        string `json:"type"`
	Name        string `json:"name,omitempty"`
	Value       string `json:"value,omitempty"`
	ValueHint   string `json:"valueHint,omitempty"`
	Description string `json:"description,omitempty"`
	Default     string `json:"default,omitempty"`
	IsRequired  bool   `json:"isRequired,omitempty"`
}

type keyValue struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	IsRequired  bool   `json:"isRequired,omitempty"`
}

// mcpbName is how release.sh names the bundle: sandbox-mcp_V.mcpb.
var mcpbName = regexp.MustCompile(`^sandbox-mcp_[^_]+\.mcpb$`)

// server is server.json: the OCI image (stdio, run with docker; the
// container is the sandbox) and the extension bundle (one for every
// platform), with its file's sha256. A registry client picks its package
// by registryType — one it can install: oci where it runs Docker, mcpb
// where it installs extensions (Claude Desktop) — and there is one of each,
// so nothing else is left to choose: server.json has no field for an OS or
// an architecture; the image is multi-architecture and the bundle carries
// every platform's build.
func server(version, image, download string, bundles []string) (serverJSON, error) {
	s := serverJSON{
		Schema:      "https://static.modelcontextprotocol.io/schemas/2025-12-11/server.schema.json",
		Name:        serverName,
		Title:       "Sandbox MCP",
		Description: summary,
		Version:     version,
		Repository:  &repoRef{URL: repoURL, Source: "github"},
		WebsiteURL:  repoURL,
		Packages: []regPackage{{
			RegistryType: "oci",
			Identifier:   image,
			RuntimeHint:  "docker",
			Transport:    transport{Type: "stdio"},
			RuntimeArguments: []argument{
				{Type: "named", Name: "-i", Description: "stdio: keep stdin open"},
				{Type: "named", Name: "--rm"},
				{Type: "named", Name: "-v", Value: "sandbox-mcp-state:/var/lib/sandbox-mcp",
					Description: "a volume for the threads' files and the audit log"},
				// The container is the sandbox: hardened as the docker
				// provider hardens its containers.
				{Type: "named", Name: "--cap-drop", Value: "ALL", Description: "no capabilities in the sandbox"},
				{Type: "named", Name: "--security-opt", Value: "no-new-privileges", Description: "no setuid gains in the sandbox"},
				{Type: "named", Name: "--network", Value: "none", Description: "commands get no network (replace none with bridge to give them one)"},
				{Type: "named", Name: "--pids-limit", Value: "1024", Description: "a fork bomb stops here"},
				{Type: "named", Name: "--memory", Value: "4g", Description: "the sandbox's memory"},
			},
			PackageArguments: []argument{
				{Type: "named", Name: "--thread", ValueHint: "thread", Default: "default",
					Description: "the thread this server serves"},
			},
		}},
	}
	if len(bundles) > 1 {
		return serverJSON{}, fmt.Errorf("%d bundles: server.json lists one (a registry client could not tell them apart)", len(bundles))
	}
	for _, b := range bundles {
		if !mcpbName.MatchString(filepath.Base(b)) {
			return serverJSON{}, fmt.Errorf("%s: not the bundle name release.sh makes (sandbox-mcp_V.mcpb)", filepath.Base(b))
		}
		sum, err := fileSHA256(b)
		if err != nil {
			return serverJSON{}, err
		}
		s.Packages = append(s.Packages, regPackage{
			RegistryType: "mcpb",
			Identifier:   strings.TrimSuffix(download, "/") + "/" + filepath.Base(b),
			FileSHA256:   sum,
			Transport:    transport{Type: "stdio"},
		})
	}
	return s, nil
}

func fileSHA256(name string) (string, error) {
	f, err := os.Open(name)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// jsonBytes is v as writeJSON writes it.
func jsonBytes(v any) ([]byte, error) {
	var buf bytes.Buffer
	err := writeJSON(&buf, v)
	return buf.Bytes(), err
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

func manifestCmd(args []string, w io.Writer) error {
	fs := flag.NewFlagSet("manifest", flag.ContinueOnError)
	version := fs.String("version", "", "the release's version")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *version == "" {
		return fmt.Errorf("manifest: -version is required")
	}
	return writeJSON(w, manifest(*version))
}

func serverCmd(args []string, w io.Writer) error {
	fs := flag.NewFlagSet("server", flag.ContinueOnError)
	version := fs.String("version", "", "the release's version")
	image := fs.String("image", "", "the server image's reference, with its tag")
	download := fs.String("download", "", "the URL the bundles are downloaded from")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *version == "" || *image == "" || *download == "" {
		return fmt.Errorf("server: -version, -image and -download are required")
	}
	s, err := server(*version, *image, *download, fs.Args())
	if err != nil {
		return err
	}
	return writeJSON(w, s)
}
