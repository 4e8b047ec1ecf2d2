package main

import (
	"archive/zip"
	"bytes"
	"context"
	"debug/macho"
	"encoding/binary"
	"encoding/json"
	"image/png"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/internal/testkit"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// fakeMacho is the header of a thin 64-bit Mach-O executable for cpu.
func fakeMacho(cpu macho.Cpu, fill byte) []byte {
	b := bytes.Repeat([]byte{fill}, 32+4000)
	le := binary.LittleEndian
	le.PutUint32(b[0:], macho.Magic64)
	le.PutUint32(b[4:], uint32(cpu))
	le.PutUint32(b[8:], 3)
	le.PutUint32(b[12:], uint32(macho.TypeExec))
	for i := 16; i < 32; i++ {
		b[i] = 0 // no load commands
	}
	return b
}

// fakePE is the header of a Windows executable for machine.
func fakePE(machine uint16) []byte {
	b := make([]byte, 64+4+20+64)
	copy(b, "MZ")
	binary.LittleEndian.PutUint32(b[0x3c:], 64)
	copy(b[64:], "PE\x00\x00")
	binary.LittleEndian.PutUint16(b[68:], machine)
	return b
}

// fakeELF is the header of a 64-bit Linux executable for machine.
func fakeELF(machine uint16) []byte {
	b := make([]byte, 64)
	copy(b, "\x7fELF\x02\x01\x01")
	le := binary.LittleEndian
	le.PutUint16(b[16:], 2)
	le.PutUint16(b[18:], machine)
	le.PutUint32(b[20:], 1)
	le.PutUint16(b[52:], 64)
	le.PutUint16(b[54:], 56)
	le.PutUint16(b[58:], 64)
	return b
}

// A universal Mach-O holds each thin one whole, at an aligned offset,
// under the CPU type it was built for.
func TestLipo(t *testing.T) {
	t.Parallel()
	amd, arm := fakeMacho(macho.CpuAmd64, 1), fakeMacho(macho.CpuArm64, 2)
	fat, err := lipo(amd, arm)
	if err != nil {
		t.Fatal(err)
	}
	f, err := macho.NewFatFile(bytes.NewReader(fat))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Arches) != 2 || f.Arches[0].Cpu != macho.CpuAmd64 || f.Arches[1].Cpu != macho.CpuArm64 {
		t.Fatalf("arches %+v", f.Arches)
	}
	for i, want := range [][]byte{amd, arm} {
		a := f.Arches[i]
		if a.Offset%(1<<fatAlign) != 0 || !bytes.Equal(fat[a.Offset:a.Offset+a.Size], want) {
			t.Errorf("slice %d: offset %d, size %d, not the thin binary at an aligned offset", i, a.Offset, a.Size)
		}
	}
	if isMac(fat) != nil {
		t.Errorf("check refuses it: %v", isMac(fat))
	}
	if _, err := lipo(amd, fakeMacho(macho.CpuAmd64, 3)); err == nil {
		t.Error("two amd64 slices were taken")
	}
	if _, err := lipo(amd, []byte("not mach-o")); err == nil {
		t.Error("a file that is no Mach-O was taken")
	}
}

// The icon is a small square PNG, the same bytes every build.
func TestIcon(t *testing.T) {
	t.Parallel()
	a, err := drawIcon()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := drawIcon()
	img, err := png.Decode(bytes.NewReader(a))
	if err != nil {
		t.Fatal(err)
	}
	if r := img.Bounds(); r.Dx() != 512 || r.Dy() != 512 || len(a) > maxIcon || !bytes.Equal(a, b) {
		t.Errorf("icon %dx%d, %d bytes, deterministic %v", r.Dx(), r.Dy(), len(a), bytes.Equal(a, b))
	}
}

// fakeBuilds lays out builds as release.sh does: BIN/OS_ARCH/sandbox-mcp,
// and the supervisor daemon beside it.
func fakeBuilds(t *testing.T) string {
	t.Helper()
	bin := t.TempDir()
	for name, data := range map[string][]byte{
		"darwin_amd64/sandbox-mcp":            fakeMacho(macho.CpuAmd64, 1),
		"darwin_arm64/sandbox-mcp":            fakeMacho(macho.CpuArm64, 2),
		"darwin_amd64/sandbox-mcp-supervisor": fakeMacho(macho.CpuAmd64, 3),
		"darwin_arm64/sandbox-mcp-supervisor": fakeMacho(macho.CpuArm64, 4),
		"windows_amd64/sandbox-mcp.exe":       fakePE(0x8664),
		"linux_amd64/sandbox-mcp":             fakeELF(62),
		"linux_arm64/sandbox-mcp":             fakeELF(183),
		"linux_amd64/sandbox-mcp-supervisor":  fakeELF(62),
		"linux_arm64/sandbox-mcp-supervisor":  fakeELF(183),
	} {
		os.MkdirAll(filepath.Join(bin, filepath.Dir(name)), 0o755)
		os.WriteFile(filepath.Join(bin, name), data, 0o755)
	}
	return bin
}

// zipBundle zips dir as release.sh's zipdir does (Unix modes kept);
// edit may change a file's mode or bytes on the way.
func zipBundle(t *testing.T, dir, out string, edit func(name string, mode fs.FileMode, data []byte) (fs.FileMode, []byte, bool)) {
	t.Helper()
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	zw := zip.NewWriter(f)
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		fi, _ := d.Info()
		data, _ := os.ReadFile(p)
		mode := fi.Mode()
		if edit != nil {
			var keep bool
			if mode, data, keep = edit(rel, mode, data); !keep {
				return nil
			}
		}
		h := &zip.FileHeader{Name: rel, Method: zip.Deflate}
		h.SetMode(mode)
		w, _ := zw.CreateHeader(h)
		w.Write(data)
		return nil
	})
	zw.Close()
	f.Close()
}

// The bundle for every platform passes the check, and the check finds
// each broken promise (issue #25 items 3 and 4).
func TestBundleChecked(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "bundle")
	lic := filepath.Join(t.TempDir(), "LICENSE")
	os.WriteFile(lic, []byte("Apache-2.0"), 0o644)
	if err := makeBundle("1.2.3", fakeBuilds(t), lic, dir); err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(t.TempDir(), "sandbox-mcp_1.2.3.mcpb")
	zipBundle(t, dir, good, nil)
	if errs := checkBundle(good); len(errs) > 0 {
		t.Fatalf("the bundle: %s", strings.Join(errs, "\n"))
	}
	for _, c := range []struct {
		name string
		edit func(name string, mode fs.FileMode, data []byte) (fs.FileMode, []byte, bool)
		want string
	}{
		{"no arm64 Linux build", func(n string, m fs.FileMode, d []byte) (fs.FileMode, []byte, bool) {
			return m, d, n != "server/linux-arm64/sandbox-mcp"
		}, "server/linux-arm64/sandbox-mcp: not in the bundle"},
		{"a build that lost its mode", func(n string, m fs.FileMode, d []byte) (fs.FileMode, []byte, bool) {
			if n == "server/sandbox-mcp.exe" {
				m = 0o644
			}
			return m, d, true
		}, "server/sandbox-mcp.exe: not executable"},
		{"no arm64 Linux daemon", func(n string, m fs.FileMode, d []byte) (fs.FileMode, []byte, bool) {
			return m, d, n != "server/linux-arm64/sandbox-mcp-supervisor"
		}, "server/linux-arm64/sandbox-mcp-supervisor: not in the bundle"},
		{"a Linux daemon of the other architecture", func(n string, m fs.FileMode, d []byte) (fs.FileMode, []byte, bool) {
			if n == "server/linux-amd64/sandbox-mcp-supervisor" {
				d = fakeELF(183)
			}
			return m, d, true
		}, "want amd64"},
		{"a thin macOS daemon", func(n string, m fs.FileMode, d []byte) (fs.FileMode, []byte, bool) {
			if n == "server/sandbox-mcp-supervisor" {
				d = fakeMacho(macho.CpuAmd64, 3)
			}
			return m, d, true
		}, "server/sandbox-mcp-supervisor: not a universal Mach-O"},
		{"a Linux build of the other architecture", func(n string, m fs.FileMode, d []byte) (fs.FileMode, []byte, bool) {
			if n == "server/linux-arm64/sandbox-mcp" {
				d = fakeELF(62)
			}
			return m, d, true
		}, "want arm64"},
		{"a thin macOS build", func(n string, m fs.FileMode, d []byte) (fs.FileMode, []byte, bool) {
			if n == "server/sandbox-mcp" {
				d = fakeMacho(macho.CpuArm64, 2)
			}
			return m, d, true
		}, "not a universal Mach-O"},
		{"an optional setting as an argument of its own", func(n string, m fs.FileMode, d []byte) (fs.FileMode, []byte, bool) {
			if n == "manifest.json" {
				d = bytes.Replace(d, []byte(`"--skills-dir=${user_config.skills_dir}"`), []byte(`"--skills-dir", "${user_config.skills_dir}"`), 1)
			}
			return m, d, true
		}, "the optional skills_dir, left blank, reaches the server as it is"},
		{"an undefined setting", func(n string, m fs.FileMode, d []byte) (fs.FileMode, []byte, bool) {
			if n == "manifest.json" {
				d = bytes.Replace(d, []byte(`${user_config.image}`), []byte(`${user_config.docker_image}`), -1)
			}
			return m, d, true
		}, "user_config has no docker_image"},
		{"no icon", func(n string, m fs.FileMode, d []byte) (fs.FileMode, []byte, bool) { return m, d, n != "icon.png" }, "icon: icon.png is not in the bundle"},
		{"a manifest against its version", func(n string, m fs.FileMode, d []byte) (fs.FileMode, []byte, bool) {
			if n == "manifest.json" {
				d = bytes.Replace(d, []byte(`"license"`), []byte(`"licence"`), 1)
			}
			return m, d, true
		}, `"licence" is not a field`},
	} {
		bad := filepath.Join(t.TempDir(), "sandbox-mcp_1.2.3.mcpb")
		zipBundle(t, dir, bad, c.edit)
		if errs := strings.Join(checkBundle(bad), "\n"); !strings.Contains(errs, c.want) {
			t.Errorf("%s: %q, want %q", c.name, errs, c.want)
		}
	}
}

// registrySchema is the MCP Registry's server.json schema where the Go
// module cache holds the registry's module (release-check.sh downloads
// it: go mod download github.com/modelcontextprotocol/registry@v1.8.9).
func registrySchema(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		t.Skipf("SKIPPED: go env GOMODCACHE: %v", err)
	}
	f := filepath.Join(strings.TrimSpace(string(out)), "github.com", "modelcontextprotocol", "registry@"+registryModuleVersion, "internal", "validators", "schemas", "2025-12-11.json")
	if _, err := os.Stat(f); err != nil {
		t.Skipf("SKIPPED: the registry's schema is not in the module cache (go mod download github.com/modelcontextprotocol/registry@%s)", registryModuleVersion)
	}
	return f
}

// registryModuleVersion is the release of modelcontextprotocol/registry
// whose server.json schema the release is checked against (release-check.sh).
const registryModuleVersion = "v1.8.9"

// server.json is valid against the registry's own schema, and a client
// can pick its package: one per registryType.
func TestServerJSONAgainstRegistrySchema(t *testing.T) {
	t.Parallel()
	schema := registrySchema(t)
	b := filepath.Join(t.TempDir(), "sandbox-mcp_1.2.3.mcpb")
	os.WriteFile(b, []byte("bundle"), 0o644)
	s := must(server("1.2.3", "ghcr.io/sandbox-mcp/sandbox-mcp:1.2.3", "https://github.com/sandbox-mcp/sandbox-mcp/releases/download/v1.2.3", []string{b}))
	raw, _ := jsonBytes(s)
	if errs := checkServerJSON(raw, "1.2.3", b, schema); len(errs) > 0 {
		t.Fatalf("server.json: %s", strings.Join(errs, "\n"))
	}
	long := s
	long.Description = strings.Repeat("x", 101)
	raw, _ = jsonBytes(long)
	if errs := strings.Join(checkServerJSON(raw, "1.2.3", b, schema), "\n"); !strings.Contains(errs, "against the registry's schema") {
		t.Errorf("a description too long: %q", errs)
	}
	two := s
	two.Packages = append(append([]regPackage{}, s.Packages...), s.Packages[1])
	raw, _ = jsonBytes(two)
	if errs := strings.Join(checkServerJSON(raw, "1.2.3", b, schema), "\n"); !strings.Contains(errs, "2 mcpb packages") {
		t.Errorf("two bundles: %q", errs)
	}
}

// substitute does what an MCPB client does with mcp_config
// (modelcontextprotocol/mcpb, getMcpConfigForManifest): the platform's
// override, then ${__dirname} and every ${user_config.KEY} the user set or
// that has a default — a whole-argument variable without a non-empty
// value is left as it is.
func substitute(m mcpbManifest, platform, dir string, user map[string]any) (string, []string) {
	cfg := m.Server.MCPConfig
	cmd, args := cfg.Command, cfg.Args
	if o, ok := cfg.PlatformOverrides[platform]; ok {
		if o.Command != "" {
			cmd = o.Command
		}
		if o.Args != nil {
			args = o.Args
		}
	}
	vars := map[string]string{"__dirname": dir}
	for k, o := range m.UserConfig {
		if o.Default != nil {
			vars["user_config."+k] = toString(o.Default)
		}
	}
	for k, v := range user {
		vars["user_config."+k] = toString(v)
	}
	whole := regexp.MustCompile(`^\$\{(user_config\.[^}]+)\}$`)
	one := func(s string) string {
		if w := whole.FindStringSubmatch(s); w != nil {
			if v := vars[w[1]]; v != "" {
				return v
			}
			return s
		}
		for k, v := range vars {
			s = strings.ReplaceAll(s, "${"+k+"}", v)
		}
		return s
	}
	var out []string
	for _, a := range args {
		out = append(out, one(a))
	}
	return one(cmd), out
}

func toString(v any) string {
	b, _ := json.Marshal(v)
	var s string
	if json.Unmarshal(b, &s) == nil {
		return s
	}
	return string(b)
}

// The extension starts the server as a client would run it on this OS —
// every setting left at its default, then a client that passes a blank
// setting unfilled — and the server serves (an optional setting left blank
// once stopped it).
func TestExtensionStartsTheServer(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" || (runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64") {
		t.Skip("SKIPPED: the extension's Linux command is checked on linux/amd64 or arm64")
	}
	dir := t.TempDir()
	// The server and its daemon beside it, as the bundle has them.
	build := filepath.Join(dir, "server", "linux-"+runtime.GOARCH)
	if out, err := exec.Command("go", "build", "-o", build+"/", "../../cmd/sandbox-mcp", "../../cmd/sandbox-mcp-supervisor").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	os.WriteFile(filepath.Join(dir, filepath.FromSlash(bundleLinux)), []byte(linuxLauncher), 0o644) // modes may be lost
	m := manifest("1.2.3")
	noDefaults := manifest("1.2.3")
	for k, o := range noDefaults.UserConfig {
		if k != "thread" {
			o.Default = nil
			noDefaults.UserConfig[k] = o
		}
	}
	for _, c := range []struct {
		name string
		m    mcpbManifest
		user map[string]any
	}{
		{"defaults", m, nil},
		{"blank settings unfilled", noDefaults, map[string]any{"thread": "ext"}},
	} {
		cmd, args := substitute(c.m, "linux", dir, c.user)
		home := t.TempDir()
		proc := exec.Command(cmd, args...)
		proc.Env = []string{"HOME=" + home, "PATH=/usr/bin:/bin"} // a client's minimal environment
		var stderr testkit.Buffer                                 // the server writes it while the test reads it
		proc.Stderr = &stderr
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "ext", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: proc}, nil)
		if err != nil {
			cancel()
			t.Fatalf("%s: %s %q: %v\n%s", c.name, cmd, args, err, stderr.String())
		}
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "ls", Arguments: map[string]any{}})
		if err != nil || res.IsError {
			t.Errorf("%s: ls: %v %+v\n%s", c.name, err, res, stderr.String())
		}
		if strings.Contains(stderr.String(), "no "+daemonName+" beside the server") {
			t.Errorf("%s: the server did not find the daemon beside it:\n%s", c.name, stderr.String())
		}
		cs.Close()
		cancel()
	}
}
