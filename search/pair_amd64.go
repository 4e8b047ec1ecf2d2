//go:build !purego

package search

import "golang.org/x/sys/cpu"

// pairBlock is how many candidates indexPairAVX2 compares at once; fewer
// are compared by indexGo.
const pairBlock = 32

var haveSIMD = cpu.X86.HasAVX2

// indexPairAVX2 returns the first i < n with s[i]|m0 == c0 and
// s[i+d]|m1 == c1, or -1. n >= 32 and n+d <= len(s): it reads s[:n+d]
// only, 32 candidates at a time, and the last 32 again where n is not a
// multiple of 32 (no candidate before them matched).
//
//go:noescape
func indexPairAVX2(s []byte, n, d int, c0, m0, c1, m1 byte) int

func indexPairSIMD(s []byte, n int, p *pair) int {
	return indexPairAVX2(s, n, p.d, p.c0, p.m0, p.c1, p.m1)
}
