package docker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"strings"
	"time"

	"github.com/docker/docker/api/types/image"
	units "github.com/docker/go-units"
)

// An image the engine lacks is pulled on first use (docker.pull: missing,
// the default), so that the default image — a stock one from Docker Hub —
// needs no step before the first call, on macOS and Windows as on Linux.
// The pull is the engine's own (ImagePull: its registry, its credentials,
// its platform); its progress goes to the log, a line every few seconds.
// docker.pull: never makes a missing image an error at once (an engine
// that must not reach a registry).

// Pull policies (docker.pull).
const (
	PullMissing = "missing" // the default: pull an image the engine lacks
	PullNever   = "never"   // a missing image is an error
)

// DefaultImage is docker.image's default: a stock image from Docker Hub
// that the engine pulls on first use. python:3.13-slim is Debian 13 slim
// with bash, coreutils, grep, sed, findutils, tar and gzip, Python 3.13 with
// pip and CA certificates: what an agent reaches for first (a shell and a
// Python), ~45 MB to pull (debian:bookworm-slim is ~28 MB but has no
// Python; busybox has no bash). Multi-architecture: amd64 and arm64 (Docker
// Desktop on Apple silicon). The tag names a Python minor version, so the
// image changes only with its patch releases and Debian's fixes.
// sandbox-mcp-base:latest (deploy/docker/build-images.sh) stays an option:
// built offline from Debian packages, with procps and a sandbox user.
const DefaultImage = "python:3.13-slim"

// ErrImageMissing: the image is not on the engine, and docker.pull: never
// forbids pulling it.
var ErrImageMissing = errors.New("the image is not on the engine")

// errPulling: the image is being pulled; a call made meanwhile waits for it
// as long as the call may, then answers this.
var errPulling = errors.New("pulling the image")

// pullProgress sums up an ImagePull stream: the layers, the bytes of those
// whose size is known, and which are done.
type pullProgress struct {
	layers map[string]*layerProgress
	order  []string
}

type layerProgress struct {
	current, total int64
	done           bool
}

// pullMessage is one line of the stream (the engine's JSONMessage).
type pullMessage struct {
	Status   string `json:"status"`
	ID       string `json:"id"`
	Progress *struct {
		Current int64 `json:"current"`
		Total   int64 `json:"total"`
	} `json:"progressDetail"`
	Error *struct {
		Message string `json:"message"`
	} `json:"errorDetail"`
	ErrorMessage string `json:"error"`
}

// update takes one message; it returns the pull's error, if it says one.
func (pp *pullProgress) update(m pullMessage) error {
	if m.Error != nil && m.Error.Message != "" {
		return errors.New(m.Error.Message)
	}
	if m.ErrorMessage != "" {
		return errors.New(m.ErrorMessage)
	}
	if m.ID == "" || strings.HasPrefix(m.Status, "Pulling from ") { // the tag's line, not a layer's
		return nil
	}
	l := pp.layers[m.ID]
	if l == nil {
		if pp.layers == nil {
			pp.layers = map[string]*layerProgress{}
		}
		l = &layerProgress{}
		pp.layers[m.ID] = l
		pp.order = append(pp.order, m.ID)
	}
	switch m.Status {
	case "Downloading":
		if m.Progress != nil {
			l.current = m.Progress.Current
			if m.Progress.Total > 0 {
				l.total = m.Progress.Total
			}
		}
	case "Download complete", "Verifying Checksum", "Extracting", "Pull complete", "Already exists":
		l.done = true
		if l.total > 0 {
			l.current = l.total
		}
	}
	return nil
}

// summary is the progress in words: "12.1MB of 45.3MB (27%), 1 of 4 layers".
func (pp *pullProgress) summary() string {
	var cur, total int64
	done := 0
	for _, id := range pp.order {
		l := pp.layers[id]
		cur += l.current
		total += l.total
		if l.done {
			done++
		}
	}
	layers := fmt.Sprintf("%d of %d layers", done, len(pp.order))
	if total == 0 {
		return layers
	}
	return fmt.Sprintf("%s of %s (%d%%), %s", units.HumanSize(float64(cur)), units.HumanSize(float64(total)), cur*100/total, layers)
}

// pullImage has the engine pull ref, logging its progress every
// `every`; the pull's state is kept for calls that wait meanwhile
// (pullState). It returns what the engine said went wrong.
func (p *Provider) pullImage(ctx context.Context, ref string, every time.Duration) error {
	start := time.Now()
	p.log.Info("docker provider: pulling image (not on the engine yet; once)", "image", ref)
	p.setPullState("starting")
	defer p.setPullState("")
	rc, err := p.cli.ImagePull(ctx, ref, image.PullOptions{})
	if err != nil {
		return err
	}
	defer rc.Close()
	var pp pullProgress
	last := time.Now()
	dec := json.NewDecoder(rc)
	for {
		var m pullMessage
		if err := dec.Decode(&m); err == io.EOF {
			break
		} else if err != nil {
			return fmt.Errorf("the engine's answer: %w", err)
		}
		if err := pp.update(m); err != nil {
			return err
		}
		p.setPullState(pp.summary())
		if time.Since(last) >= every {
			last = time.Now()
			p.log.Info("docker provider: pulling image", "image", ref, "progress", pp.summary())
		}
	}
	p.log.Info("docker provider: pulled image", "image", ref, "progress", pp.summary(), "seconds", int(time.Since(start).Seconds()))
	return nil
}

func (p *Provider) setPullState(s string) {
	p.connectMu.Lock()
	p.pulling = s
	p.connectMu.Unlock()
}

// pullError says that the image is missing and could not be pulled, and
// what to do.
func pullError(ref string, err error) error {
	msg := strings.ReplaceAll(err.Error(), "\n", " ")
	return fmt.Errorf("docker provider: image %s is not on the engine, and pulling it failed: %s; the engine must reach the image's registry once (offline? `docker pull %s` where it can, then `docker save`/`docker load`), or set docker.image to an image the engine has (sandbox-mcp-base:latest is built offline from Debian packages by deploy/docker/build-images.sh base)", ref, msg, ref)
}

// missingError says that the image is missing and docker.pull forbids a
// pull.
func missingError(ref string) error {
	return fmt.Errorf("docker provider: image %s is not on the engine (docker.pull: never): `docker pull %s`, or set docker.image to an image the engine has (sandbox-mcp-base:latest: deploy/docker/build-images.sh base, offline from Debian packages)%w", ref, ref, quiet{ErrImageMissing})
}

// quiet wraps an error for errors.Is without adding to the message.
type quiet struct{ err error }

func (q quiet) Error() string { return "" }
func (q quiet) Unwrap() error { return q.err }
