//go:build !amd64 || purego

package search

import "math"

const pairBlock = math.MaxInt // no SIMD: indexGo compares every candidate

const haveSIMD = false

func indexPairSIMD([]byte, int, *pair) int { panic("no SIMD") }
