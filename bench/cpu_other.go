//go:build !unix

package main

import "time"

// selfCPU: unknown where there is no getrusage (the benchmarks run on Linux).
func selfCPU() time.Duration { return 0 }
