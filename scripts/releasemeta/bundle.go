package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
)

// bundle lays out the extension's files in a directory, for release.sh
// to zip as sandbox-mcp_V.mcpb: the manifest, the icon, the license, and
// the server for every platform and the supervisor daemons (main.go's
// bundle* paths) from a directory of builds,
// BIN/OS_ARCH/sandbox-mcp[.exe] and BIN/OS_ARCH/sandbox-mcp-supervisor.
//
//	releasemeta bundle -version V -bin DIR -license FILE -out DIR

// linuxLauncher picks the Linux build of this machine's architecture; the
// manifest runs it through /bin/sh.
const linuxLauncher = `#!/bin/sh
# sandbox-mcp's extension on Linux: the manifest runs this (platform_overrides.linux),
# which runs the build of this machine's architecture beside it.
dir=$(dirname "$0")
case $(uname -m) in
x86_64 | amd64) arch=amd64 ;;
aarch64 | arm64) arch=arm64 ;;
*) echo "sandbox-mcp: this extension has builds for amd64 and arm64, not $(uname -m)" >&2; exit 1 ;;
esac
bin=$dir/linux-$arch/sandbox-mcp
# An unpacker that dropped the mode.
[ -x "$bin" ] || chmod +x "$bin" 2>/dev/null
exec "$bin" "$@"
`

// bundleFiles are the bundle's files (path in the bundle -> where they
// come from, "" for those written here) for builds in bin.
func bundleFiles(bin string) map[string]string {
	return map[string]string{
		bundleWindows:                   filepath.Join(bin, "windows_amd64", "sandbox-mcp.exe"),
		bundleLinuxBuilds["amd64"]:      filepath.Join(bin, "linux_amd64", "sandbox-mcp"),
		bundleLinuxBuilds["arm64"]:      filepath.Join(bin, "linux_arm64", "sandbox-mcp"),
		bundleLinuxDaemons["amd64"]:     filepath.Join(bin, "linux_amd64", daemonName),
		bundleLinuxDaemons["arm64"]:     filepath.Join(bin, "linux_arm64", daemonName),
		bundleDarwin + " (amd64)":       filepath.Join(bin, "darwin_amd64", "sandbox-mcp"),
		bundleDarwin + " (arm64)":       filepath.Join(bin, "darwin_arm64", "sandbox-mcp"),
		bundleDarwinDaemon + " (amd64)": filepath.Join(bin, "darwin_amd64", daemonName),
		bundleDarwinDaemon + " (arm64)": filepath.Join(bin, "darwin_arm64", daemonName),
	}
}

func makeBundle(version, bin, license, out string) error {
	write := func(name string, data []byte, mode os.FileMode) error {
		p := filepath.Join(out, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, data, mode); err != nil {
			return err
		}
		return os.Chmod(p, mode) // not the umask's
	}
	src := bundleFiles(bin)
	read := func(name string) ([]byte, error) {
		b, err := os.ReadFile(src[name])
		if err != nil {
			return nil, fmt.Errorf("bundle: %s: %w", name, err)
		}
		return b, nil
	}
	for _, name := range []string{bundleWindows, bundleLinuxBuilds["amd64"], bundleLinuxBuilds["arm64"], bundleLinuxDaemons["amd64"], bundleLinuxDaemons["arm64"]} {
		b, err := read(name)
		if err != nil {
			return err
		}
		if err := write(name, b, 0o755); err != nil {
			return err
		}
	}
	// macOS: one universal binary of each.
	universal := func(name string) ([]byte, error) {
		amd, err := read(name + " (amd64)")
		if err != nil {
			return nil, err
		}
		arm, err := read(name + " (arm64)")
		if err != nil {
			return nil, err
		}
		return lipo(amd, arm)
	}
	fat, err := universal(bundleDarwin)
	if err != nil {
		return err
	}
	fatDaemon, err := universal(bundleDarwinDaemon)
	if err != nil {
		return err
	}
	icon, err := drawIcon()
	if err != nil {
		return err
	}
	lic, err := os.ReadFile(license)
	if err != nil {
		return fmt.Errorf("bundle: %w", err)
	}
	m, err := jsonBytes(manifest(version))
	if err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		data []byte
		mode os.FileMode
	}{
		{bundleDarwin, fat, 0o755}, {bundleDarwinDaemon, fatDaemon, 0o755}, {bundleLinux, []byte(linuxLauncher), 0o755},
		{bundleIcon, icon, 0o644}, {"LICENSE", lic, 0o644}, {"manifest.json", m, 0o644},
	} {
		if err := write(f.name, f.data, f.mode); err != nil {
			return err
		}
	}
	return nil
}

func bundleCmd(args []string) error {
	fs := flag.NewFlagSet("bundle", flag.ContinueOnError)
	version := fs.String("version", "", "the release's version")
	bin := fs.String("bin", "", "the builds: DIR/OS_ARCH/sandbox-mcp[.exe] and DIR/OS_ARCH/sandbox-mcp-supervisor")
	license := fs.String("license", "LICENSE", "the license file")
	out := fs.String("out", "", "the directory to lay the bundle out in")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *version == "" || *bin == "" || *out == "" {
		return fmt.Errorf("bundle: -version, -bin and -out are required")
	}
	return makeBundle(*version, *bin, *license, *out)
}
