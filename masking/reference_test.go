package masking

import (
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// refMasker is Mask written the slow, plain way, to check Mask against:
// every form tried at every slash (no fast path, no precomputed risky set), each matched by a regular expression
// rather than by hand.
type refMasker struct {
	m        *Masker
	hosts    []*regexp.Regexp // as m.pairs
	virtuals []*regexp.Regexp
}

// loose is the expression of a clean absolute path whose separators may be
// after the first component spelled loosely ("//", "/./").
func loose(p string) *regexp.Regexp {
	parts := strings.Split(p[1:], "/")
	for i, c := range parts {
		parts[i] = regexp.QuoteMeta(c)
	}
	return regexp.MustCompile(`^/` + strings.Join(parts, `/(?:/|\./)*`))
}

func newRef(m *Masker) *refMasker {
	r := &refMasker{m: m}
	for _, p := range m.pairs {
		r.hosts = append(r.hosts, loose(p.Host))
	}
	// Every virtual form, longest first: Mask passes over only those
	// that hold a host, which must not change a result.
	var vs []string
	for _, p := range m.pairs {
		if !slices.Contains(vs, p.Virtual) {
			vs = append(vs, p.Virtual)
		}
	}
	sort.SliceStable(vs, func(i, j int) bool { return len(vs[i]) > len(vs[j]) })
	for _, v := range vs {
		r.virtuals = append(r.virtuals, loose(v))
	}
	return r
}

func (r *refMasker) host(s string, i int) (int, int) {
	for k, re := range r.hosts {
		if loc := re.FindStringIndex(s[i:]); loc != nil && boundary(s, i+loc[1]) {
			return k, i + loc[1]
		}
	}
	return -1, i
}

func (r *refMasker) mask(s string) string {
	var b strings.Builder
	i, start := 0, 0
	for i < len(s) {
		j := strings.IndexByte(s[i:], '/')
		if j < 0 {
			break
		}
		i += j
		k, hend := r.host(s, i)
		vend := -1
		for _, re := range r.virtuals {
			loc := re.FindStringIndex(s[i:])
			if loc == nil || !boundary(s, i+loc[1]) {
				continue
			}
			if i+loc[1] > hend {
				vend = i + loc[1]
				for q := i + 1; q < vend; q++ {
					if _, e := r.host(s, q); s[q] == '/' && e > vend {
						vend = -1
						break
					}
				}
			}
			break
		}
		switch {
		case vend >= 0:
			i = vend
		case k >= 0:
			b.WriteString(s[start:i])
			b.WriteString(r.m.pairs[k].Virtual)
			i = hend
			start = i
		default:
			i++
		}
	}
	if start == 0 {
		return s
	}
	b.WriteString(s[start:])
	return b.String()
}

func refPairs() []Pair {
	return []Pair{
		{Host: "/srv/state/threads/t1/user-data/workspace", Virtual: "/mnt/user-data/workspace"},
		{Host: "/srv/state/threads/t1/user-data", Virtual: "/mnt/user-data"},
		{Host: "/srv/state", Virtual: "/sandbox-mcp-state"},
		{Host: "/opt/skills", Virtual: "/mnt/skills"},
		{Host: "/s", Virtual: "/mnt/s"},
		{Host: "/\u00e9t\u00e9", Virtual: "/mnt/summer"},
		// Host paths that are the tail, or the head, of a virtual form.
		{Host: "/data", Virtual: "/mnt/data"},
		{Host: "/mnt", Virtual: "/mnt/host-mnt"},
		{Host: "/workspace/x", Virtual: "/mnt/wx"},
		{Host: "/my dir/a", Virtual: "/mnt/mine"},
	}
}

var refCases = []string{
	"", "/", "//", "/s", "/s/", "/sx", "a/s", "(/s)", "/srv/state", "/srv/state/", "/srv/statex",
	"x /srv/state/threads/t1/user-data/workspace/a.txt y", "/opt/skills.", "/opt/skills./x",
	"/mnt/user-data/workspace/a/b/c", "/\u00e9t\u00e9/x", "/\u00e9", "/srv/state/srv/state /s/s",
	"trailing slash /", "/srv/state\n/opt/skills\t/s", "\xff/s\xff", "/s.", "/s..",
	"x/srv/state/a", "//srv//state", "/srv/./state", "/srv/.//./state/x", "/./srv/state",
	"/mnt/data/x", "/data/x", "x/data", "/mnt/user-data/workspace/x", "/mnt/x", "/mnt",
	"/mnt/user-data/workspace/x/y", "/mnt/wx/y", "/mnt/user-data/workspace/x", "/my\\040dir/a/b",
	"/mnt//data", "//mnt/data", "a//mnt/data/x", "/mnt/data./x", "/././././s", "/s/./s/./s",
}

func TestMaskMatchesReference(t *testing.T) {
	t.Parallel()
	m := New(refPairs()...)
	r := newRef(m)
	for _, s := range refCases {
		got, want := m.Mask(s), r.mask(s)
		if got != want {
			t.Errorf("Mask(%q) = %q, the reference says %q", s, got, want)
		}
		if again := m.Mask(got); again != got {
			t.Errorf("Mask(%q) = %q, masked again %q", s, got, again)
		}
	}
}

func FuzzMaskMatchesReference(f *testing.F) {
	m := New(refPairs()...)
	r := newRef(m)
	for _, s := range refCases {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, want := m.Mask(s), r.mask(s)
		if got != want {
			t.Errorf("Mask(%q) = %q, the reference says %q", s, got, want)
		}
		// Idempotent, also with host paths that are the head or the tail
		// of a virtual form.
		if again := m.Mask(got); again != got {
			t.Errorf("Mask(%q) = %q, masked again %q", s, got, again)
		}
	})
}
