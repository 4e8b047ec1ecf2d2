package docker

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"

	"github.com/sandbox-mcp/sandbox-mcp/internal/testkit"
)

// The pull's progress, summed up from the engine's stream: bytes of the
// layers whose size is known, layers done, and the error it ends with.
func TestPullProgress(t *testing.T) {
	t.Parallel()
	stream := `{"status":"Pulling from library/python","id":"3.13-slim"}
{"status":"Pulling fs layer","progressDetail":{},"id":"a1"}
{"status":"Pulling fs layer","progressDetail":{},"id":"b2"}
{"status":"Already exists","progressDetail":{},"id":"c3"}
{"status":"Downloading","progressDetail":{"current":1000000,"total":4000000},"id":"a1"}
{"status":"Downloading","progressDetail":{"current":500000,"total":1000000},"id":"b2"}`
	var pp pullProgress
	dec := json.NewDecoder(strings.NewReader(stream))
	for dec.More() {
		var m pullMessage
		if err := dec.Decode(&m); err != nil {
			t.Fatal(err)
		}
		if err := pp.update(m); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := pp.summary(), "1.5MB of 5MB (30%), 1 of 3 layers"; got != want {
		t.Errorf("summary %q, want %q", got, want)
	}
	pp.update(pullMessage{Status: "Download complete", ID: "a1"})
	if got, want := pp.summary(), "4.5MB of 5MB (90%), 2 of 3 layers"; got != want {
		t.Errorf("summary %q, want %q", got, want)
	}
	var m pullMessage
	json.Unmarshal([]byte(`{"errorDetail":{"message":"toomanyrequests: rate limit"},"error":"toomanyrequests: rate limit"}`), &m)
	if err := pp.update(m); err == nil || !strings.Contains(err.Error(), "toomanyrequests") {
		t.Errorf("an error in the stream: %v", err)
	}
}

// registry serves one image — a local one, saved from the engine — as a
// registry would (the distribution API, schema 2 manifest, gzip layers),
// on loopback, which the engine treats as an insecure registry by
// default. It returns the image's reference there.
func registry(t *testing.T, local string, delay time.Duration) string {
	t.Helper()
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	rc, err := cli.ImageSave(t.Context(), []string{local})
	if err != nil {
		t.Fatal(err)
	}
	saved := map[string][]byte{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		saved[h.Name], _ = io.ReadAll(tr)
	}
	rc.Close()
	var index []struct {
		Config string
		Layers []string
	}
	if err := json.Unmarshal(saved["manifest.json"], &index); err != nil || len(index) != 1 {
		t.Fatalf("docker save: manifest.json %s %v", saved["manifest.json"], err)
	}
	blobs := map[string][]byte{}
	digestOf := func(b []byte) string {
		s := sha256.Sum256(b)
		d := "sha256:" + hex.EncodeToString(s[:])
		blobs[d] = b
		return d
	}
	type desc struct {
		MediaType string `json:"mediaType"`
		Size      int    `json:"size"`
		Digest    string `json:"digest"`
	}
	// One more layer, of this test's own (a file of random bytes), so
	// that the engine has something to download and the pull makes
	// progress to log; the rest of the image it has already.
	var extra bytes.Buffer
	tw := tar.NewWriter(&extra)
	random := make([]byte, 3<<20)
	rand.Read(random)
	tw.WriteHeader(&tar.Header{Name: "pulled.bin", Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(random))})
	tw.Write(random)
	tw.Close()
	sum := sha256.Sum256(extra.Bytes())
	saved["extra/layer.tar"] = extra.Bytes()
	index[0].Layers = append(index[0].Layers, "extra/layer.tar")
	var config map[string]any
	if err := json.Unmarshal(saved[index[0].Config], &config); err != nil {
		t.Fatal(err)
	}
	rootfs := config["rootfs"].(map[string]any)
	rootfs["diff_ids"] = append(rootfs["diff_ids"].([]any), "sha256:"+hex.EncodeToString(sum[:]))
	if h, ok := config["history"].([]any); ok {
		config["history"] = append(h, map[string]any{"created_by": "pull_test: a layer of its own"})
	}
	cfg, _ := json.Marshal(config)
	manifest := struct {
		SchemaVersion int    `json:"schemaVersion"`
		MediaType     string `json:"mediaType"`
		Config        desc   `json:"config"`
		Layers        []desc `json:"layers"`
	}{2, "application/vnd.docker.distribution.manifest.v2+json", desc{"application/vnd.docker.container.image.v1+json", len(cfg), digestOf(cfg)}, nil}
	extraDigest := ""
	for _, l := range index[0].Layers {
		var z bytes.Buffer
		zw := gzip.NewWriter(&z)
		zw.Write(saved[l])
		zw.Close()
		manifest.Layers = append(manifest.Layers, desc{"application/vnd.docker.image.rootfs.diff.tar.gzip", z.Len(), digestOf(z.Bytes())})
		extraDigest = manifest.Layers[len(manifest.Layers)-1].Digest
	}
	mbytes, _ := json.Marshal(manifest)
	mdigest := digestOf(mbytes)
	route := regexp.MustCompile(`^/v2/[a-z0-9/_.-]+/(manifests|blobs)/(.+)$`)
	mux := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v2/" {
			w.Write([]byte("{}"))
			return
		}
		m := route.FindStringSubmatch(r.URL.Path)
		if m == nil {
			http.NotFound(w, r)
			return
		}
		b, typ := blobs[m[2]], "application/octet-stream"
		if m[1] == "manifests" {
			b, typ = mbytes, manifest.MediaType
		}
		if b == nil {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", typ)
		w.Header().Set("Docker-Content-Digest", map[bool]string{true: mdigest, false: m[2]}[m[1] == "manifests"])
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		if r.Method != http.MethodHead {
			if m[1] == "blobs" && m[2] == extraDigest {
				time.Sleep(delay) // a slow registry
			}
			w.Write(b)
		}
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String() + "/smcp-pull-" + randomPrefix(t)[len("smcp-test-"):] + ":t"
}

// An image the engine lacks is pulled on first use, its progress logged,
// and the thread's bash runs in it (issue #25 item 2). The server serves
// while the pull goes on: a call waits for it as long as the call may, and
// one that may not wait says the image is on its way. The registry is this
// test's own, on loopback: nothing is pulled from the internet.
func TestPullOnFirstUse(t *testing.T) {
	t.Parallel()
	requireDocker(t, busyboxImage)
	ref := registry(t, busyboxImage, 2*time.Second)
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	var logs testkit.Buffer
	cfg := Config{StateDir: t.TempDir(), ContainerPrefix: randomPrefix(t), Image: ref, Memory: "256m", Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	// Start-up does not wait for the pull.
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	p, err := New(ctx, cfg)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{p: p, cli: cli, cfg: cfg, prefix: cfg.ContainerPrefix}
	t.Cleanup(func() {
		p.Close()
		f.removeAll()
		cli.ImageRemove(context.Background(), ref, image.RemoveOptions{Force: true})
		cli.Close()
	})
	if !strings.Contains(logs.String(), "serving while the image is pulled") {
		t.Errorf("start-up waited for the pull, or did not say so:\n%s", logs.String())
	}
	ctx, cancel = context.WithTimeout(t.Context(), 200*time.Millisecond)
	_, err = p.Acquire(ctx, "impatient")
	cancel()
	if err == nil || !strings.Contains(err.Error(), "pulling the image "+ref+" for its first use") || !strings.Contains(err.Error(), "call again") {
		t.Errorf("a call that cannot wait for the pull: %v", err)
	}
	out, res := execOut(t, f.acquire(t, "pulled"), "echo hi from the pulled image")
	if out != "hi from the pulled image\n" || res.ExitCode != 0 {
		t.Fatalf("bash in the pulled image: %q %+v", out, res)
	}
	l := logs.String()
	if !strings.Contains(l, "pulling image (not on the engine yet; once)") || !regexp.MustCompile(`pulled image.*progress="[0-9.]+[kMG]?B of [0-9.]+[kMG]?B \(100%\), 2 of 2 layers"`).MatchString(l) {
		t.Errorf("the pull's progress is not in the log:\n%s", l)
	}
}

// A missing image that cannot be pulled (offline, no such registry) stops
// start-up with what failed and what to do; with docker.pull: never,
// nothing is pulled.
func TestPullFailsClearly(t *testing.T) {
	t.Parallel()
	requireDocker(t)
	for _, c := range []struct {
		pull string
		want []string
	}{
		{"", []string{"is not on the engine, and pulling it failed: ", "127.0.0.1:1", "docker.image", "build-images.sh"}},
		{PullNever, []string{"is not on the engine (docker.pull: never)", "docker pull 127.0.0.1:1/smcp-absent:t"}},
	} {
		_, err := New(t.Context(), Config{StateDir: t.TempDir(), ContainerPrefix: randomPrefix(t), Image: "127.0.0.1:1/smcp-absent:t", Pull: c.pull})
		if err == nil {
			t.Fatalf("pull %q: a missing image was taken", c.pull)
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("pull %q: %v\nwant it to say %q", c.pull, err, w)
			}
		}
	}
	if err := (&Config{Pull: "always"}).Validate(); err == nil || !strings.Contains(err.Error(), "docker.pull") {
		t.Errorf("docker.pull always: %v", err)
	}
}

// The default image is a stock one the engine can pull, not one only
// build-images.sh makes.
func TestDefaultImageIsStock(t *testing.T) {
	t.Parallel()
	var cfg Config
	setDefaults(&cfg)
	if cfg.Image != "python:3.13-slim" {
		t.Errorf("default image %q", cfg.Image)
	}
}
