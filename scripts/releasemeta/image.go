package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// The server image, multi-architecture, as an OCI image layout in one tar
// (what `skopeo copy oci-archive:FILE docker://REF` or `crane push`
// publishes as one multi-arch tag), written here without a builder: each
// architecture's image is two layers, a shell and tools from static
// Debian packages (debs.go; -debs, without which it is the state dir and
// /tmp FROM scratch, as deploy/kubernetes/Dockerfile) and the static
// binaries: the server and, beside it, the supervisor daemon (the
// sandboxes' — the container's own with isolation container, a Pod's
// copied from this image by the kubernetes provider). It is what a registry client runs (server.json's oci package):
// the container is the sandbox (SANDBOX_MCP_ISOLATION=container). The tar
// holds a Docker `manifest.json` beside the layout too, one entry per
// architecture tagged REF-ARCH, so that `docker load` (even an engine that
// reads no OCI index) takes it.
//
//	releasemeta image -version V -image REF -epoch SECONDS -out FILE [-debs debs.lock -mirror URL -cache DIR] linux/amd64=BIN linux/arm64=BIN
//
// (each BIN's daemon beside it: DIR/sandbox-mcp-supervisor, as release.sh
// builds them).

// imageUser is the image's user: not root (deploy/kubernetes/Dockerfile).
const imageUser = "65532:65532"

// imageLabels are the image's labels; the name label is what the MCP
// Registry checks the image against.
func imageLabels(version string) map[string]string {
	return map[string]string{
		"io.modelcontextprotocol.server.name": serverName,
		"org.opencontainers.image.title":      "sandbox-mcp",
		"org.opencontainers.image.version":    version,
		"org.opencontainers.image.source":     repoURL,
		"org.opencontainers.image.licenses":   "Apache-2.0",
	}
}

// blob is one content-addressed file of the layout.
type blob struct {
	desc ocispec.Descriptor
	data []byte
}

func newBlob(mediaType string, data []byte) blob {
	return blob{desc: ocispec.Descriptor{MediaType: mediaType, Digest: digest.FromBytes(data), Size: int64(len(data))}, data: data}
}

func jsonBlob(mediaType string, v any) (blob, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return blob{}, err
	}
	return newBlob(mediaType, data), nil
}

// daemonName is the supervisor daemon's file name, beside the server's
// (supervisor.DaemonName).
const daemonName = "sandbox-mcp-supervisor"

// binaryLayer is the layer of the binaries: /sandbox-mcp and
// /sandbox-mcp-supervisor, owned by root.
func binaryLayer(bin, daemon []byte) []fileEntry {
	return []fileEntry{
		{hdr: tar.Header{Name: "sandbox-mcp", Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(bin))}, data: bin},
		{hdr: tar.Header{Name: daemonName, Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(daemon))}, data: daemon},
	}
}

// scratchDirs are what an image without a base layer needs beside the
// binary: the state directory and /tmp (`sandbox-mcp doctor` and the
// providers' temporary files need one).
func scratchDirs() []fileEntry {
	return []fileEntry{
		{hdr: tar.Header{Name: "var/", Typeflag: tar.TypeDir, Mode: 0o755}},
		{hdr: tar.Header{Name: "var/lib/", Typeflag: tar.TypeDir, Mode: 0o755}},
		{hdr: tar.Header{Name: "var/lib/sandbox-mcp/", Typeflag: tar.TypeDir, Mode: 0o700, Uid: 65532, Gid: 65532}},
		{hdr: tar.Header{Name: "tmp/", Typeflag: tar.TypeDir, Mode: 0o1777}},
	}
}

// imageEnv is the image's environment. The state dir is
// $XDG_STATE_HOME/sandbox-mcp = /var/lib/sandbox-mcp, the volume
// server.json mounts. With a base layer (a shell), the container is the
// sandbox: SANDBOX_MCP_ISOLATION=container turns bash on in it.
func imageEnv(withShell bool) []string {
	env := []string{"HOME=/var/lib/sandbox-mcp", "XDG_STATE_HOME=/var/lib", "PATH=/usr/local/bin:/usr/bin:/bin"}
	if withShell {
		env = append(env, "SANDBOX_MCP_ISOLATION=container", "LANG=C.UTF-8")
	}
	return env
}

// platformImage is one architecture's image.
type platformImage struct {
	platform ocispec.Platform
	config   blob
	layers   []blob
	manifest blob
}

// buildPlatformImage is one architecture's image: base (the shell and
// tools; nil: FROM scratch) and the binary, one layer each.
func buildPlatformImage(version string, platform ocispec.Platform, bin, daemon []byte, base []fileEntry, debs []debPin, created time.Time) (platformImage, error) {
	pi := platformImage{platform: platform}
	var diffIDs []digest.Digest
	history := []ocispec.History{}
	lower := base
	if lower == nil {
		lower = scratchDirs()
	}
	for i, entries := range [][]fileEntry{lower, binaryLayer(bin, daemon)} {
		gz, raw, err := tarLayer(entries, created)
		if err != nil {
			return platformImage{}, err
		}
		pi.layers = append(pi.layers, newBlob(ocispec.MediaTypeImageLayerGzip, gz))
		diffIDs = append(diffIDs, digest.FromBytes(raw))
		what := "releasemeta image: /sandbox-mcp and /" + daemonName + " (static builds)"
		if i == 0 {
			what = "releasemeta image: the state dir and /tmp FROM scratch"
			if base != nil {
				var names []string
				for _, d := range debs {
					names = append(names, d.pkg+"="+d.version)
				}
				what = "releasemeta image: a shell and tools from Debian (" + strings.Join(names, " ") + ") FROM scratch"
			}
		}
		history = append(history, ocispec.History{Created: &created, CreatedBy: what})
	}
	labels := imageLabels(version)
	if base != nil {
		var names []string
		for _, d := range debs {
			names = append(names, d.pkg+"="+d.version)
		}
		labels["io.github.sandbox-mcp.debian-packages"] = strings.Join(names, " ")
	}
	cfg := ocispec.Image{
		Created:  &created,
		Platform: platform,
		Config: ocispec.ImageConfig{
			User:       imageUser,
			Env:        imageEnv(base != nil),
			Entrypoint: []string{"/sandbox-mcp"},
			WorkingDir: "/var/lib/sandbox-mcp",
			Labels:     labels,
		},
		RootFS:  ocispec.RootFS{Type: "layers", DiffIDs: diffIDs},
		History: history,
	}
	var err error
	if pi.config, err = jsonBlob(ocispec.MediaTypeImageConfig, cfg); err != nil {
		return platformImage{}, err
	}
	m := ocispec.Manifest{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: ocispec.MediaTypeImageManifest,
		Config:    pi.config.desc,
	}
	for _, l := range pi.layers {
		m.Layers = append(m.Layers, l.desc)
	}
	pi.manifest, err = jsonBlob(ocispec.MediaTypeImageManifest, m)
	return pi, err
}

// imageBase gives an architecture's base layer (and the packages it
// holds); nil: FROM scratch.
type imageBase func(arch string) ([]fileEntry, []debPin, error)

// writeImage writes the layout of the images (by platform, "linux/amd64"
// → the server's path, its daemon beside it) into w as a tar.
func writeImage(w io.Writer, version, ref string, created time.Time, bins map[string]string, base imageBase) error {
	if i := strings.LastIndex(ref, ":"); i < 0 || i < strings.LastIndex(ref, "/") || i == len(ref)-1 {
		return fmt.Errorf("image: -image %q: want REPOSITORY:TAG", ref)
	}
	var platforms []string
	for p := range bins {
		platforms = append(platforms, p)
	}
	slices.Sort(platforms)
	var images []platformImage
	for _, p := range platforms {
		goos, arch, ok := strings.Cut(p, "/")
		if !ok || goos != "linux" || arch == "" {
			return fmt.Errorf("image: platform %q: want linux/ARCH", p)
		}
		bin, err := os.ReadFile(bins[p])
		if err != nil {
			return fmt.Errorf("image: %w", err)
		}
		daemon, err := os.ReadFile(filepath.Join(filepath.Dir(bins[p]), daemonName))
		if err != nil {
			return fmt.Errorf("image: the supervisor daemon beside the server: %w", err)
		}
		var entries []fileEntry
		var debs []debPin
		if base != nil {
			if entries, debs, err = base(arch); err != nil {
				return fmt.Errorf("image: linux/%s: %w", arch, err)
			}
		}
		pi, err := buildPlatformImage(version, ocispec.Platform{OS: goos, Architecture: arch}, bin, daemon, entries, debs, created)
		if err != nil {
			return fmt.Errorf("image: %w", err)
		}
		images = append(images, pi)
	}
	if len(images) == 0 {
		return fmt.Errorf("image: no binaries given (linux/ARCH=PATH)")
	}
	index := ocispec.Index{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageIndex}
	type dockerEntry struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	var docker []dockerEntry
	var blobs []blob
	for _, pi := range images {
		d := pi.manifest.desc
		d.Platform = &ocispec.Platform{OS: pi.platform.OS, Architecture: pi.platform.Architecture}
		d.Annotations = map[string]string{ocispec.AnnotationRefName: ref + "-" + pi.platform.Architecture}
		index.Manifests = append(index.Manifests, d)
		blobs = append(blobs, pi.config, pi.manifest)
		blobs = append(blobs, pi.layers...)
		var layers []string
		for _, l := range pi.layers {
			layers = append(layers, blobPath(l.desc.Digest))
		}
		docker = append(docker, dockerEntry{
			Config:   blobPath(pi.config.desc.Digest),
			RepoTags: []string{ref + "-" + pi.platform.Architecture},
			Layers:   layers,
		})
	}
	// The multi-arch image itself: an index of the platforms' manifests,
	// named REF in the layout's top index.
	multi, err := jsonBlob(ocispec.MediaTypeImageIndex, ocispec.Index{
		Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageIndex, Manifests: index.Manifests,
	})
	if err != nil {
		return err
	}
	blobs = append(blobs, multi)
	top := multi.desc
	top.Annotations = map[string]string{ocispec.AnnotationRefName: ref}
	index.Manifests = append([]ocispec.Descriptor{top}, index.Manifests...)

	tw := tar.NewWriter(w)
	put := func(name string, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(data)), ModTime: created, Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	layoutFile, _ := json.Marshal(ocispec.ImageLayout{Version: ocispec.ImageLayoutVersion})
	indexFile, err := json.Marshal(index)
	if err != nil {
		return err
	}
	dockerFile, err := json.Marshal(docker)
	if err != nil {
		return err
	}
	if err := put(ocispec.ImageLayoutFile, layoutFile); err != nil {
		return err
	}
	if err := put("index.json", indexFile); err != nil {
		return err
	}
	if err := put("manifest.json", dockerFile); err != nil {
		return err
	}
	seen := map[digest.Digest]bool{}
	for _, b := range blobs {
		if seen[b.desc.Digest] {
			continue
		}
		seen[b.desc.Digest] = true
		if err := put(blobPath(b.desc.Digest), b.data); err != nil {
			return err
		}
	}
	return tw.Close()
}

func blobPath(d digest.Digest) string { return "blobs/" + d.Algorithm().String() + "/" + d.Encoded() }

func imageCmd(args []string) error {
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	version := fs.String("version", "", "the release's version")
	ref := fs.String("image", "", "the image's reference, REPOSITORY:TAG")
	epoch := fs.Int64("epoch", 0, "file and creation times, in seconds since 1970 (the commit's)")
	out := fs.String("out", "", "the tar to write")
	lock := fs.String("debs", "", "debs.lock: the Debian packages of the base layer (a shell and tools); none: FROM scratch")
	mirror := fs.String("mirror", "http://deb.debian.org/debian", "the Debian mirror the packages come from")
	cache := fs.String("cache", "", "a directory that keeps downloaded packages (by sha256)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var base imageBase
	if *lock != "" {
		pins, err := readLock(*lock)
		if err != nil {
			return fmt.Errorf("image: %w", err)
		}
		base = func(arch string) ([]fileEntry, []debPin, error) { return baseLayer(arch, pins, *mirror, *cache) }
	}
	if *version == "" || *out == "" {
		return fmt.Errorf("image: -version and -out are required")
	}
	bins := map[string]string{}
	for _, a := range fs.Args() {
		p, path, ok := strings.Cut(a, "=")
		if !ok {
			return fmt.Errorf("image: %q: want linux/ARCH=PATH", a)
		}
		bins[p] = path
	}
	var buf bytes.Buffer
	if err := writeImage(&buf, *version, *ref, time.Unix(*epoch, 0).UTC(), bins, base); err != nil {
		return err
	}
	return os.WriteFile(*out, buf.Bytes(), 0o644)
}
