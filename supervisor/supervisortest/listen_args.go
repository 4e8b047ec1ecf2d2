package supervisortest

import (
	"path/filepath"
	"testing"
	"time"
)

// ListenArgs is Listen with more of the daemon's flags (after --listen),
// e.g. --checkpoints STORE --user-data ROOT.
func ListenArgs(tb testing.TB, args ...string) string {
	tb.Helper()
	dir := tb.TempDir()
	cmd := Command(tb, append([]string{"supervise", "--listen", Socket}, args...)...)
	cmd.Dir = dir
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	// The socket file exists before it listens: wait for a connection.
	for range 500 {
		if c, err := dialUnix(filepath.Join(dir, Socket)); err == nil {
			c.Close()
			return dir
		}
		time.Sleep(10 * time.Millisecond)
	}
	tb.Fatalf("the supervisor daemon does not listen in %s", dir)
	return ""
}
