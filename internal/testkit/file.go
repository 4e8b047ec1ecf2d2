package testkit

import (
	"os"
	"testing"
	"time"
)

// Growth measures the file at path, waits d, and measures it again: a
// process that still writes it (a job that should have ended) shows as
// after > before.
func Growth(t testing.TB, path string, d time.Duration) (before, after int64) {
	t.Helper()
	size := func() int64 {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	before = size()
	time.Sleep(d)
	return before, size()
}
