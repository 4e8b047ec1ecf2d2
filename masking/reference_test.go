package masking

import (
	"strings"
	"testing"
)

// refMask is Mask before its fast path: every pair tried at every slash.
// The fast path (passing over slashes that no host can start at) must not
// change a single result.
func (m *Masker) refMask(s string) string {
	var b strings.Builder
	i, start := 0, 0
	for i < len(s) {
		j := strings.IndexByte(s[i:], '/')
		if j < 0 {
			break
		}
		i += j
		matched := false
		for _, p := range m.pairs {
			if strings.HasPrefix(s[i:], p.Host) && boundary(s, i+len(p.Host)) && startBoundary(s, i) {
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

func refMasker() *Masker {
	return New(
		Pair{Host: "/srv/state/threads/t1/user-data/workspace", Virtual: "/mnt/user-data/workspace"},
		Pair{Host: "/srv/state/threads/t1/user-data", Virtual: "/mnt/user-data"},
		Pair{Host: "/srv/state", Virtual: "/sandbox-mcp-state"},
		Pair{Host: "/opt/skills", Virtual: "/mnt/skills"},
		Pair{Host: "/s", Virtual: "/mnt/s"},
		Pair{Host: "/\u00e9t\u00e9", Virtual: "/mnt/summer"},
	)
}

func TestMaskMatchesReference(t *testing.T) {
	t.Parallel()
	m := refMasker()
	for _, s := range []string{
		"", "/", "//", "/s", "/s/", "/sx", "a/s", "(/s)", "/srv/state", "/srv/state/", "/srv/statex",
		"x /srv/state/threads/t1/user-data/workspace/a.txt y", "/opt/skills.", "/opt/skills./x",
		"/mnt/user-data/workspace/a/b/c", "/\u00e9t\u00e9/x", "/\u00e9", "/srv/state/srv/state /s/s",
		"trailing slash /", "/srv/state\n/opt/skills\t/s", "\xff/s\xff", "/s.", "/s..",
	} {
		if got, want := m.Mask(s), m.refMask(s); got != want {
			t.Errorf("Mask(%q) = %q, the reference says %q", s, got, want)
		}
	}
}

func FuzzMaskMatchesReference(f *testing.F) {
	m := refMasker()
	for _, s := range []string{"/srv/state/x", "a /s/b", "/opt/skills.", "//s", "/\u00e9t\u00e9"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := m.Mask(s), m.refMask(s); got != want {
			t.Errorf("Mask(%q) = %q, the reference says %q", s, got, want)
		}
	})
}
