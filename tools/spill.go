package tools

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// Where truncated outputs are kept whole, and how much of them.
const (
	SpillDir       = sandbox.OutputsDir + "/.tool-results"
	spillFileMax   = 64 << 20  // one saved output
	spillKeepFiles = 50        // per thread, oldest removed first
	spillKeepBytes = 256 << 20 // per thread, oldest removed first
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
			s.fsys.Remove(s.ctx, s.name)
		}
		return ""
	}
	if s.w == nil && !s.open() {
		return ""
	}
	if err := s.w.Close(); err != nil || s.failed {
		s.fsys.Remove(s.ctx, s.name)
		return ""
	}
	s.prune()
	return s.name
}

// prune removes the oldest saved outputs beyond the per-thread bounds.
func (s *spill) prune() {
	entries, err := s.fsys.ReadDir(s.ctx, SpillDir)
	if err != nil {
		return
	}
	type saved struct {
		name string
		size int64
	}
	var files []saved
	var total int64
	for _, e := range entries {
		if !e.Type().IsRegular() || !strings.HasSuffix(e.Name(), ".txt") {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue
		}
		files = append(files, saved{SpillDir + "/" + e.Name(), fi.Size()})
		total += fi.Size()
	}
	slices.SortFunc(files, func(a, b saved) int { return strings.Compare(a.name, b.name) }) // oldest first
	for len(files) > 1 && (len(files) > spillKeepFiles || total > spillKeepBytes) {
		if files[0].name != s.name {
			s.fsys.Remove(s.ctx, files[0].name)
			total -= files[0].size
		}
		files = files[1:]
	}
}
