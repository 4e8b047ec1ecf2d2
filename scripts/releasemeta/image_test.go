package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// The image tar is a valid OCI layout (every blob where its digest says,
// of its size), one image per architecture under one multi-arch index, the
// same bytes from the same input, and a Docker manifest.json beside it.
func TestImageLayout(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bins := map[string]string{}
	for _, a := range []string{"amd64", "arm64"} {
		p := filepath.Join(dir, a, "sandbox-mcp")
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, []byte("binary for "+a), 0o755)
		os.WriteFile(filepath.Join(dir, a, daemonName), []byte("daemon for "+a), 0o755)
		bins["linux/"+a] = p
	}
	created := time.Unix(1764000000, 0).UTC()
	var one, two bytes.Buffer
	if err := writeImage(&one, "1.2.3", "ghcr.io/x/y:1.2.3", created, bins, nil); err != nil {
		t.Fatal(err)
	}
	if err := writeImage(&two, "1.2.3", "ghcr.io/x/y:1.2.3", created, bins, nil); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(one.Bytes(), two.Bytes()) {
		t.Error("two writes of the same image differ")
	}
	files := map[string][]byte{}
	tr := tar.NewReader(&one)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name], _ = io.ReadAll(tr)
	}
	read := func(d ocispec.Descriptor, v any) {
		t.Helper()
		data, ok := files[blobPath(d.Digest)]
		if !ok || int64(len(data)) != d.Size || digest.FromBytes(data) != d.Digest {
			t.Fatalf("blob %s: missing, or of another size or digest", d.Digest)
		}
		if v != nil {
			if err := json.Unmarshal(data, v); err != nil {
				t.Fatalf("blob %s: %v", d.Digest, err)
			}
		}
	}
	var layout ocispec.ImageLayout
	json.Unmarshal(files["oci-layout"], &layout)
	if layout.Version != ocispec.ImageLayoutVersion {
		t.Errorf("oci-layout %s", files["oci-layout"])
	}
	var index ocispec.Index
	if err := json.Unmarshal(files["index.json"], &index); err != nil {
		t.Fatal(err)
	}
	if len(index.Manifests) != 3 || index.Manifests[0].MediaType != ocispec.MediaTypeImageIndex || index.Manifests[0].Annotations[ocispec.AnnotationRefName] != "ghcr.io/x/y:1.2.3" {
		t.Fatalf("index.json: %s", files["index.json"])
	}
	var multi ocispec.Index
	read(index.Manifests[0], &multi)
	if len(multi.Manifests) != 2 {
		t.Fatalf("the multi-arch index lists %d images", len(multi.Manifests))
	}
	for i, arch := range []string{"amd64", "arm64"} {
		d := multi.Manifests[i]
		if d.Platform == nil || d.Platform.OS != "linux" || d.Platform.Architecture != arch {
			t.Errorf("image %d: platform %+v, want linux/%s", i, d.Platform, arch)
		}
		var m ocispec.Manifest
		read(d, &m)
		var cfg ocispec.Image
		read(m.Config, &cfg)
		if cfg.Architecture != arch || cfg.OS != "linux" || cfg.Config.User != imageUser || cfg.Config.Labels["io.modelcontextprotocol.server.name"] != serverName ||
			cfg.Config.Labels["org.opencontainers.image.version"] != "1.2.3" || len(cfg.Config.Entrypoint) != 1 || cfg.Config.Entrypoint[0] != "/sandbox-mcp" {
			t.Errorf("%s config: %+v", arch, cfg)
		}
		if len(m.Layers) != 2 || len(cfg.RootFS.DiffIDs) != 2 {
			t.Fatalf("%s: %d layers, %d diff ids", arch, len(m.Layers), len(cfg.RootFS.DiffIDs))
		}
		read(m.Layers[0], nil)
		read(m.Layers[1], nil)
		// The binaries' layer: the server, the daemon beside it.
		got := map[string]string{}
		zr, err := gzip.NewReader(bytes.NewReader(files[blobPath(m.Layers[1].Digest)]))
		if err != nil {
			t.Fatal(err)
		}
		lr := tar.NewReader(zr)
		for {
			h, err := lr.Next()
			if err != nil {
				break
			}
			b, _ := io.ReadAll(lr)
			got[h.Name] = fmt.Sprintf("%s %o", b, h.Mode)
		}
		if len(got) != 2 || got["sandbox-mcp"] != "binary for "+arch+" 755" || got[daemonName] != "daemon for "+arch+" 755" {
			t.Errorf("%s: the binaries' layer holds %v", arch, got)
		}
	}
	var docker []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	if err := json.Unmarshal(files["manifest.json"], &docker); err != nil || len(docker) != 2 || docker[1].RepoTags[0] != "ghcr.io/x/y:1.2.3-arm64" {
		t.Fatalf("manifest.json: %s %v", files["manifest.json"], err)
	}
	for _, e := range docker {
		if _, ok := files[e.Config]; !ok {
			t.Errorf("manifest.json names %s, not in the tar", e.Config)
		}
	}
	// Bad input is refused, naming what is wrong.
	for _, ref := range []string{"no-tag", "localhost:5000/sandbox-mcp", "r:"} {
		if err := writeImage(io.Discard, "1", ref, created, bins, nil); err == nil {
			t.Errorf("a reference without a tag was taken: %s", ref)
		}
	}
	if err := writeImage(io.Discard, "1", "localhost:5000/sandbox-mcp:1", created, bins, nil); err != nil {
		t.Errorf("a registry with a port: %v", err)
	}
	if err := writeImage(io.Discard, "1", "r:t", created, map[string]string{"darwin/arm64": bins["linux/arm64"]}, nil); err == nil {
		t.Error("a darwin image was made")
	}
	os.Remove(filepath.Join(dir, "arm64", daemonName))
	if err := writeImage(io.Discard, "1", "r:t", created, bins, nil); err == nil || !strings.Contains(err.Error(), "the supervisor daemon beside the server") {
		t.Errorf("an image without the daemon: %v", err)
	}
}
