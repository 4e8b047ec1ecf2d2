package masking

import (
	"bufio"
	"io"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
)

// Mounts is a mount table as /proc/self/mountinfo gives it: for each
// mount, its mount point and its root, the directory of its file system
// that it shows (a bind mount's source, relative to that file system).
//
// A sandbox's /proc/self/mountinfo names its bind mounts by their root:
// the host directory relative to the file system it is on. With the state
// dir on a file system of its own, mounted at /srv/state, a thread's
// workspace shows there as /threads/<thread>/user-data/workspace. Pairs
// gives those forms to mask too.
type Mounts struct {
	list []mountEntry
}

type mountEntry struct {
	root, point string
}

// ReadMounts reads this process's mount table.
func ReadMounts() (*Mounts, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ParseMountInfo(f)
}

// ParseMountInfo parses a mount table in the format of
// /proc/self/mountinfo (proc(5)); lines it cannot read are skipped.
func ParseMountInfo(r io.Reader) (*Mounts, error) {
	t := &Mounts{}
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		// id parent major:minor root mount-point options ...
		f := strings.Fields(sc.Text())
		if len(f) < 5 {
			continue
		}
		root, point := unescapeMountinfo(f[3]), unescapeMountinfo(f[4])
		if !path.IsAbs(root) || !path.IsAbs(point) {
			continue
		}
		t.list = append(t.list, mountEntry{root: path.Clean(root), point: path.Clean(point)})
	}
	return t, sc.Err()
}

// unescapeMountinfo undoes the octal escapes of mountinfo ("\040" for a
// space).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// Relative returns host (symlinks resolved) as its file system knows it:
// the root of the mount it lies under joined with the rest of the path.
// ok is false when that is host itself (a mount whose root is its mount
// point, as "/" usually is) or when it is not specific: fewer than two
// components. "/" or "/data" names no more than one directory of some
// file system, and masking it would rewrite paths that are not ours
// (every path, or the sandbox's own /data).
func (t *Mounts) Relative(host string) (rel string, ok bool) {
	if t == nil || !filepath.IsAbs(host) {
		return "", false
	}
	host = filepath.Clean(host)
	if r, err := filepath.EvalSymlinks(host); err == nil {
		host = r
	}
	best := -1
	for i, m := range t.list {
		if within(host, m.point) && (best < 0 || len(m.point) >= len(t.list[best].point)) {
			best = i // the longest mount point; of equal ones the last, which shadows the others
		}
	}
	if best < 0 {
		return "", false
	}
	m := t.list[best]
	rel = path.Join(m.root, strings.TrimPrefix(host, m.point))
	if rel == host || strings.Count(strings.Trim(rel, "/"), "/") < 1 {
		return "", false
	}
	return rel, true
}

// Pairs returns, for each pair whose host path has a specific form
// relative to its file system (see Relative), that form with the same
// virtual path.
func (t *Mounts) Pairs(pairs []Pair) []Pair {
	var out []Pair
	for _, p := range pairs {
		if rel, ok := t.Relative(p.Host); ok {
			out = append(out, Pair{Host: rel, Virtual: p.Virtual})
		}
	}
	return out
}

// within: p is dir or lies under it.
func within(p, dir string) bool {
	return dir == "/" || p == dir || strings.HasPrefix(p, dir+"/")
}
