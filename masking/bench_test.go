package masking_test

import (
	"strings"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/masking"
)

// benchMasker has the pairs the server gives a thread with one custom mount.
func benchMasker() *masking.Masker {
	state := "/root/.local/state/sandbox-mcp"
	ud := state + "/threads/default/user-data"
	return masking.New(
		masking.Pair{Host: ud + "/workspace", Virtual: "/mnt/user-data/workspace"},
		masking.Pair{Host: ud + "/uploads", Virtual: "/mnt/user-data/uploads"},
		masking.Pair{Host: ud + "/outputs", Virtual: "/mnt/user-data/outputs"},
		masking.Pair{Host: "/usr/local/go/src", Virtual: "/mnt/goroot"},
		masking.Pair{Host: ud, Virtual: "/mnt/user-data"},
		masking.Pair{Host: state, Virtual: "/sandbox-mcp-state"},
	)
}

// BenchmarkMask masks tool outputs that name no host path (the usual
// case): a glob listing of 8000 virtual paths, and a 1 KiB file.
func BenchmarkMask(b *testing.B) {
	m := benchMasker()
	var glob strings.Builder
	glob.WriteString("Found 8000 paths under /mnt/goroot")
	for i := range 8000 {
		glob.WriteString("\n/mnt/goroot/cmd/compile/internal/ssa/rewrite")
		glob.WriteString(strings.Repeat("x", i%7))
		glob.WriteString(".go")
	}
	small := strings.Repeat("the quick brown fox jumps over the lazy dog // a/b/c 0123\n", 18)[:1024]
	withHost := strings.Repeat("open /usr/local/go/src/os/file.go: permission denied\n", 20)
	for _, c := range []struct{ name, s string }{{"glob-8000", glob.String()}, {"file-1KiB", small}, {"host-paths", withHost}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(c.s)))
			for b.Loop() {
				m.Mask(c.s)
			}
		})
	}
}
