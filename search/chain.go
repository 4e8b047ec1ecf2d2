package search

import (
	"regexp/syntax"
	"unicode"
	"unicode/utf8"
)

// chain is a pattern matched by one walk over its bytes, never going back:
// a sequence of ASCII byte sets, each taken a number of times (as many as
// there are, up to its most), where a set taken a varying number of times
// holds nothing that can begin the set after it. So the longest run is the
// only one that can go on, and the pattern matches from a position exactly
// when the walk reaches the chain's end. Go's regexp costs some 300 ns a call
// even on a short line; a chain a few ns a byte (BenchmarkLinesFromLiteral).
// `func [A-Z][A-Za-z0-9_]*\(` is one; whatever has an alternation, a word
// boundary, "." or a character beyond ASCII is not.
type chain []link

type link struct {
	set      *[256]bool // never holds "\n"; nil: the end of the line ($, \z), last
	min, max int        // max -1: no most
}

// newChain returns re as a chain, or nil when it is not one. re is parsed
// as grepMatcher parses it (multi-line: $ is the end of a line).
func newChain(re *syntax.Regexp) chain {
	var c chain
	if !c.add(re) {
		return nil
	}
	for i, l := range c {
		switch {
		case l.set == nil && i < len(c)-1:
			return nil
		case l.min == l.max || i == len(c)-1 || c[i+1].set == nil:
		case c[i+1].min == 0:
			return nil // the set after it could be skipped: whatever follows would have to be checked too
		default:
			for b := range 256 {
				if l.set[b] && c[i+1].set[b] {
					return nil
				}
			}
		}
	}
	return c
}

func (c *chain) add(re *syntax.Regexp) bool {
	switch re.Op {
	case syntax.OpEmptyMatch:
		return true
	case syntax.OpConcat:
		for _, sub := range re.Sub {
			if !c.add(sub) {
				return false
			}
		}
		return true
	case syntax.OpCapture:
		return c.add(re.Sub[0])
	case syntax.OpLiteral:
		for _, r := range re.Rune {
			set := runeSet(r, re.Flags&syntax.FoldCase != 0)
			if set == nil {
				return false
			}
			*c = append(*c, link{set: set, min: 1, max: 1})
		}
		return true
	case syntax.OpCharClass:
		set := classSet(re.Rune)
		*c = append(*c, link{set: set, min: 1, max: 1})
		return set != nil
	case syntax.OpStar, syntax.OpPlus, syntax.OpQuest, syntax.OpRepeat:
		sub := re.Sub[0]
		var set *[256]bool
		switch {
		case sub.Op == syntax.OpLiteral && len(sub.Rune) == 1:
			set = runeSet(sub.Rune[0], sub.Flags&syntax.FoldCase != 0)
		case sub.Op == syntax.OpCharClass:
			set = classSet(sub.Rune)
		}
		if set == nil {
			return false
		}
		l := link{set: set, min: re.Min, max: re.Max}
		switch re.Op {
		case syntax.OpStar:
			l.min, l.max = 0, -1
		case syntax.OpPlus:
			l.min, l.max = 1, -1
		case syntax.OpQuest:
			l.min, l.max = 0, 1
		}
		if l.max != 0 {
			*c = append(*c, l)
		}
		return true
	case syntax.OpEndText, syntax.OpEndLine:
		*c = append(*c, link{})
		return true
	}
	return false
}

// runeSet returns the bytes that match r (under fold, both cases of an
// ASCII letter), or nil when a byte search cannot find it exactly
// (literalRune) or it is beyond ASCII.
func runeSet(r rune, fold bool) *[256]bool {
	if r >= utf8.RuneSelf || !literalRune(r, fold) {
		return nil
	}
	set := new([256]bool)
	set[r] = true
	if fold && unicode.IsLetter(r) {
		set[r|0x20], set[r&^0x20] = true, true
	}
	return set
}

// classSet returns the bytes of a character class, or nil when it holds a
// character beyond ASCII.
func classSet(ranges []rune) *[256]bool {
	if set, ascii := classBytes(ranges); ascii {
		return set
	}
	return nil
}

// match reports whether the chain matches s from its start, within its
// first line, and how many bytes it walked to know.
func (c chain) match(s []byte) (bool, int) {
	i := 0
	for _, l := range c {
		if l.set == nil {
			return i == len(s) || s[i] == '\n', i
		}
		n := 0
		for i < len(s) && n != l.max && l.set[s[i]] {
			i++
			n++
		}
		if n < l.min {
			return false, i
		}
	}
	return true, i
}
