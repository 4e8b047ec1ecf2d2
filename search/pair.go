package search

import (
	"bytes"
	"encoding/binary"
	"math/bits"
	"strings"
)

// pair is how a literal is looked for: by two of its bytes at once, its
// rarest two in source code, with SIMD where the CPU has it (AVX2 on
// amd64). A scan for one byte stops at every occurrence of it, and in text
// every byte of a literal such as "func " is common; two bytes a fixed
// distance apart are far rarer together. Each candidate is then compared
// with the whole literal.
//
// A candidate is an i with s[i]|m0 == c0 and s[i+d]|m1 == c1: the mask is
// 0x20 for a letter matched ignoring case (the literal is lower case
// then), so that both cases compare equal, and 0 for any other byte.
type pair struct {
	a, d   int // the bytes are lit[a] and lit[a+d], d >= 0
	c0, m0 byte
	c1, m1 byte
	// rare1: lit[a+d] is the rarer of the two; without SIMD it is the one
	// bytes.IndexByte looks for.
	rare1 bool
}

// newPair chooses the two bytes of lit (lower case when fold) to look for.
// A literal of one byte is looked for by that byte twice (d is 0).
func newPair(lit []byte, fold bool) pair {
	weight := func(i int) int {
		c := lit[i]
		w := byteWeight(c)
		if fold && c >= 'a' && c <= 'z' {
			w += byteWeight(c - 'a' + 'A')
		}
		return w
	}
	// The rarest byte, then the rarest at another position.
	r0 := 0
	for i := range lit {
		if weight(i) < weight(r0) {
			r0 = i
		}
	}
	r1 := r0
	for i := range lit {
		if i != r0 && (r1 == r0 || weight(i) < weight(r1)) {
			r1 = i
		}
	}
	p := pair{a: min(r0, r1), d: max(r0, r1) - min(r0, r1), rare1: r0 > r1}
	mask := func(c byte) byte {
		if fold && c >= 'a' && c <= 'z' {
			return 0x20
		}
		return 0
	}
	p.c0, p.c1 = lit[p.a], lit[p.a+p.d]
	p.m0, p.m1 = mask(p.c0), mask(p.c1)
	return p
}

// index returns the first i with s[i] and s[i+d] the pair's bytes, or -1.
func (p *pair) index(s []byte) int {
	n := len(s) - p.d // the candidates are s[:n]
	if n <= 0 {
		return -1
	}
	if n >= pairBlock && haveSIMD {
		return indexPairSIMD(s, n, p)
	}
	return p.indexGo(s, n)
}

// indexGo is index without SIMD. When the rarer byte is matched exactly,
// bytes.IndexByte (SIMD on most platforms) finds it; else eight candidates
// are compared at a time in a uint64.
func (p *pair) indexGo(s []byte, n int) int {
	c, m, off := p.c0, p.m0, 0
	if p.rare1 {
		c, m, off = p.c1, p.m1, p.d
	}
	i := 0
	if m == 0 {
		for ; i < n; i++ {
			j := bytes.IndexByte(s[i+off:n+off], c)
			if j < 0 {
				return -1
			}
			i += j
			if s[i]|p.m0 == p.c0 && s[i+p.d]|p.m1 == p.c1 {
				return i
			}
		}
		return -1
	}
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	c0, m0 := ones*uint64(p.c0), ones*uint64(p.m0)
	c1, m1 := ones*uint64(p.c1), ones*uint64(p.m1)
	for ; i+8 <= n; i += 8 {
		// z has a zero byte for each candidate; the lowest byte flagged
		// in the test below is the first of them (a borrow only flags
		// bytes above a zero one).
		z := ((binary.LittleEndian.Uint64(s[i:]) | m0) ^ c0) | ((binary.LittleEndian.Uint64(s[i+p.d:]) | m1) ^ c1)
		if t := (z - ones) &^ z & highs; t != 0 {
			return i + bits.TrailingZeros64(t)/8
		}
	}
	for ; i < n; i++ {
		if s[i]|p.m0 == p.c0 && s[i+p.d]|p.m1 == p.c1 {
			return i
		}
	}
	return -1
}

// byteFreq lists bytes from the most to the least common in source code
// (counted over the text files of the Go tree); bytes not listed are rarer
// still. A literal is looked for by its rarest bytes (pair).
const byteFreq = " et\t0rn\naiso,xclfdu1.p/()A2mg:h\"=b43S6_TEyR8v{}ICO5\\DP97MkLwXVBFN[]-UG*HW;+Y|Q!z&<K'>q%jZ$J`#^?@~"

func byteWeight(c byte) int {
	if i := strings.IndexByte(byteFreq, c); i >= 0 {
		return len(byteFreq) - i
	}
	return 0
}
