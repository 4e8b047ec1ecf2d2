package masking

import (
	"path/filepath"
	"sort"
	"strings"
)

// Pair maps a host path to what the agent sees instead.
type Pair struct {
	Host    string
	Virtual string
}

// Masker replaces host paths with virtual ones. It is immutable and safe for
// concurrent use.
type Masker struct {
	pairs []Pair // longest host first
	// second marks the bytes that follow the leading "/" of some host: a
	// slash followed by anything else starts no host, and most slashes in
	// a tool's output (those of virtual paths) are passed over at once.
	second [256]bool
}

// New builds a Masker. Each host path is also masked in its
// symlink-resolved form; "/", empty and relative host paths are ignored
// (masking "/" would rewrite every path). Virtual forms should end in a
// path character so that masking twice changes nothing.
func New(pairs ...Pair) *Masker {
	seen := map[string]bool{}
	m := &Masker{}
	add := func(host, virtual string) {
		host = strings.TrimRight(host, "/")
		if host == "" || seen[host] {
			return
		}
		seen[host] = true
		m.pairs = append(m.pairs, Pair{Host: host, Virtual: virtual})
		m.second[host[1]] = true // host is absolute and not "/": it has a second byte
	}
	for _, p := range pairs {
		if !filepath.IsAbs(p.Host) {
			continue
		}
		clean := filepath.Clean(p.Host)
		add(clean, p.Virtual)
		if real, err := filepath.EvalSymlinks(clean); err == nil {
			add(real, p.Virtual)
		}
	}
	sort.SliceStable(m.pairs, func(i, j int) bool { return len(m.pairs[i].Host) > len(m.pairs[j].Host) })
	return m
}

// Mask rewrites every host path of the set found in s, longest first, where
// it ends at a path boundary: "/srv/a" is masked in "/srv/a", "/srv/a/x" and
// "(/srv/a)", not in "/srv/ab". Text already masked is left alone.
func (m *Masker) Mask(s string) string {
	if m == nil || len(m.pairs) == 0 {
		return s
	}
	var b strings.Builder
	i := 0     // s[:i] is done
	start := 0 // s[start:i] is pending copy
	for i < len(s) {
		j := strings.IndexByte(s[i:], '/')
		if j < 0 {
			break
		}
		i += j
		if i+1 == len(s) || !m.second[s[i+1]] || !startBoundary(s, i) {
			i++
			continue
		}
		matched := false
		for _, p := range m.pairs {
			if strings.HasPrefix(s[i:], p.Host) && boundary(s, i+len(p.Host)) {
				if start == 0 {
					b.Grow(len(s)) // virtual forms are mostly shorter
				}
				b.WriteString(s[start:i])
				b.WriteString(p.Virtual)
				i += len(p.Host)
				start = i
				matched = true
				break
			}
		}
		if !matched {
			i++
		}
	}
	if start == 0 {
		return s
	}
	b.WriteString(s[start:])
	return b.String()
}

// boundary: the match ends the path or a component of it.
func boundary(s string, end int) bool {
	if end >= len(s) || !pathByte(s[end]) {
		return true
	}
	// A full stop ending a sentence is not part of the path.
	return s[end] == '.' && (end+1 == len(s) || !pathByte(s[end+1]))
}

// startBoundary: the match does not continue a longer path component
// ("x/srv/a" is another path). A slash before it is allowed: "//srv/a".
func startBoundary(s string, i int) bool {
	if i == 0 {
		return true
	}
	c := s[i-1]
	return c == '/' || !pathByte(c)
}

func pathByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c == '.' || c == '_' || c == '-' || c == '~' || c == '+' || c == '@' || c >= 0x80
}
