package tools

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// Where truncated outputs are kept whole, and how much of them.
const (
	SpillDir       = sandbox.SavedDir
	spillFileMax   = 64 << 20 // one saved output, one job's log
	spillKeepFiles = 50       // per thread, ended jobs' logs included, oldest removed first
	spillKeepBytes = 256 << 20
)

// spill keeps a tool's whole output so that the agent can page through it
// with read_file when the result had to be cut: in memory up to threshold
// bytes, past that in a file under SpillDir (at most spillFileMax bytes).
// Writes never fail; a spill that cannot be saved is simply not named.
type spill struct {
	ctx       context.Context
	fsys      sandbox.FS
	tool      string
	threshold int

	buf     []byte
	w       io.WriteCloser
	name    string
	written int64
	full    bool // spillFileMax reached
	failed  bool
}

func newSpill(ctx context.Context, fsys sandbox.FS, tool string, threshold int) *spill {
	return &spill{ctx: ctx, fsys: fsys, tool: tool, threshold: threshold}
}

func (s *spill) Write(p []byte) (int, error) {
	n := len(p)
	if s.failed || s.full {
		return n, nil
	}
	if s.w == nil {
		if len(s.buf)+len(p) <= s.threshold {
			s.buf = append(s.buf, p...)
			return n, nil
		}
		if !s.open() {
			return n, nil
		}
	}
	if room := spillFileMax - s.written; int64(len(p)) > room {
		p = p[:room]
		s.full = true
	}
	k, err := s.w.Write(p)
	s.written += int64(k)
	if err != nil {
		s.failed = true
	}
	return n, nil
}

// Full reports whether the saved output reached its cap: producing more is useless.
func (s *spill) Full() bool { return s.full || s.failed }

func (s *spill) open() bool {
	var rnd [3]byte
	rand.Read(rnd[:])
	s.name = fmt.Sprintf("%s/%s-%s-%s.txt", SpillDir, time.Now().UTC().Format("20060102T150405.000000Z"), s.tool, hex.EncodeToString(rnd[:]))
	w, err := s.fsys.Create(s.ctx, s.name)
	if err != nil {
		s.failed = true
		return false
	}
	s.w = w
	buf := s.buf
	s.buf = nil
	s.Write(buf)
	return !s.failed
}

// Finish saves the output when keep (the result was cut) and returns its
// virtual path, or "" when nothing was saved.
func (s *spill) Finish(keep bool) string {
	if !keep {
		if s.w != nil {
			s.w.Close()
			s.remove()
		}
		return ""
	}
	if s.w == nil && !s.open() {
		return ""
	}
	if err := s.w.Close(); err != nil || s.failed {
		s.remove()
		return ""
	}
	s.prune()
	return s.name
}

// remove removes the file begun: a cleanup, done though the call was
// canceled (it ends so, often).
func (s *spill) remove() {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(s.ctx), 30*time.Second)
	defer cancel()
	s.fsys.Remove(ctx, s.name)
}

// prune removes the oldest saved outputs and ended jobs' logs (read-only)
// beyond the per-thread bounds (sandbox.PruneSaved), never the output
// just saved; a running job's log is neither counted nor removed.
func (s *spill) prune() {
	var files []sandbox.Saved
	for _, dir := range []string{SpillDir, sandbox.JobLogDir} {
		entries, err := s.fsys.ReadDir(s.ctx, dir)
		if err != nil {
			continue
		}
		for _, e := range entries {
			_, log := sandbox.JobLogNumber(e.Name())
			if !e.Type().IsRegular() || dir == SpillDir && !sandbox.SavedOutput(e.Name()) || dir != SpillDir && !log {
				continue
			}
			fi, err := e.Info()
			if err != nil {
				continue
			}
			if log && fi.Mode().Perm()&0o200 != 0 {
				continue // a running job's: neither counted nor removed
			}
			name := dir + "/" + e.Name()
			files = append(files, sandbox.Saved{Name: name, Size: fi.Size(), ModTime: fi.ModTime(), Keep: name == s.name})
		}
	}
	for _, f := range sandbox.PruneSaved(files, spillKeepFiles, spillKeepBytes) {
		s.fsys.Remove(s.ctx, f.Name)
	}
}

// Saved names where a cut output is kept whole: the file a result's
// notice names, as a virtual path and as the MCP resource of it.
type Saved struct {
	SavedTo  string `json:"saved_to,omitempty" jsonschema_description:"Where the whole output is, when the answer was cut: a virtual path (read it with read_file) under /mnt/user-data/outputs."`
	SavedURI string `json:"saved_uri,omitempty" jsonschema_description:"The same file as an MCP resource (resources/read)."`
}

func savedAt(path string) Saved {
	if path == "" {
		return Saved{}
	}
	return Saved{SavedTo: path, SavedURI: OutputsURI(path)}
}

// OutputsScheme is the URI prefix of the files under /mnt/user-data/outputs
// as MCP resources (SPEC §13).
const OutputsScheme = "sandbox://outputs/"

// OutputsURI is the resource URI of a virtual path under
// /mnt/user-data/outputs ("" for another).
func OutputsURI(name string) string {
	rel, ok := strings.CutPrefix(name, sandbox.OutputsDir+"/")
	if !ok || rel == "" {
		return ""
	}
	parts := strings.Split(rel, "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return OutputsScheme + strings.Join(parts, "/")
}
