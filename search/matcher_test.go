package search

import (
	"bytes"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"regexp/syntax"
	"slices"
	"strings"
	"testing"
)

// refLines is what grepMatcher.lines must return: the lines that the
// pattern matches, each tested alone.
func refLines(expr string, data []byte) []int {
	re := regexp.MustCompile(expr)
	var out []int
	for i, l := range grepLines(data) {
		if re.Match(l) {
			out = append(out, i)
		}
	}
	return out
}

// refStarts returns the offsets where the given lines of data start.
func refStarts(data []byte, lines []int) []int {
	var starts []int
	off := 0
	for i, l := range grepLines(data) {
		if slices.Contains(lines, i) {
			starts = append(starts, off)
		}
		off += len(l) + 1
	}
	return starts
}

var matcherTexts = []string{
	"",
	"\n",
	"\n\n\n",
	"no newline at the end",
	"Hello world\nfoo bar\nHELLO again\n",
	"hello crlf\r\nbye\r\n\r\n",
	"errors.New(x)\nerrors.new\nERRORS.NEW\nfmt.Errorf\nerrors.Newer",
	"func Foo(\nfunc foo(\nfunc  Bar(\n\tfunc Baz_1(x)\nfunc X(",
	"ab12( ab( ab1\nfunc X*(x) func Y(\n",
	"x\u017fx XSX xsY\nFUNC Foo(\nfunc (x\nErrors.NEW( errors.new\nAB12C ab\u212a\n",
	strings.Repeat("func Xy ", 50) + "func Z(\n" + strings.Repeat("func Xy ", 50) + "\nfunc Xy func Q(",
	"a12bbccc a1bcc a9bbcccc\nabbcc\nab  \nab12 ab\t\nab\n12\na2 a12 a3\n",
	"func x; func Y(\nfunc func Z(\nfuncfunc A(\nfunc b func\nab abc ab\nabab",
	"abé ab\u212a abK abk ab\xff a12 a1 ab\nab\r\nabcd abd ab-",
	"mutex\nMutex\nMUTEX\nmutexes\na mutex.\nsync.Mutex{}\némutex\n_mutex",
	"mask\nMASK\nma\u017fk\nMA\u212aS\nkelvin \u212a\nlong \u017f\nks KS",
	"invalid \xff\xfe utf-8\n\xef\xbf\xbd replacement\nmore \xc3\n",
	"a\nb\na\nab\nba\n",
	"x\x00y\nzz\n",
	"line one\nline two\nline three",
	strings.Repeat("abc ", 3000) + "\nneedle at the end",
}

var matcherPatterns = []string{
	"errors.New", `errors\.New`, "(?i)errors.new", `(?i)errors\.New`,
	`func [A-Z][A-Za-z0-9_]*\(`, `(?i)\bmutex\b`, `\bmutex\b`, "(?i)mutex",
	"(?i)mask", "(?i)MASK", "(?i)kelvin", "(?i)ks", "(?i)long s", "\u212a", "\u017f",
	"^a$", "^b", "a$", `\Aa`, `b\z`, `\Aline`, `(?m)^line`, "(?s)a.b", `a\nb`, `a\sb`,
	"", "x*", "^", "$", `\b`, `(foo)+`, "(needle)", "(?i)(needle){2,}", "ne+dle",
	"\ufffd", `[^a]*`, "zz|ab", "(?i)hello", "hello", "bye\r", `\r$`,
	"(?i)line t", "line t(wo|hree)", "(?U)a+", "\\x00",
	`func \w+$`, `func [a-z]+\(`, `ab\b`, `abc?`, `ab$`, `errors\.New\(`, `(?i:ab)c`, "ab(?i)c",
	`ab[^c]`, `ab[é]`, `ab[0-9]*\Q(`, `func [A-Z]\Q*(`,
	`(?i)func [a-z]+\(`, `func [A-Z].*\(`, `(?i)ab[0-9]*c`, `(?i)errors\.new\(`, `(?i)xs[x-y]`, `(?i)ab[c-d]+`, `(?i)a[0-9]+$`,
	`[0-9][\s\S]*[yz]`, `[0-9]\s*[xy]{2}`, `a[0-9]*b+c{2,3}$`, `a[0-9]*b+c{2,3}`, `a[0-9]*[0-9a]`, `a[0-9]*b?2`, `ab[a-z]{2}`, `ab\s*$`, `ab\d+`, `a1?2`, `ab[^a-z\n]+`, `line\s+t`, `func \w+\(`, `ab[\x{80}-\x{10FFFF}]+`, `a[0-9]{2,}`, `ab(?i)[k]`, `ab[a-c]*d`, `ab[^a-z]`,
}

func TestGrepMatcherLines(t *testing.T) {
	t.Parallel()
	for _, p := range matcherPatterns {
		m, err := newGrepMatcher(p)
		if err != nil {
			t.Fatalf("newGrepMatcher(%q): %v", p, err)
		}
		for _, text := range matcherTexts {
			data := []byte(text)
			want := refLines(p, data)
			var starts []int
			if got := m.lines(data, false, &starts); !slices.Equal(got, want) {
				t.Errorf("pattern %q, text %.60q: lines %v, want %v", p, text, got, want)
			}
			if ws := refStarts(data, want); !slices.Equal(starts, ws) {
				t.Errorf("pattern %q, text %.60q: starts %v, want %v", p, text, starts, ws)
			}
			first := m.lines(data, true, nil)
			if len(want) > 0 && !slices.Equal(first, want[:1]) || len(want) == 0 && len(first) != 0 {
				t.Errorf("pattern %q, text %.60q: first %v, want the first of %v", p, text, first, want)
			}
		}
	}
}

// TestGrepMatcherLiteral pins which patterns take the literal paths.
func TestGrepMatcherLiteral(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		expr  string
		lit   string
		fold  bool
		exact bool
		at    bool // every match begins with lit
		chain bool // and the pattern is a chain
	}{
		{"errors.New", "errors", false, false, true, false}, // "." is any character
		{regexp.QuoteMeta("errors.New"), "errors.New", false, true, false, false},
		{"(?i)" + regexp.QuoteMeta("errors.New"), "error", true, false, true, false}, // s folds to the long s
		{"(?i)mutex", "mutex", true, true, false, false},
		{`func [A-Z][A-Za-z0-9_]*\(`, "func ", false, false, true, true},
		{`func [A-Z].*\(`, "func ", false, false, true, false}, // "." is not ASCII
		{`func [A-Z]\w*\b`, "func ", false, false, true, false},
		{`a[0-9]*[0-9a]`, "a", false, false, true, false},   // which [0-9] is which?
		{`a[0-9]*b?c`, "a", false, false, true, false},      // b? may be skipped
		{`a[0-9]*b+c{2,3}$`, "a", false, false, true, true}, // b+ then c{2,3}: disjoint
		{`a[0-9]+$x`, "a", false, false, true, false},
		{`a\z`, "a", false, false, true, true},
		{`(?i)ab[c-d]+`, "ab", true, false, true, true},
		{`\bfunc [A-Z]`, "func ", false, false, false, false},
		{`(func) [A-Z]`, "func", false, false, false, false},
		{`(?i)\bmutex\b`, "mutex", true, false, false, false},
		{"(?i)mask", "ma", true, false, true, false}, // k folds to the Kelvin sign
		{"(?i)xsx", "x", true, false, true, false},   // s folds to the long s
		{"(needle)", "needle", false, true, false, false},
		{"ne+dle", "dle", false, false, false, false},
		{"needle.", "needle", false, false, true, false},
		{"a|b", "", false, false, false, false},
		{"\ufffdab", "ab", false, false, false, false}, // U+FFFD also matches invalid UTF-8
		{`abc\ndefg`, "defg", false, false, false, false},
		{"é", "é", false, true, false, false},
		{"(?i)é", "", false, false, false, false},
	} {
		m, err := newGrepMatcher(tc.expr)
		if err != nil {
			t.Fatal(err)
		}
		if string(m.lit) != tc.lit || (m.lit != nil && (m.fold != tc.fold || m.exact != tc.exact)) {
			t.Errorf("%q: literal %q fold %v exact %v, want %q %v %v", tc.expr, m.lit, m.fold, m.exact, tc.lit, tc.fold, tc.exact)
		}
		if from := m.at != nil || m.chain != nil; from != tc.at || (m.chain != nil) != tc.chain {
			t.Errorf("%q: matched from the literal %v (a chain %v), want %v (%v)", tc.expr, from, m.chain != nil, tc.at, tc.chain)
		}
		if tc.expr == `func [A-Z].*\(` && (m.then == nil || !m.then['Q'] || m.then['('] || m.then['q']) {
			t.Errorf("%q: the bytes after the literal %v", tc.expr, m.then)
		}
	}
}

func FuzzGrepMatcher(f *testing.F) {
	for _, p := range matcherPatterns {
		for _, text := range matcherTexts[:6] {
			f.Add(p, []byte(text))
		}
	}
	f.Fuzz(func(t *testing.T, p string, data []byte) {
		if len(p) > 64 || len(data) > 4096 || strings.Contains(p, "{") {
			return // keep each run fast: counted repetitions make huge programs
		}
		m, err := newGrepMatcher(p)
		if err != nil {
			return
		}
		want := refLines(p, data)
		var starts []int
		if got := m.lines(data, false, &starts); !slices.Equal(got, want) {
			t.Errorf("pattern %q, text %q: lines %v, want %v", p, data, got, want)
		}
		// The lines a FileMatch carries, against splitting the whole file.
		for n := range 3 {
			got, want := normLines(contextLines(data, want, starts, n)), normLines(refContext(data, want, n))
			if !slices.Equal(got, want) {
				t.Errorf("pattern %q, text %q, context %d: lines %q, want %q", p, data, n, got, want)
			}
		}
	})
}

// TestFind checks the candidates of a literal against strings.Index, from
// every position, for every pair of its bytes that could be chosen.
func TestFind(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		text, lit string
		fold      bool
	}{
		{"xxMuTeXxx mutex", "mutex", true},
		{"aaaa", "aa", false},
		{"ab", "abc", false},
		{"", "a", true},
		{"a", "a", false},
		{"errors.NEW errors.New", "errors.new", true},
		{"errors.NEW errors.New", "errors.New", false},
		{strings.Repeat("m", 100) + "M" + strings.Repeat("x", 100) + "mux", "mux", true},
		{strings.Repeat("func (", 20) + "func F(" + strings.Repeat("x", 40) + "func ", "func ", false},
		{strings.Repeat("@`", 40) + "@@" + strings.Repeat("x", 33) + "``", "``", true},
		{strings.Repeat("Aa", 40) + "Ab" + strings.Repeat("b", 33) + "aB", "ab", true},
	} {
		m := &grepMatcher{lit: []byte(tc.lit), fold: tc.fold}
		for a := range tc.lit {
			for b := a; b < len(tc.lit); b++ {
				if b == a && len(tc.lit) > 1 {
					continue
				}
				m.pair = newPair(m.lit, m.fold)
				m.pair.a, m.pair.d = a, b-a
				m.pair.c0, m.pair.c1 = m.lit[a], m.lit[b]
				m.pair.m0, m.pair.m1 = 0, 0
				if tc.fold && m.lit[a] >= 'a' && m.lit[a] <= 'z' {
					m.pair.m0 = 0x20
				}
				if tc.fold && m.lit[b] >= 'a' && m.lit[b] <= 'z' {
					m.pair.m1 = 0x20
				}
				text := []byte(tc.text)
				for from := 0; from <= len(tc.text); from++ {
					want := -1
					hay := tc.text[from:]
					if tc.fold {
						hay = strings.ToLower(hay)
					}
					if i := strings.Index(hay, tc.lit); i >= 0 {
						want = from + i
					}
					if got := m.find(text, from); got != want {
						t.Errorf("%q in %q (bytes %d, %d) from %d: %d, want %d", tc.lit, tc.text, a, b, from, got, want)
					}
				}
			}
		}
	}
}

// TestPairIndex compares the SIMD and the portable search for a pair with
// a byte-by-byte one, over every length and distance around the block size
// and candidates at every position, exact and ignoring case.
func TestPairIndex(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	naive := func(s []byte, p *pair) int {
		for i := 0; i+p.d < len(s); i++ {
			if s[i]|p.m0 == p.c0 && s[i+p.d]|p.m1 == p.c1 {
				return i
			}
		}
		return -1
	}
	for _, p := range []pair{
		{d: 0, c0: 'x', c1: 'x'},
		{d: 1, c0: 'f', c1: 'u'},
		{d: 4, c0: 'f', c1: ' '},
		{d: 3, c0: 'n', m0: 0x20, c1: 'w', m1: 0x20},
		{d: 37, c0: 'q', m0: 0x20, c1: '.', rare1: true},
		{d: 2, c0: 0xff, c1: 0x00, rare1: true},
	} {
		for n := range 110 { // over three blocks of 32
			s := make([]byte, n)
			for range 20 {
				// Mostly no candidate, or one planted, over bytes that
				// hold both halves of a candidate often.
				const alphabet = "fu xXqQ.nNwW\xff\x00"
				for i := range s {
					s[i] = alphabet[rng.IntN(len(alphabet))]
				}
				if n > p.d && rng.IntN(2) == 0 {
					i := rng.IntN(n - p.d)
					s[i], s[i+p.d] = p.c0, p.c1
				}
				want := naive(s, &p)
				if got := p.index(s); got != want {
					t.Fatalf("pair %+v in %q: index %d, want %d", p, s, got, want)
				}
				if k := len(s) - p.d; k > 0 {
					if got := p.indexGo(s, k); got != want {
						t.Fatalf("pair %+v in %q: indexGo %d, want %d", p, s, got, want)
					}
				}
			}
		}
	}
}

// TestLineSpanBounded: matching from the occurrences of a literal in a
// line walks at most three times its length however many there are; then
// the line is run whole (a regexp that may walk to the line's end each
// time), or every occurrence is tried (a chain that walks a few bytes).
func TestLineSpanBounded(t *testing.T) {
	t.Parallel()
	data := []byte(strings.Repeat("func Xy ", 500))
	for _, tc := range []struct {
		expr  string
		whole bool
	}{{`func [A-Z].*\(`, true}, {`func [A-Z][a-z ]*\(`, false}} {
		m, err := newGrepMatcher(tc.expr)
		if err != nil {
			t.Fatal(err)
		}
		l := lineSpan{start: 0, end: len(data)}
		tries, whole := 0, false
		for c := 0; c < len(data) && !whole; c += 8 {
			var ok bool
			if ok, whole = l.match(m, data, c); ok {
				t.Fatalf("%q matched at %d", tc.expr, c)
			}
			tries++
		}
		if l.walked > 3*len(data) || whole != tc.whole || !whole && tries != 500 {
			t.Errorf("%q: %d tries walked %d bytes of a %d-byte line, then whole %v", tc.expr, tries, l.walked, len(data), whole)
		}
	}
}

// TestEveryLine pins the patterns without a literal that are run on every
// line rather than found in the whole file: those whose matches may cross
// a line or need its text's ends.
func TestEveryLine(t *testing.T) {
	t.Parallel()
	for expr, want := range map[string]bool{
		`[0-9][\s\S]*[yz]`: true, `[0-9]\s*[yz]`: true, `(?s)[0-9].[yz]`: true, `[0-9][^a]+`: true,
		`\Aa|b`: true, `[ab]\z`: true, `[0-9]\n`: true,
		`[0-9][ \t]*[yz]`: false, `[0-9].*[yz]`: false, `^[ab]+$`: false, `\b[0-9]+\b`: false,
	} {
		m, err := newGrepMatcher(expr)
		if err != nil || m.lit != nil {
			t.Fatalf("%q: %v, literal %q", expr, err, m.lit)
		}
		if m.everyLine != want {
			t.Errorf("%q: every line %v, want %v", expr, m.everyLine, want)
		}
	}
}

// BenchmarkCrossLine: a pattern without a literal whose matches may cross
// lines, over 4 000 lines where each line's leftmost match runs to the
// file's end. Found in the whole file, each line's search would scan to the
// end again.
func BenchmarkCrossLine(b *testing.B) {
	data := []byte(strings.Repeat("1\n", 4000) + "y")
	m, err := newGrepMatcher(`[0-9][\s\S]*[yz]`)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if got := m.lines(data, false, nil); len(got) != 0 {
			b.Fatalf("lines %v", got)
		}
	}
}

// BenchmarkLongLine matches a pattern from each of its literal's
// occurrences in one long line where every one fails late: linear in the
// line's length (lineSpan), not its square.
func BenchmarkLongLine(b *testing.B) {
	data := []byte(strings.Repeat("func Xy ", 1<<15) + "\n") // 256 KiB, 32 768 occurrences
	for _, p := range []string{`func [A-Z][a-z ]*\(`, `func [A-Z].*\(`} {
		m, err := newGrepMatcher(p)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(p, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				if got := m.lines(data, false, nil); len(got) != 0 {
					b.Fatalf("lines %v", got)
				}
			}
		})
	}
}

// TestReadText covers the binary sniff and the two-step read of large files.
func TestReadText(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	big := bytes.Repeat([]byte("0123456789abcdef\n"), sniffFirst/8)
	for _, tc := range []struct {
		name string
		data []byte
		text bool
	}{
		{"small", []byte("hello\n"), true},
		{"empty", nil, true},
		{"NUL early", []byte("a\x00b"), false},
		{"large", big, true},
		{"large, NUL in the sniff", append([]byte("x\x00"), big...), false},
		{"large, NUL past the sniff", append(slices.Clone(big), 0), true},
	} {
		p := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_"))
		if err := os.WriteFile(p, tc.data, 0o644); err != nil {
			t.Fatal(err)
		}
		for _, bufCap := range []int{0, 16, len(tc.data) + 100} {
			f, err := os.Open(p)
			if err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 0, bufCap)
			got, ok := readText(f, int64(len(tc.data)), 0, &buf)
			f.Close()
			if ok != tc.text || ok && !bytes.Equal(got, tc.data) {
				t.Errorf("%s (buffer %d): ok %v, %d bytes; want ok %v, %d bytes", tc.name, bufCap, ok, len(got), tc.text, len(tc.data))
			}
		}
	}
	// A large binary file is passed over on its sniff: the buffer does not
	// grow to its size.
	bin, err := os.Open(filepath.Join(dir, "large,_NUL_in_the_sniff"))
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 0, sniffFirst)
	if _, ok := readText(bin, sniffFirst*8, 0, &buf); ok || cap(buf) != sniffFirst {
		t.Errorf("large binary file: ok %v, buffer grown to %d bytes, want skipped and %d", ok, cap(buf), sniffFirst)
	}
	bin.Close()
	// A file that shrank after its Stat is read as it is now.
	f, err := os.Open(filepath.Join(dir, "small"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf = nil
	if got, ok := readText(f, sniffFirst*2, 0, &buf); !ok || string(got) != "hello\n" {
		t.Errorf("shrunk file: %q, %v", got, ok)
	}
	// A file that says 0 bytes (procfs) is read only up to the size cap.
	long := strings.NewReader(strings.Repeat("y\n", 1000))
	if got, ok := readText(long, 0, 100, &buf); ok {
		t.Errorf("size-0 file over the cap: read %d bytes, want skipped", len(got))
	}
	if got, ok := readText(strings.NewReader("hi\n"), 0, 100, &buf); !ok || string(got) != "hi\n" {
		t.Errorf("size-0 file under the cap: %q, %v", got, ok)
	}
}

// BenchmarkFinder compares the rare-byte scan with bytes.Index on the Go
// tree's text, concatenated.
func BenchmarkFinder(b *testing.B) {
	var corpus []byte
	out, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		b.Skipf("go env GOROOT: %v", err)
	}
	root := filepath.Join(strings.TrimSpace(string(out)), "src", "net")
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() && strings.HasSuffix(p, ".go") {
			data, _ := os.ReadFile(p)
			corpus = append(corpus, data...)
		}
		return nil
	})
	if len(corpus) == 0 {
		b.Skip("no Go source tree")
	}
	for _, lit := range []string{`errors\.New`, "func ", "return", "Mutex", "(?i)mutex", "(?i)return"} {
		m, err := newGrepMatcher(lit)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(lit+"/matcher", func(b *testing.B) {
			b.SetBytes(int64(len(corpus)))
			for b.Loop() {
				for i := m.find(corpus, 0); i >= 0; i = m.find(corpus, i+1) {
				}
			}
		})
		if m.fold {
			continue
		}
		b.Run(lit+"/bytes.Index", func(b *testing.B) {
			b.SetBytes(int64(len(corpus)))
			l := m.lit
			for b.Loop() {
				for i := 0; ; i++ {
					j := bytes.Index(corpus[i:], l)
					if j < 0 {
						break
					}
					i += j
				}
			}
		})
	}
}

// BenchmarkLinesFromLiteral compares, for a pattern that begins with its
// literal, matching from each occurrence (as a chain, or with the anchored
// regexp) with running the pattern on every line that holds one, over the
// Go tree's net package.
func BenchmarkLinesFromLiteral(b *testing.B) {
	out, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		b.Skipf("go env GOROOT: %v", err)
	}
	var files [][]byte
	filepath.WalkDir(filepath.Join(strings.TrimSpace(string(out)), "src", "net"), func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() && strings.HasSuffix(p, ".go") {
			data, _ := os.ReadFile(p)
			files = append(files, data)
		}
		return nil
	})
	if len(files) == 0 {
		b.Skip("no Go source tree")
	}
	for _, p := range []string{`func [A-Z][A-Za-z0-9_]*\(`, `errors.New\(`, `return [a-z]+, nil$`} {
		m, err := newGrepMatcher(p)
		if err != nil || m.at == nil && m.chain == nil {
			b.Fatalf("%q: %v, not matched from the literal", p, err)
		}
		variants := []struct {
			name string
			m    *grepMatcher
		}{{"from", m}}
		if m.chain != nil {
			at := *m
			at.chain = nil
			syn, err := syntax.Parse("(?m)"+p, syntax.Perl)
			if err == nil {
				at.at, at.then, err = anchored(syn, true)
			}
			if err != nil {
				b.Fatal(err)
			}
			variants = append(variants, struct {
				name string
				m    *grepMatcher
			}{"regexp", &at})
		}
		line := *m
		line.at, line.chain, line.then = nil, nil, nil
		variants = append(variants, struct {
			name string
			m    *grepMatcher
		}{"line", &line})
		for _, c := range variants {
			b.Run(p+"/"+c.name, func(b *testing.B) {
				n := 0
				for b.Loop() {
					n = 0
					for _, f := range files {
						n += len(c.m.lines(f, false, nil))
					}
				}
				b.ReportMetric(float64(n), "lines")
			})
		}
	}
}
