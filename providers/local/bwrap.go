package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// Isolation says how the local provider runs bash.
const (
	IsolationNone  = "none"  // on the host, only with AllowHostBash
	IsolationBwrap = "bwrap" // in a bubblewrap namespace
)

// systemDirs are bound read-only when they are directories and recreated
// as symlinks when they are symlinks (merged /usr).
var systemDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}

// etcFiles is the part of /etc a command needs to run programs, resolve
// names and verify certificates. Everything else of /etc (shadow, sudoers,
// ssh keys, credentials of services) stays out.
var etcFiles = []string{
	"passwd", "group", "hosts", "host.conf", "resolv.conf", "nsswitch.conf", "gai.conf",
	"ld.so.cache", "ld.so.conf", "ld.so.conf.d", "ssl", "ca-certificates", "ca-certificates.conf",
	"alternatives", "localtime", "timezone", "os-release", "debian_version", "protocols", "services",
	"mime.types", "bash.bashrc", "profile", "inputrc", "environment", "login.defs", "magic", "magic.mime",
}

// ProbeBwrap checks that bubblewrap can make a sandbox on this machine (it
// needs user namespaces, which may be disabled) by running `true` in one.
func ProbeBwrap(ctx context.Context) error {
	bin, err := exec.LookPath("bwrap")
	if err != nil {
		return errors.New("bwrap not found on PATH (install bubblewrap)")
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	args := bwrapArgs(nil, false, []string{"PATH=" + defaultPath}, "/", []string{"/bin/sh", "-c", "exit 0"})
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("bwrap does not work here: %v: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// bwrapArgs builds the bubblewrap command line: a fresh tmpfs root with the
// system directories read-only, a minimal /etc, private /proc, /dev and
// /tmp, the sandbox's mounts at their virtual paths (read-only ones
// read-only), every namespace unshared (network too unless network), no
// capabilities, a new session, and death with the server.
func bwrapArgs(mounts []sandbox.Mount, network bool, env []string, cwd string, argv []string) []string {
	a := []string{
		"--die-with-parent", "--new-session", "--unshare-all", "--cap-drop", "ALL",
		"--hostname", "sandbox",
		"--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--tmpfs", "/var/tmp", "--tmpfs", "/run",
	}
	if network {
		a = append(a, "--share-net")
	}
	for _, d := range systemDirs {
		fi, err := os.Lstat(d)
		switch {
		case err != nil:
		case fi.Mode()&os.ModeSymlink != 0:
			if target, err := os.Readlink(d); err == nil {
				a = append(a, "--symlink", target, d)
			}
		case fi.IsDir():
			a = append(a, "--ro-bind", d, d)
		}
	}
	for _, f := range etcFiles {
		p := filepath.Join("/etc", f)
		if _, err := os.Stat(p); err == nil {
			a = append(a, "--ro-bind", p, p)
		}
	}
	for _, m := range mounts {
		flag := "--bind"
		if m.ReadOnly {
			flag = "--ro-bind"
		}
		a = append(a, flag, m.Host, m.Virtual)
	}
	a = append(a, "--clearenv")
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		a = append(a, "--setenv", k, v)
	}
	a = append(a, "--chdir", cwd, "--")
	return append(a, argv...)
}

// execBwrap runs the command inside bubblewrap, where the virtual paths are
// real mount points: nothing to rewrite.
func (s *Sandbox) execBwrap(ctx context.Context, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
	env := Env(s.p.cfg.EnvInherit, sandbox.WorkspaceDir)
	for i, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			env[i] = "PATH=" + sandboxPath(v)
		}
	}
	args := bwrapArgs(s.mounts, s.p.cfg.Network, env, sandbox.WorkspaceDir, []string{s.p.shell, "-c", req.Command})
	return runGroup(ctx, req, s.p.bwrap, args, "/", []string{"PATH=" + defaultPath})
}

// sandboxPath keeps the PATH entries that exist inside the sandbox (the
// system directories), so the host's layout (home directories, tool
// managers) does not show.
func sandboxPath(hostPath string) string {
	var keep []string
	for _, d := range filepath.SplitList(hostPath) {
		for _, sys := range systemDirs {
			if sandbox.Within(d, sys) && !slices.Contains(keep, d) {
				keep = append(keep, d)
			}
		}
	}
	if len(keep) == 0 {
		return defaultPath
	}
	return strings.Join(keep, ":")
}
