//go:build unix

package daemon

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// options are the supervise subcommand's flags.
type options struct {
	listen string // --listen SOCK: serve every connection to the unix socket SOCK
	// --mkdir DIR: made first; with --listen errors are ignored, with
	// --install (the kubernetes installer, which makes the directories the
	// sandbox container mounts as its user before that container starts)
	// an error fails it.
	mkdirs  []string
	keepEnv []string // --keep-env "A B": commands get only these variables
	keepSet bool
	install string // --install DEST: copy this binary to DEST and exit
	hold    bool   // --hold (with --install): then wait until terminated
	await   string // --await DEST: wait until DEST exists
	connect string // --connect SOCK: relay stdin and stdout to the socket SOCK
	// --checkpoints STORE --user-data ROOT (serving: with or without
	// --listen): the checkpoint store and the user-data root it saves
	// (checkpoints.go); both or neither, clean absolute paths, the store
	// not inside the root.
	ckptDir, userData string
	// --spare-idle D (serving): how long a spare shell waits for its
	// command (spare.go); 0: no spare shells. Unset: spareIdle.
	spareIdle    time.Duration
	spareIdleSet bool
}

const usage = "usage: " + Name + " [supervise] [--listen SOCKET [--mkdir DIR]... [--keep-env NAMES]] [--checkpoints STORE --user-data ROOT] [--spare-idle DURATION] | --install DEST [--mkdir DIR]... [--hold] | --await DEST | --connect SOCKET | --version"

func parseArgs(args []string) (options, error) {
	var o options
	for len(args) > 0 {
		if args[0] == "--hold" {
			o.hold = true
			args = args[1:]
			continue
		}
		if len(args) < 2 {
			return o, errors.New(usage)
		}
		v := args[1]
		switch args[0] {
		case "--listen":
			o.listen = v
		case "--mkdir":
			o.mkdirs = append(o.mkdirs, v)
		case "--keep-env":
			o.keepEnv, o.keepSet = strings.Fields(v), true
		case "--install":
			o.install = v
		case "--await":
			o.await = v
		case "--connect":
			o.connect = v
		case "--checkpoints":
			o.ckptDir = v
		case "--user-data":
			o.userData = v
		case "--spare-idle":
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 {
				return o, errors.New(Name + ": --spare-idle: want a duration of 0 or more (0: no spare shells), as 2m")
			}
			o.spareIdle, o.spareIdleSet = d, true
		default:
			return o, errors.New(usage)
		}
		args = args[2:]
	}
	modes := 0
	for _, m := range []string{o.listen, o.install, o.await, o.connect} {
		if m != "" {
			modes++
		}
	}
	if modes > 1 || (o.listen == "" && o.install == "" && len(o.mkdirs) > 0) || (o.listen == "" && o.keepSet) || (o.hold && o.install == "") ||
		(o.spareIdleSet && modes > 0 && o.listen == "") {
		return o, errors.New(usage)
	}
	if o.ckptDir != "" || o.userData != "" {
		switch {
		case modes > 0 && o.listen == "":
			return o, errors.New(usage)
		case !cleanAbs(o.ckptDir) || !cleanAbs(o.userData):
			return o, errors.New(Name + ": --checkpoints and --user-data: want both, each a clean absolute path")
		case o.ckptDir == o.userData || strings.HasPrefix(o.ckptDir, strings.TrimSuffix(o.userData, "/")+"/") ||
			strings.HasPrefix(o.userData, strings.TrimSuffix(o.ckptDir, "/")+"/"):
			return o, errors.New(Name + ": --checkpoints and --user-data may not lie one inside the other (the store would save itself)")
		}
	}
	return o, nil
}

// cleanAbs reports whether p is a clean absolute path.
func cleanAbs(p string) bool { return p != "" && filepath.IsAbs(p) && filepath.Clean(p) == p }

// keepOnly unsets every variable of this process but names: what the
// runtime adds to a container's environment (KUBERNETES_SERVICE_HOST, ...)
// never reaches a command.
func keepOnly(names []string) {
	keep := map[string]bool{}
	for _, n := range names {
		keep[n] = true
	}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if !keep[k] {
			os.Unsetenv(k)
		}
	}
}

// install copies this binary to dest, mode 0555, atomically (a temporary
// file beside it, renamed; not synced: the volume dies with its Pod, and an
// fsync would only slow every Pod's start): the kubernetes
// provider's installer container puts the supervisor into a volume the
// sandbox container runs it from, so the sandbox's image needs nothing of
// ours; the rename means the sandbox container finds the whole binary or
// none. The server image has no cp or sh, hence this mode.
func install(dest string) error {
	src, err := os.Open("/proc/self/exe")
	if err != nil {
		exe, err2 := os.Executable()
		if err2 != nil {
			return err
		}
		if src, err = os.Open(exe); err != nil {
			return err
		}
	}
	defer src.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dest), ".install-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, src); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o555); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dest)
}

// hold does nothing until the process is told to end (SIGTERM, SIGINT):
// after --install, the main process of the kubernetes provider's installer
// container, which runs for as long as its Pod (the kubelet runs the
// container's postStart hook, --await, only in a running container), in an
// image (this server's, FROM scratch) with nothing else to run.
func hold() {
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM, syscall.SIGINT)
	<-term
}

// awaitWait bounds how long --await waits for the installed binary.
const awaitWait = time.Minute

// await waits until dest exists: install renames it into place whole. The
// kubernetes provider's installer container's postStart hook, so that the
// kubelet starts the sandbox container (the next in the Pod) only once its
// main process, the supervisor, is there to run.
func await(dest string) error {
	deadline := time.Now().Add(awaitWait)
	for {
		_, err := os.Stat(dest)
		if err == nil {
			return nil
		}
		if !errors.Is(err, fs.ErrNotExist) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// connectWait bounds how long --connect waits for the supervisor's socket
// (the container may just have started).
const connectWait = 10 * time.Second

// relay connects stdin and stdout to the supervisor listening on sock, for
// a server that reaches the sandbox only through an exec API (the
// kubernetes provider: one long-lived pods/exec per channel). It ends when
// either side does. It never closes stdout early: containerd loses exec
// stdin once the reading process's stdout is gone.
func relay(sock string, stdin io.Reader, stdout io.Writer) error {
	var c net.Conn
	deadline := time.Now().Add(connectWait)
	for {
		var err error
		if c, err = net.Dial("unix", sock); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("connect to the supervisor: %w", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	defer c.Close()
	done := make(chan error, 2)
	go func() {
		_, err := io.Copy(c, stdin)
		done <- err
	}()
	go func() {
		_, err := io.Copy(stdout, c)
		if err == nil {
			err = errors.New("the supervisor ended")
		}
		done <- err
	}()
	return <-done
}
