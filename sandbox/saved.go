package sandbox

import (
	"slices"
	"strconv"
	"strings"
	"time"
)

// SavedDir holds a thread's saved results (SPEC §13): the whole outputs
// the tools had to cut (*.txt, directly in it) and, in JobLogDir below it,
// the jobs' logs (j<N>.log). They share one bound per thread, kept by
// whoever adds to them — the tools after saving an output, a sandbox's
// supervisor when a job starts and when it ends — with one rule
// (PruneSaved): past the bound, the oldest are removed first, saved
// outputs and ended jobs' logs alike. A running job's log is neither
// counted nor removed (its own cap and the cap on running jobs bound it);
// its supervisor makes it read-only when the job ends, which is how any
// reader of the files tells an ended job's log.
const SavedDir = OutputsDir + "/.tool-results"

// Saved is one file of a thread's saved results.
type Saved struct {
	Name    string
	Size    int64
	ModTime time.Time
	Keep    bool // counted, never removed (the output being saved)
}

// SavedOutput reports whether name, in SavedDir, is a saved output.
func SavedOutput(name string) bool { return strings.HasSuffix(name, ".txt") }

// JobLogNumber is N of a job's log name in JobLogDir, j<N>.log (N from 1,
// under 10^9, no leading zero).
func JobLogNumber(name string) (uint64, bool) {
	num, okj := strings.CutPrefix(name, "j")
	num, oklog := strings.CutSuffix(num, ".log")
	if !okj || !oklog || num == "" || num[0] == '0' {
		return 0, false
	}
	v, err := strconv.ParseUint(num, 10, 64)
	return v, err == nil && v < 1e9
}

// PruneSaved returns the files to remove, oldest first (by modification
// time, then name), so that the rest hold at most maxFiles files and
// maxBytes bytes (0: no limit) — or as near as the files kept allow.
func PruneSaved(files []Saved, maxFiles int, maxBytes int64) []Saved {
	n, total := len(files), int64(0)
	for _, f := range files {
		total += f.Size
	}
	over := func() bool { return maxFiles > 0 && n > maxFiles || maxBytes > 0 && total > maxBytes }
	if !over() {
		return nil
	}
	byAge := slices.Clone(files)
	slices.SortFunc(byAge, func(a, b Saved) int {
		if c := a.ModTime.Compare(b.ModTime); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	var remove []Saved
	for _, f := range byAge {
		if !over() {
			break
		}
		if f.Keep {
			continue
		}
		remove = append(remove, f)
		n--
		total -= f.Size
	}
	return remove
}
