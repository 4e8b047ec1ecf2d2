package search

import (
	"bytes"
	"fmt"
	"regexp"
	"regexp/syntax"
	"slices"
	"unicode"
	"unicode/utf8"
)

// grepMatcher finds the matching lines of a file. A line matches when line
// matches it; the line without its "\n" is the whole text, so ^, $, \A and
// \z are the line's start and end. Rather than run line on every line of a
// file, it looks for candidates in the whole file: occurrences of a literal
// every match contains (see pair), or else matches of the multi-line form
// of the pattern. Only the lines holding a candidate are run, and not even
// those when the pattern is the literal itself.
type grepMatcher struct {
	line *regexp.Regexp
	// file is line in multi-line mode. A line's match is also a match of
	// file in the rest of the file from the line's start, and the leftmost
	// one; but for \A and \z, which file only matches at the start and the
	// end of the text, and for a pattern whose matches may cross lines
	// (everyLine).
	file      *regexp.Regexp
	lit       []byte // every match contains lit; nil when no literal is known
	fold      bool   // lit is ASCII in lower case, matched case-insensitively
	exact     bool   // an occurrence of lit is a match: line need not run
	pair      pair   // how lit is looked for
	everyLine bool   // no literal, and \A, \z or a "\n" (lineBound): run line on every line
	// at, when every match begins with lit (the pattern begins with it),
	// is the pattern anchored at the start of its text: a line matches
	// when at matches the rest of the line from one of the literal's
	// occurrences in it. Anchored, Go's regexp tries one start over the
	// rest of the line, not every start of the whole line (its one-pass
	// engine would need the end anchored too: not used).
	at *regexp.Regexp
	// chain, when the pattern is one, is matched from each occurrence
	// instead of at.
	chain chain
	// then, with at, holds the bytes that may follow lit in a match (nil:
	// any, or none): an occurrence followed by another byte is no match,
	// and at need not run.
	then *[256]bool
}

func newGrepMatcher(expr string) (*grepMatcher, error) {
	line, err := regexp.Compile(expr)
	if err != nil {
		return nil, err
	}
	m := &grepMatcher{line: line, file: regexp.MustCompile("(?m)" + expr)}
	syn, err := syntax.Parse("(?m)"+expr, syntax.Perl) // as regexp.Compile parses it
	if err != nil {
		return nil, err
	}
	m.lit, m.fold, m.exact = requiredLiteral(syn)
	if len(m.lit) == 0 {
		m.lit = nil
		m.everyLine = !lineBound(syn)
		return m, nil
	}
	if ok, whole := startsWith(syn, m.lit, m.fold); ok && !m.exact {
		if m.chain = newChain(syn); m.chain == nil {
			if m.at, m.then, err = anchored(syn, whole); err != nil {
				return nil, fmt.Errorf("pattern %q: %w", expr, err) // not expected: syn is valid
			}
		}
	}
	m.pair = newPair(m.lit, m.fold)
	return m, nil
}

// anchored returns the pattern anchored at the start of its text, and,
// when the literal is the whole of the pattern's first part, the bytes that
// may follow it (see grepMatcher.at and then). It is made from the parsed
// pattern, not its text: a pattern may end inside \Q…, which would quote a
// ")" written after it.
func anchored(syn *syntax.Regexp, whole bool) (*regexp.Regexp, *[256]bool, error) {
	at, err := regexp.Compile((&syntax.Regexp{Op: syntax.OpConcat, Sub: []*syntax.Regexp{{Op: syntax.OpBeginText}, syn}}).String())
	if err != nil {
		return nil, nil, err
	}
	var then *[256]bool
	if whole && syn.Op == syntax.OpConcat && len(syn.Sub) > 1 {
		then = firstBytes(syn.Sub[1])
	}
	return at, then, nil
}

// requiredLiteral returns a literal that every match of re contains (lower
// case when fold), and whether an occurrence of it is a match of re. A
// literal under case folding is only used where its letters have ASCII
// case variants only (not k and s: they fold to the Kelvin sign and the
// long s).
func requiredLiteral(re *syntax.Regexp) (lit []byte, fold, exact bool) {
	switch re.Op {
	case syntax.OpLiteral:
		fold = re.Flags&syntax.FoldCase != 0
		lit, whole := literalBytes(re.Rune, fold)
		return lit, fold, whole
	case syntax.OpCapture:
		return requiredLiteral(re.Sub[0])
	case syntax.OpPlus:
		lit, fold, _ = requiredLiteral(re.Sub[0])
		return lit, fold, false
	case syntax.OpRepeat:
		if re.Min >= 1 {
			lit, fold, _ = requiredLiteral(re.Sub[0])
			return lit, fold, false
		}
	case syntax.OpConcat:
		for _, sub := range re.Sub {
			if l, f, _ := requiredLiteral(sub); len(l) > len(lit) {
				lit, fold = l, f
			}
		}
		return lit, fold, false
	}
	return nil, false, false
}

// literalBytes returns the longest run of runes of a literal that a byte
// search finds exactly (literalRune), and whether that is the whole
// literal.
func literalBytes(runes []rune, fold bool) ([]byte, bool) {
	var best, cur []byte
	whole := true
	for _, r := range runes {
		if !literalRune(r, fold) {
			whole = false
			cur = nil
			continue
		}
		if fold && r >= 'A' && r <= 'Z' {
			r += 'a' - 'A'
		}
		cur = utf8.AppendRune(cur, r)
		if len(cur) > len(best) {
			best = cur
		}
	}
	return best, whole && len(best) > 0
}

// literalRune reports whether a byte search finds r exactly. Not U+FFFD
// (it also matches invalid UTF-8), "\n" (no line holds one) nor, under case
// folding, what is not ASCII or folds to what is not (k and s: the Kelvin
// sign, the long s).
func literalRune(r rune, fold bool) bool {
	ok := r != utf8.RuneError && r != '\n'
	if fold {
		for f := unicode.SimpleFold(r); ok && f != r; f = unicode.SimpleFold(f) {
			ok = f < utf8.RuneSelf
		}
		ok = ok && r < utf8.RuneSelf
	}
	return ok
}

// startsWith reports whether every match of re begins with lit (lower case
// when fold): re's first part is a literal, folded as lit is, that begins
// with lit's run; and whether lit is the whole literal.
func startsWith(re *syntax.Regexp, lit []byte, fold bool) (ok, whole bool) {
	if re.Op == syntax.OpConcat && len(re.Sub) > 0 {
		re = re.Sub[0]
	}
	if re.Op != syntax.OpLiteral || (re.Flags&syntax.FoldCase != 0) != fold {
		return false, false
	}
	first := re.Rune
	for i, r := range first {
		if !literalRune(r, fold) {
			first = first[:i]
			break
		}
	}
	b, _ := literalBytes(first, fold)
	return len(b) > 0 && bytes.Equal(b, lit), len(first) == len(re.Rune)
}

// firstBytes returns the bytes a match of re can begin with, when re must
// match at least one character and that set is known (a character class,
// once or more); else nil. A class with a character beyond ASCII admits
// every byte from 0x80 (its UTF-8 lead bytes among them).
func firstBytes(re *syntax.Regexp) *[256]bool {
	switch re.Op {
	case syntax.OpPlus:
		return firstBytes(re.Sub[0])
	case syntax.OpRepeat:
		if re.Min >= 1 {
			return firstBytes(re.Sub[0])
		}
		return nil
	case syntax.OpCharClass:
		set, _ := classBytes(re.Rune)
		return set
	}
	return nil
}

// classBytes returns the bytes that may begin a character of a class,
// every byte from 0x80 (the UTF-8 lead bytes among them) when it holds a
// character beyond ASCII; and whether it is all ASCII. Never "\n": no line
// holds one.
func classBytes(ranges []rune) (set *[256]bool, ascii bool) {
	set, ascii = new([256]bool), true
	for i := 0; i+1 < len(ranges); i += 2 {
		lo, hi := ranges[i], ranges[i+1]
		for r := lo; r <= min(hi, utf8.RuneSelf-1); r++ {
			set[r] = r != '\n'
		}
		if hi >= utf8.RuneSelf {
			ascii = false
			for b := utf8.RuneSelf; b < 256; b++ {
				set[b] = true
			}
		}
	}
	return set, ascii
}

// lineBound reports whether every match of re (multi-line) is within a
// line: re holds no \A or \z, and matches no "\n". Where one can cross a
// line, the file's matches are no candidates: a match from each line to the
// file's end ([0-9][\s\S]*[yz]) would be found again from each of them, the
// file's length times its lines.
func lineBound(re *syntax.Regexp) bool {
	switch re.Op {
	case syntax.OpBeginText, syntax.OpEndText, syntax.OpAnyChar:
		return false
	case syntax.OpLiteral:
		if slices.Contains(re.Rune, '\n') {
			return false
		}
	case syntax.OpCharClass:
		for i := 0; i+1 < len(re.Rune); i += 2 {
			if re.Rune[i] <= '\n' && '\n' <= re.Rune[i+1] {
				return false
			}
		}
	}
	for _, sub := range re.Sub {
		if !lineBound(sub) {
			return false
		}
	}
	return true
}

// lines returns the 0-based indexes of the matching lines of data; with
// firstOnly, the first one only. When starts is not nil, the byte offset
// where each matching line starts is appended to it: context lines are
// found from there without splitting the whole file.
func (m *grepMatcher) lines(data []byte, firstOnly bool, starts *[]int) []int {
	var matches []int
	if m.everyLine {
		for i, start := 0, 0; start < len(data); i++ {
			end := len(data)
			if j := bytes.IndexByte(data[start:], '\n'); j >= 0 {
				end = start + j
			}
			if m.line.Match(data[start:end]) {
				matches = append(matches, i)
				if starts != nil {
					*starts = append(*starts, start)
				}
				if firstOnly {
					break
				}
			}
			start = end + 1
		}
		return matches
	}
	line, counted := 0, 0    // line is the number of "\n" in data[:counted]
	cur := lineSpan{end: -1} // the line of the last candidate
	// pos is where the next candidate is looked for: a line's start, or
	// past an occurrence of the literal that did not match from there
	// (the next may be in the same line).
	for pos := 0; pos <= len(data); {
		c := m.find(data, pos)
		if c < 0 {
			break
		}
		if m.then != nil {
			if k := c + len(m.lit); k == len(data) || data[k] == '\n' || !m.then[data[k]] {
				pos = c + 1
				continue
			}
		}
		if c > cur.end { // in a line after cur's
			cur = lineSpan{start: bytes.LastIndexByte(data[:c], '\n') + 1, end: len(data)} // back to the line's start only
			if i := bytes.IndexByte(data[c:], '\n'); i >= 0 {
				cur.end = c + i
			}
		}
		start, end := cur.start, cur.end
		if start == len(data) {
			break // after the last line
		}
		var ok bool
		switch {
		case m.exact:
			ok = true
		case m.chain != nil || m.at != nil:
			var whole bool
			if ok, whole = cur.match(m, data, c); whole {
				ok = m.line.Match(data[start:end])
			} else if !ok {
				pos = c + 1
				continue
			}
		default:
			ok = m.line.Match(data[start:end])
		}
		if ok {
			line += bytes.Count(data[counted:start], []byte{'\n'})
			counted = start
			matches = append(matches, line)
			if starts != nil {
				*starts = append(*starts, start)
			}
			if firstOnly {
				break
			}
		}
		pos = end + 1
	}
	return matches
}

// lineSpan is a line, data[start:end], and how many bytes matching from
// the literal's occurrences in it has walked so far (a regexp's match
// counted to the line's end, all it may walk). Each may walk to the line's
// end: a long line holding many occurrences where the pattern fails late
// would cost its length times their number. So once they have walked more
// than twice the line's length, the line is run whole, once: linear.
type lineSpan struct {
	start, end int
	walked     int
}

// match reports whether the pattern matches from its literal's occurrence
// at c in the line (m.chain or m.at); whole, when the line is to be run
// whole instead.
func (l *lineSpan) match(m *grepMatcher, data []byte, c int) (ok, whole bool) {
	if l.walked > 2*(l.end-l.start) {
		return false, true
	}
	walked := l.end - c // what the regexp may walk
	if m.chain != nil {
		ok, walked = m.chain.match(data[c:l.end])
	} else {
		ok = m.at.Match(data[c:l.end])
	}
	l.walked += walked
	return ok, false
}

// find returns the first candidate in s at or after pos, or -1.
func (m *grepMatcher) find(s []byte, pos int) int {
	if m.lit == nil {
		loc := m.file.FindIndex(s[pos:])
		if loc == nil {
			return -1
		}
		return pos + loc[0]
	}
	p := &m.pair
	last := len(s) - len(m.lit) // where the last occurrence can start
	for pos <= last {
		// The pair's first byte of an occurrence at pos..last.
		i := p.index(s[pos+p.a : last+p.a+p.d+1])
		if i < 0 {
			return -1
		}
		start := pos + i
		if w := s[start : start+len(m.lit)]; m.fold && equalFoldASCII(w, m.lit) || !m.fold && bytes.Equal(w, m.lit) {
			return start
		}
		pos = start + 1
	}
	return -1
}

// equalFoldASCII compares s with lit (lower case) ignoring ASCII case.
func equalFoldASCII(s, lit []byte) bool {
	for i, c := range s {
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lit[i] {
			return false
		}
	}
	return true
}
