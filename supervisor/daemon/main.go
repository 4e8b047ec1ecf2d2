//go:build unix

package daemon

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/sandbox-mcp/sandbox-mcp/supervisor/wire"
)

// Name is the daemon's own name, in what it says.
const Name = "sandbox-mcp-supervisor"

// Main runs the daemon with the command line's arguments and returns its
// exit code: the main of cmd/sandbox-mcp-supervisor, and of the server's
// `sandbox-mcp supervise` (a server with no daemon beside it is its
// sandboxes' supervisor). A first argument "supervise" is taken and
// dropped, so that one command line starts either: what the providers run
// is `BINARY supervise [flags]`. --version prints the version and the
// protocol (the server checks them before it runs a daemon it found).
func Main(args []string) int {
	if len(args) > 0 && args[0] == "supervise" {
		args = args[1:]
	}
	if len(args) == 1 && args[0] == "--version" {
		fmt.Printf("%s %s protocol %d\n", Name, versionText(), wire.Protocol)
		return 0
	}
	return Run(args, os.Stdin, os.Stdout)
}

// versionText is this build's version as --version prints it: one word.
func versionText() string {
	if v := wire.Version(); v != "" {
		return v
	}
	return "dev"
}

// Run runs the daemon. With no arguments it serves one channel on stdin
// and stdout and, when that ends, kills everything it started and exits
// (the local provider). With --listen SOCK it serves every connection to
// the unix socket SOCK for as long as it runs (the main process of a
// docker or kubernetes sandbox). --install, --await and --connect are the
// kubernetes provider's (modes.go).
func Run(args []string, stdin io.Reader, stdout io.Writer) int {
	o, err := parseArgs(args)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if o.spareIdleSet {
		spareIdle = o.spareIdle
	}
	switch {
	case o.install != "":
		for _, d := range o.mkdirs {
			if err := os.MkdirAll(d, 0o755); err != nil {
				fmt.Fprintln(os.Stderr, Name+" --install: --mkdir:", err)
				return 1
			}
		}
		if err := install(o.install); err != nil {
			fmt.Fprintln(os.Stderr, Name+" --install:", err)
			return 1
		}
		if o.hold {
			hold()
		}
		return 0
	case o.await != "":
		if err := await(o.await); err != nil {
			fmt.Fprintln(os.Stderr, Name+" --await:", err)
			return 1
		}
		return 0
	case o.connect != "":
		if err := relay(o.connect, stdin, stdout); err != nil {
			fmt.Fprintln(os.Stderr, Name+" --connect:", err)
			return 1
		}
		return 0
	}
	for _, d := range o.mkdirs {
		os.MkdirAll(d, 0o755)
	}
	if o.keepSet {
		keepOnly(o.keepEnv)
	}
	s := newSupervisor(o.listen)
	if o.ckptDir != "" {
		s.ckpt = &ckptStore{dir: o.ckptDir, root: o.userData}
	}
	if o.listen == "" {
		// The channel is stdout: a write after the server died would
		// have Go kill this process for the broken pipe (fd 1), before
		// it kills what its commands left. Asked for, SIGPIPE makes
		// that write fail instead, and the channel's end is seen. A
		// signal Go handles is reset to its default in every command.
		signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
		err := s.serve(stdin, stdout)
		s.shutdown()
		if err != nil && !errors.Is(err, io.EOF) {
			fmt.Fprintln(os.Stderr, Name+":", err)
			return 1
		}
		return 0
	}
	if err := s.listen(o.listen); err != nil {
		fmt.Fprintln(os.Stderr, Name+":", err)
		return 1
	}
	return 0
}

// listen serves every connection to the unix socket sock until the
// process is told to end (SIGTERM, SIGINT), then kills everything it
// started.
func (s *supervisor) listen(sock string) error {
	os.Remove(sock) // a socket left by an earlier run of this container
	l, err := net.Listen("unix", sock)
	if err != nil {
		return err
	}
	os.Chmod(sock, 0o600)
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-term
		l.Close()
	}()
	for {
		c, err := l.Accept()
		if err != nil {
			s.shutdown()
			return nil
		}
		go func() {
			s.serve(c, c)
			c.Close()
		}()
	}
}
