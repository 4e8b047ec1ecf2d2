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
	pairs    []Pair   // longest host first
	virtuals []string // longest first: text passed over whole (see New)
	// risky marks the virtual forms inside which a host may start and run
	// on past their end: only those are checked before they are passed over.
	risky map[string]bool
	// second marks the bytes that follow the leading "/" of some host or
	// virtual form: a slash followed by anything else starts no host, and
	// most slashes in a tool's output (those inside virtual paths) are
	// passed over at once.
	second [256]bool
	// secrets, if set, replaces secrets before any path is masked
	// (secrets.go).
	secrets *strings.Replacer
}

// New builds a Masker. Each host path is also masked in its
// symlink-resolved form, and in the form /proc/self/mountinfo writes it
// (space, tab, newline and backslash as octal escapes). "/", empty and
// relative host paths are ignored (masking "/" would rewrite every path).
// Virtual forms should end in a path character so that masking twice
// changes nothing.
func New(pairs ...Pair) *Masker {
	seen := map[string]bool{}
	m := &Masker{risky: map[string]bool{}}
	add := func(host, virtual string) {
		for _, h := range []string{host, mountinfoEscape(host)} {
			h = strings.TrimRight(h, "/")
			if h == "" || seen[h] {
				continue
			}
			seen[h] = true
			m.pairs = append(m.pairs, Pair{Host: h, Virtual: virtual})
			m.second[h[1]] = true // h is absolute and not "/": it has a second byte
		}
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
	if len(m.pairs) == 0 {
		return m
	}
	sort.SliceStable(m.pairs, func(i, j int) bool { return len(m.pairs[i].Host) > len(m.pairs[j].Host) })
	// A virtual form is passed over whole only where that matters: where
	// a host starts inside it (at one of its slashes, the first one too),
	// which masking its text again would rewrite.
	vseen := map[string]bool{}
	for _, p := range m.pairs {
		v := p.Virtual
		if len(v) < 2 || v[0] != '/' || vseen[v] {
			continue
		}
		vseen[v] = true
		holds := false
		for k := 0; k < len(v); k++ {
			if v[k] != '/' {
				continue
			}
			for _, h := range m.pairs {
				if strings.HasPrefix(v[k:], h.Host) {
					holds = true
				}
				if k > 0 && len(h.Host) > len(v)-k && strings.HasPrefix(h.Host, v[k:]) {
					holds = true
					m.risky[v] = true // h may run on past v's end
				}
			}
		}
		if holds {
			m.virtuals = append(m.virtuals, v)
			m.second[v[1]] = true
		}
	}
	sort.SliceStable(m.virtuals, func(i, j int) bool { return len(m.virtuals[i]) > len(m.virtuals[j]) })
	return m
}

// mountinfoEscape writes p as /proc/self/mountinfo does.
func mountinfoEscape(p string) string {
	if !strings.ContainsAny(p, " \t\n\\") {
		return p
	}
	r := strings.NewReplacer(" ", `\040`, "\t", `\011`, "\n", `\012`, `\`, `\134`)
	return r.Replace(p)
}

// Mask rewrites every host path of the set found in s, longest first, where
// it ends at a path boundary: "/srv/a" is masked in "/srv/a", "/srv/a/x",
// "(/srv/a)" and "x/srv/a", not in "/srv/ab". Whatever comes before it, a
// host path is masked: text glued to it ("x/srv/a", "--dir=/srv/a") does
// not hide it. Its separators may be spelled loosely, as a shell or a
// concatenation writes them: "/srv//a" and "/srv/./a" are "/srv/a"
// ("//srv/a" keeps its first slash: "/" then "/srv/a").
// Virtual paths already in s are left alone, so masking twice changes
// nothing. Mask takes time linear in len(s): a long line can be masked
// whole before it is cut.
func (m *Masker) Mask(s string) string {
	if m != nil && m.secrets != nil {
		s = m.secrets.Replace(s)
	}
	if m == nil || len(m.pairs) == 0 {
		return s
	}
	var b strings.Builder
	i := 0     // s[:i] is scanned
	start := 0 // s[start:i] is pending copy
	for i < len(s) {
		j := strings.IndexByte(s[i:], '/')
		if j < 0 {
			break
		}
		i += j
		if i+1 == len(s) || !m.second[s[i+1]] {
			i++
			continue
		}
		host, end := m.matchHost(s, i)
		if vend := m.matchVirtual(s, i, end); vend >= 0 {
			i = vend
			continue
		}
		if host == nil {
			i++
			continue
		}
		if start == 0 {
			b.Grow(len(s)) // virtual forms are mostly shorter
		}
		b.WriteString(s[start:i])
		b.WriteString(host.Virtual)
		i = end
		start = i
	}
	if start == 0 {
		return s
	}
	b.WriteString(s[start:])
	return b.String()
}

// matchHost returns the longest host that s[i:] starts with (ending at a
// path boundary), and where its text ends; nil when none does.
func (m *Masker) matchHost(s string, i int) (*Pair, int) {
	for k := range m.pairs {
		if end := match(s, i, m.pairs[k].Host); end >= 0 && boundary(s, end) {
			return &m.pairs[k], end
		}
	}
	return nil, i
}

// matchVirtual returns where the virtual form that s[i:] starts with ends,
// when it runs past hostEnd (the end of the host matched there, if any)
// and no host starts inside it to run on past its end; -1 otherwise.
func (m *Masker) matchVirtual(s string, i, hostEnd int) int {
	for _, v := range m.virtuals {
		end := match(s, i, v)
		if end < 0 || !boundary(s, end) {
			continue
		}
		if end <= hostEnd {
			return -1
		}
		if m.risky[v] {
			for k := i + 1; k < end; k++ {
				if s[k] == '/' {
					if _, e := m.matchHost(s, k); e > end {
						return -1
					}
				}
			}
		}
		return end
	}
	return -1
}

// match returns where host's text ends when s[i:] starts with it, the
// separators after its first component spelled loosely ("//", "/./" for
// "/"); -1 otherwise. host is clean and absolute. Extra separators before
// it are not its own: "file:///srv/a" keeps its three slashes.
func match(s string, i int, host string) int {
	j := i
	for k := 0; k < len(host); k++ {
		if j >= len(s) || s[j] != host[k] {
			return -1
		}
		j++
		if host[k] != '/' || k == 0 {
			continue
		}
		for j < len(s) {
			if s[j] == '/' {
				j++
			} else if s[j] == '.' && j+1 < len(s) && s[j+1] == '/' {
				j += 2
			} else {
				break
			}
		}
	}
	return j
}

// boundary: the match ends the path or a component of it.
func boundary(s string, end int) bool {
	if end >= len(s) || !pathByte(s[end]) {
		return true
	}
	// A full stop ending a sentence is not part of the path.
	return s[end] == '.' && (end+1 == len(s) || !pathByte(s[end+1]))
}

func pathByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c == '.' || c == '_' || c == '-' || c == '~' || c == '+' || c == '@' || c >= 0x80
}
