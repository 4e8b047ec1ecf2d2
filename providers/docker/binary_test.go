package docker

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/supervisor/supervisortest"
)

// A cgo build of the daemon (what `go install` makes where a C compiler
// is) runs in an image without a C library (busybox) through the host's
// loader and libraries, bound beside it; the static build (the release's,
// the other tests') needs nothing but itself.
func TestDynamicDaemon(t *testing.T) {
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("SKIPPED: no C compiler: no cgo build")
	}
	daemon := supervisortest.Build(t, []string{"CGO_ENABLED=1"})
	f := newFixture(t, func(c *Config) { c.Image = busyboxImage; c.SupervisorBinary = daemon })
	if f.p.bin.Loader == "" || len(f.p.bin.Mounts()) < 2 {
		t.Fatalf("a cgo build with no loader or libraries to bind: %+v", f.p.bin)
	}
	sb := f.acquire(t, "dynamic-daemon")
	out, res := execOut(t, sb, "tr '\\0' ' ' </proc/1/cmdline; echo; ls /.sandbox-mcp/lib")
	if res.ExitCode != 0 || !strings.Contains(out, "/.sandbox-mcp/lib/") || !strings.Contains(out, "/.sandbox-mcp/sandbox-mcp supervise --listen") || !strings.Contains(out, "libc.so") {
		t.Fatalf("exit %d: %q", res.ExitCode, out)
	}
}
