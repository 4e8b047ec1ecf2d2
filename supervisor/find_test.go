//go:build linux

package supervisor

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/supervisor/supervisortest"
	"github.com/sandbox-mcp/sandbox-mcp/supervisor/wire"
)

// copyFile copies src to dst with mode.
func copyFile(t *testing.T, src, dst string, mode os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, mode); err != nil {
		t.Fatal(err)
	}
}

// The daemon beside the server: on Linux in its directory; for a macOS or
// Windows server's containers, the Linux build the release puts in
// linux/ (archives) or linux-ARCH/ (the extension), made executable when
// an unpacker dropped the mode. Where there is none, the error says
// where it looked.
func TestFindBinaryBeside(t *testing.T) {
	daemon := supervisortest.Path(t)
	dir := t.TempDir()
	exe := filepath.Join(dir, "sandbox-mcp")
	mac := host{"darwin", "arm64", exe, ""}
	if _, err := find(Locate{GOOS: "linux"}, mac); err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "linux", DaemonName)) {
		t.Fatalf("no Linux build beside: %v", err)
	}
	beside := filepath.Join(dir, "linux", DaemonName)
	copyFile(t, daemon, beside, 0o644)
	b, err := find(Locate{GOOS: "linux"}, host{"windows", "amd64", exe, ""})
	if err != nil || b.Path != beside || !strings.Contains(b.Where, "linux/") {
		t.Fatalf("%+v %v, want %s", b, err, beside)
	}
	if fi, _ := os.Stat(beside); fi.Mode()&0o111 == 0 {
		t.Errorf("the Linux build was left without exec bits: %v", fi.Mode())
	}
	// The extension (.mcpb) holds both architectures' Linux builds: the
	// server's own architecture's is taken.
	ext := t.TempDir()
	for _, a := range []string{"amd64", "arm64"} {
		copyFile(t, daemon, filepath.Join(ext, "linux-"+a, DaemonName), 0o755)
	}
	b, err = find(Locate{GOOS: "linux"}, host{"darwin", "arm64", filepath.Join(ext, "sandbox-mcp"), ""})
	if err != nil || b.Path != filepath.Join(ext, "linux-arm64", DaemonName) {
		t.Errorf("in the extension: %+v %v", b, err)
	}
	// On Linux, beside the server itself; asked its version first.
	copyFile(t, daemon, filepath.Join(dir, DaemonName), 0o755)
	b, err = find(Locate{GOOS: "linux"}, host{"linux", "amd64", exe, ""})
	if err != nil || b.Path != filepath.Join(dir, DaemonName) || b.Where != "the "+DaemonName+" beside the server" || b.server {
		t.Errorf("on Linux: %+v %v", b, err)
	}
	// A configured one is taken as it is.
	b, err = find(Locate{GOOS: "linux", Configured: daemon, Setting: "docker.supervisor_binary"}, host{"linux", "amd64", exe, ""})
	if err != nil || b.Path != daemon || b.Where != "docker.supervisor_binary" {
		t.Errorf("configured: %+v %v", b, err)
	}
	if _, err := find(Locate{GOOS: "linux", Configured: filepath.Join(dir, "missing"), Setting: "x"}, host{"linux", "amd64", exe, ""}); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing configured one: %v", err)
	}
}

// With no daemon beside it, the server is its sandboxes' supervisor (the
// fallback), said once in a warning that says how to put one there; a
// server on another system than its sandboxes' has no such fallback.
func TestFindBinaryFallback(t *testing.T) {
	defer SetFallback(supervisortest.Path(t))
	dir := t.TempDir()
	exe := filepath.Join(dir, "sandbox-mcp")
	copyFile(t, "/bin/true", exe, 0o755)
	SetFallback(exe)
	fallback.Lock()
	fallback.warned = false
	fallback.Unlock()
	var logged bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logged, nil))
	for range 2 {
		b, err := find(Locate{GOOS: "linux", Log: log}, host{"linux", "amd64", exe, ""})
		if err != nil || b.Path != exe || !b.server || !strings.Contains(b.Where, "the server itself") {
			t.Fatalf("%+v %v", b, err)
		}
	}
	if n := strings.Count(logged.String(), "level=WARN"); n != 1 || !strings.Contains(logged.String(), "go build -o "+filepath.Join(dir, DaemonName)) {
		t.Errorf("%d warnings, want 1 saying how to build one:\n%s", n, logged.String())
	}
	if _, err := find(Locate{GOOS: "linux"}, host{"darwin", "arm64", exe, ""}); err == nil || !strings.Contains(err.Error(), "no supervisor daemon") {
		t.Errorf("a macOS server with no Linux daemon: %v", err)
	}
	SetFallback("")
	if _, err := find(Locate{GOOS: "linux"}, host{"linux", "amd64", exe, ""}); err == nil || !strings.Contains(err.Error(), filepath.Join(dir, DaemonName)) {
		t.Errorf("no daemon and no fallback: %v", err)
	}
}

// A daemon of another release, or one that is no daemon, is refused at
// start-up in a message naming it and where it was found; a development
// build on either side is taken (the protocol number alone tells them
// apart then).
func TestFindBinaryRefusesAnotherRelease(t *testing.T) {
	other := supervisortest.Build(t, []string{"CGO_ENABLED=0"}, "-ldflags", "-X github.com/sandbox-mcp/sandbox-mcp/supervisor/wire.version=9.9.9")
	for _, c := range []struct {
		daemon, mine, want string
	}{
		{other, "1.0.0", fmt.Sprintf("is version 9.9.9 (protocol %d), this server version 1.0.0", wire.Protocol)},
		{other, "9.9.9", ""},
		{other, "", ""},
		{supervisortest.Path(t), "1.0.0", ""},
		{"/bin/true", "", `says "" for its version`},
		{"/bin/false", "", "does not say its version (exit 1)"},
	} {
		dir := t.TempDir()
		exe := filepath.Join(dir, "sandbox-mcp")
		copyFile(t, c.daemon, filepath.Join(dir, DaemonName), 0o755)
		_, err := find(Locate{GOOS: "linux"}, host{"linux", "amd64", exe, c.mine})
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) ||
			!strings.Contains(err.Error(), filepath.Join(dir, DaemonName)+" (the "+DaemonName+" beside the server)")) {
			t.Errorf("%s as the daemon of a server %q: %v, want %q", filepath.Base(c.daemon), c.mine, err, c.want)
		}
	}
}

// The hello says the supervisor's release: one of another is refused, and
// the refusal names where its binary was found.
func TestHelloVersion(t *testing.T) {
	for _, c := range []struct {
		hello wire.Hello
		mine  string
		ok    bool
	}{
		{wire.Hello{Protocol: wire.Protocol, Version: "1.0.0"}, "1.0.0", true},
		{wire.Hello{Protocol: wire.Protocol}, "1.0.0", true},
		{wire.Hello{Protocol: wire.Protocol, Version: "1.0.0"}, "", true},
		{wire.Hello{Protocol: wire.Protocol, Version: "9.9.9"}, "1.0.0", false},
		{wire.Hello{Protocol: wire.Protocol + 1, Version: "1.0.0"}, "1.0.0", false},
	} {
		err := checkVersion(c.hello, c.mine)
		if c.ok != (err == nil) || !c.ok && (!errors.Is(err, ErrVersion) || !strings.Contains(err.Error(), "another version")) {
			t.Errorf("%+v to a server %q: %v", c.hello, c.mine, err)
		}
	}
	err := checkVersion(wire.Hello{Protocol: wire.Protocol, Version: "9.9.9"}, "1.0.0")
	b := &Binary{Where: "the " + DaemonName + " beside the server"}
	if got := b.Refusal(err); !errors.Is(got, ErrVersion) || !strings.Contains(got.Error(), "version 9.9.9") || !strings.HasSuffix(got.Error(), "its binary is "+b.Where) {
		t.Errorf("refusal: %v", got)
	}
	if b.Refusal(io.EOF) != io.EOF || b.Refusal(nil) != nil {
		t.Error("Refusal changed an error that is no refusal")
	}
}
