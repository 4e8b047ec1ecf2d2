package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// Isolation says how the local provider runs bash.
const (
	IsolationNone  = "none"  // on the host, only with AllowHostBash
	IsolationBwrap = "bwrap" // in a bubblewrap namespace
	IsolationAuto  = "auto"  // bwrap where it works here, else none
	// IsolationContainer: the server runs inside a container (an image
	// made to be the sandbox, as the release's image is): bash runs in
	// it, unisolated from the server, and the container is the boundary
	// between the agent and the host. The server's start-up checks that
	// it is in a container; bash needs no AllowHostBash then.
	IsolationContainer = "container"
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

// ProbeBwrap checks that bubblewrap is recent enough (bwrapArgs uses
// --perms, new in 0.5) and can make a sandbox on this machine (it needs
// user namespaces, which may be disabled) by running `true` in one.
func ProbeBwrap(ctx context.Context) error {
	bin, err := exec.LookPath("bwrap")
	if err != nil {
		return errors.New("bwrap not found on PATH (install bubblewrap)")
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if v, err := exec.CommandContext(ctx, bin, "--version").Output(); err == nil {
		if err := checkBwrapVersion(string(v)); err != nil {
			return err
		}
	} // no version to read: the sandbox run below says what is wrong
	opts, command := bwrapArgs(nil, false, "/", []string{"/bin/sh", "-c", "exit 0"})
	cmd, err := bwrapCommand(bin, opts, command, []string{"PATH=" + defaultPath})
	if err != nil {
		return err
	}
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("bwrap does not work here: %v", err)
	}
	for _, f := range cmd.ExtraFiles {
		f.Close()
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-ctx.Done():
		cmd.Process.Kill()
		err = <-done
	}
	if err != nil {
		return fmt.Errorf("bwrap does not work here: %v: %s", err, strings.TrimSpace(out.String()))
	}
	return nil
}

// bwrapMinVersion is the oldest bubblewrap bwrapArgs works with: --perms
// came in 0.5.0 (Debian 11, Ubuntu 20.04 and RHEL 8/9 ship 0.4).
var bwrapMinVersion = [2]int{0, 5}

// checkBwrapVersion reads `bwrap --version` ("bubblewrap 0.4.1") and says
// when it is older than bwrapMinVersion. A version it cannot read passes.
func checkBwrapVersion(out string) error {
	f := strings.Fields(out)
	if len(f) < 2 || f[0] != "bubblewrap" {
		return nil
	}
	parts := strings.SplitN(f[1], ".", 3)
	if len(parts) < 2 {
		return nil
	}
	var v [2]int
	for i := range v {
		n, err := strconv.Atoi(parts[i])
		if err != nil {
			return nil
		}
		v[i] = n
	}
	if v[0] < bwrapMinVersion[0] || v[0] == bwrapMinVersion[0] && v[1] < bwrapMinVersion[1] {
		return fmt.Errorf("bubblewrap %d.%d or later is needed (found %s)", bwrapMinVersion[0], bwrapMinVersion[1], f[1])
	}
	return nil
}

// sandboxUID is who commands run as inside bubblewrap when the server runs
// as root. bwrap started by root maps root inside any user namespace to
// root outside, and root passes every check that looks only at the uid
// (/proc/sys, /proc/sysrq-trigger, root-owned files), capabilities or not.
// So as root, bwrap makes no user namespace, keeps only CAP_SETUID and
// CAP_SETGID, and setpriv inside drops to nobody, with no capabilities and
// no_new_privs (setuid binaries in /usr cannot raise it again), before the
// command runs. The thread's directories are owned by nobody then.
const sandboxUID = 65534

// bwrapCommand is the command that runs bwrap with opts and then command.
// The options go through a pipe (--args 3), so the sandbox's
// /proc/1/cmdline names no host path, and the seccomp filter through
// another (--seccomp 4); env is bwrap's environment, which the command
// inherits. The caller closes cmd.ExtraFiles after starting it.
func bwrapCommand(bwrap string, opts, command []string, env []string) (*exec.Cmd, error) {
	filter, err := pipeOf(keyringFilter())
	if err != nil {
		return nil, err
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		filter.Close()
		return nil, err
	}
	opts = append(opts[:len(opts):len(opts)], "--seccomp", "4") // ExtraFiles[1]
	go func() {
		for _, a := range opts {
			io.WriteString(pw, a)
			pw.Write([]byte{0})
		}
		pw.Close()
	}()
	cmd := exec.Command(bwrap, append([]string{"--args", "3", "--"}, command...)...)
	cmd.Dir = "/"
	cmd.Env = env
	cmd.ExtraFiles = []*os.File{pr, filter}
	return cmd, nil
}

// pipeOf is the read end of a pipe that holds b (small: it fits the pipe's
// buffer) and then ends.
func pipeOf(b []byte) (*os.File, error) {
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	_, err = pw.Write(b)
	if cerr := pw.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		pr.Close()
		return nil, err
	}
	return pr, nil
}

// bwrapArgs builds the bubblewrap arguments: a fresh tmpfs root with the
// system directories read-only, a minimal /etc, private /proc (its sys
// read-only), /dev and temp dirs (1777), the sandbox's mounts at their
// virtual paths (read-only ones read-only), every namespace unshared
// (network too unless network), no capabilities, a new session, and death
// with the server. bwrapCommand adds the seccomp filter.
func bwrapArgs(mounts []sandbox.Mount, network bool, cwd string, argv []string) (opts, command []string) {
	a := []string{"--die-with-parent", "--new-session"}
	root := os.Geteuid() == 0
	if root {
		a = append(a, "--unshare-ipc", "--unshare-pid", "--unshare-uts", "--unshare-cgroup-try",
			"--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID")
		if !network {
			a = append(a, "--unshare-net")
		}
	} else {
		a = append(a, "--unshare-all", "--cap-drop", "ALL")
		if network {
			a = append(a, "--share-net")
		}
	}
	a = append(a, "--hostname", "sandbox",
		"--proc", "/proc", "--ro-bind", "/proc/sys", "/proc/sys", "--ro-bind-try", "/proc/sysrq-trigger", "/proc/sysrq-trigger",
		"--dev", "/dev",
		// bwrap makes a tmpfs 0755 and a directory it creates for a bind
		// 0700, both root's: useless to nobody. The temp dirs are 1777 as on
		// any host; /etc and /run are 0755 and hold only what is bound.
		"--perms", "1777", "--tmpfs", "/dev/shm",
		"--perms", "1777", "--tmpfs", "/tmp",
		"--perms", "1777", "--tmpfs", "/var/tmp",
		"--perms", "0755", "--tmpfs", "/run",
		"--perms", "0755", "--dir", "/etc")
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
	// Mount points' parents, world-readable (bwrap would make them 0700).
	var parents []string
	for _, m := range mounts {
		for d := path.Dir(m.Virtual); d != "/" && !slices.Contains(parents, d); d = path.Dir(d) {
			parents = append(parents, d)
		}
	}
	slices.Sort(parents) // parents first
	for _, d := range parents {
		a = append(a, "--perms", "0755", "--dir", d)
	}
	for _, m := range mounts {
		flag := "--bind"
		if m.ReadOnly {
			flag = "--ro-bind"
		}
		a = append(a, flag, m.Host, m.Virtual)
	}
	a = append(a, "--chdir", cwd)
	if root {
		id := strconv.Itoa(sandboxUID)
		command = []string{"/usr/bin/setpriv", "--reuid=" + id, "--regid=" + id, "--clear-groups", "--inh-caps=-all", "--nnp", "--"}
	}
	return a, append(command, argv...)
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
