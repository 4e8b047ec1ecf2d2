// Command releasemeta writes the metadata files of a release, for
// scripts/release.sh: the manifest.json of a Claude Desktop extension
// bundle (.mcpb, manifest_version 0.4) and the server.json of the official
// MCP Registry (schema 2025-12-11), and the multi-arch server image
// (image.go). Their fields are typed here, and a test
// checks them against the required keys of both specs.
//
//	releasemeta manifest -version V -os darwin -entry server/sandbox-mcp
//	releasemeta server -version V -image REF -download URL FILE.mcpb...
package main

import (
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
		fmt.Fprintln(os.Stderr, "usage: releasemeta manifest|server|image|try [flags]")
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
	default:
		err = fmt.Errorf("unknown command %q: want manifest, server, image or try", os.Args[1])
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
	Command string            `json:"command"`
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

// mcpbPlatform is the MCPB name of a GOOS.
var mcpbPlatform = map[string]string{"darwin": "darwin", "windows": "win32", "linux": "linux"}

// manifest is the extension's manifest for one OS. The binary lies at
// entry in the bundle; Claude Desktop fills ${__dirname} and
// ${user_config.*} into the command line.
func manifest(version, goos, entry string) (mcpbManifest, error) {
	platform, ok := mcpbPlatform[goos]
	if !ok {
		return mcpbManifest{}, fmt.Errorf("-os %q: want darwin, windows or linux", goos)
	}
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
			"The file tools are confined to the thread's directories on every OS. bash runs isolated in bubblewrap on Linux, in a hardened container with the docker provider, " +
			"and is off otherwise unless you allow unisolated host bash. See the README's \"safe by default\" section.",
		Author:        mcpbAuthor{Name: "The sandbox-mcp authors", URL: repoURL},
		Repository:    &mcpbRepository{Type: "git", URL: repoURL},
		Homepage:      repoURL,
		Documentation: repoURL + "/blob/main/docs/reference.md",
		Support:       repoURL + "/issues",
		Server: mcpbServer{
			Type:       "binary",
			EntryPoint: entry,
			MCPConfig: mcpConfig{
				Command: "${__dirname}/" + entry,
				Args: []string{
					"--provider", "${user_config.provider}",
					"--thread", "${user_config.thread}",
					"--skills-dir", "${user_config.skills_dir}",
					"--allow-host-bash=${user_config.allow_host_bash}",
				},
			},
		},
		Tools:         ts,
		Keywords:      []string{"sandbox", "bash", "files", "bubblewrap", "docker", "agent"},
		License:       "Apache-2.0",
		Compatibility: &mcpbCompatibility{Platforms: []string{platform}},
		UserConfig: map[string]userOption{
			"thread": {Type: "string", Title: "Thread",
				Description: "Names the sandbox's files; conversations naming the same thread share them. Letters, digits, '.', '_' and '-'.",
				Default:     "default"},
			"skills_dir": {Type: "directory", Title: "Skills directory",
				Description: "Optional: a directory shown to the agent read-only at /mnt/skills."},
			"provider": {Type: "string", Title: "Provider",
				Description: "local (files on this machine; bash in bubblewrap on Linux) or docker (a hardened container per thread; needs Docker and the sandbox-mcp-base image).",
				Default:     "local"},
			"allow_host_bash": {Type: "boolean", Title: "Allow unisolated bash",
				Description: "Only where bubblewrap cannot run (macOS, Windows) with the local provider: run bash on this machine as you, unisolated. Off by default.",
				Default:     false},
		},
	}, nil
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

// mcpbName is how release.sh names a bundle: sandbox-mcp_V_OS_ARCH.mcpb.
var mcpbName = regexp.MustCompile(`^sandbox-mcp_[^_]+_(darwin|linux|windows)_(amd64|arm64)\.mcpb$`)

// server is server.json: the OCI image (stdio, run with docker) and one
// mcpb package per bundle, each with its file's sha256.
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
			},
			PackageArguments: []argument{
				{Type: "named", Name: "--thread", ValueHint: "thread", Default: "default",
					Description: "the thread this server serves"},
			},
		}},
	}
	for _, b := range bundles {
		m := mcpbName.FindStringSubmatch(filepath.Base(b))
		if m == nil {
			return serverJSON{}, fmt.Errorf("%s: not a bundle name release.sh makes (sandbox-mcp_V_OS_ARCH.mcpb)", filepath.Base(b))
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

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

func manifestCmd(args []string, w io.Writer) error {
	fs := flag.NewFlagSet("manifest", flag.ContinueOnError)
	version := fs.String("version", "", "the release's version")
	goos := fs.String("os", "", "darwin, windows or linux")
	entry := fs.String("entry", "server/sandbox-mcp", "the binary's path in the bundle")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *version == "" {
		return fmt.Errorf("manifest: -version is required")
	}
	m, err := manifest(*version, *goos, *entry)
	if err != nil {
		return err
	}
	return writeJSON(w, m)
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
