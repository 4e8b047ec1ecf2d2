package sandbox

import (
	"errors"
	"testing"
)

func TestInbandStatus(t *testing.T) {
	for _, c := range []struct {
		name    string
		writes  []string
		started bool
		pid     int
		code    int
		hasCode bool
	}{
		{"whole", []string{"sandbox-mcp-pid 42 1\nsandbox-mcp-exit 3\n"}, true, 42, 3, true},
		{"split", []string{"sandbox-", "mcp-pid 4", "2 1\nsandbox-mcp-ex", "it 0", "\n"}, true, 42, 0, true},
		{"not the leader", []string{"sandbox-mcp-pid 42 0\n"}, true, 0, 0, false},
		{"never pid 1", []string{"sandbox-mcp-pid 1 1\n"}, true, 0, 0, false},
		{"killed", []string{"sandbox-mcp-pid 42 1\n"}, true, 42, 0, false},
		{"engine error", []string{"OCI runtime exec failed\n"}, false, 0, 0, false},
		{"no newline", []string{"sandbox-mcp-exit 3"}, false, 0, 0, false},
		{"first pid only", []string{"sandbox-mcp-pid 42 1\nsandbox-mcp-pid 7 1\nsandbox-mcp-exit 0\n"}, true, 42, 0, true},
		{"junk", []string{"sandbox-mcp-exit x\nsandbox-mcp-pid -5 1\n"}, true, 0, 0, false},
	} {
		var s InbandStatus
		for _, w := range c.writes {
			if n, err := s.Write([]byte(w)); n != len(w) || err != nil {
				t.Fatalf("%s: Write = %d, %v", c.name, n, err)
			}
		}
		code, ok := s.ExitCode()
		if s.Started() != c.started || s.PID() != c.pid || code != c.code || ok != c.hasCode {
			t.Errorf("%s: started %v pid %d code %d/%v; want %v %d %d/%v", c.name, s.Started(), s.PID(), code, ok, c.started, c.pid, c.code, c.hasCode)
		}
	}
}

func TestShellFromProbe(t *testing.T) {
	for _, c := range []struct {
		out   string
		code  int
		err   error
		shell string
		known bool
	}{
		{"bash\n", 0, nil, "bash", true},
		{"sh\n", 0, nil, "sh", true},
		{"", 127, nil, "", true}, // no sh in the image
		{"", 126, nil, "", true},
		{"", -1, errors.New("engine down"), "", false},
		{"zsh\n", 0, nil, "", false},
	} {
		sh, known := ShellFromProbe([]byte(c.out), c.code, c.err)
		if sh != c.shell || known != c.known {
			t.Errorf("%q %d %v: %q %v, want %q %v", c.out, c.code, c.err, sh, known, c.shell, c.known)
		}
	}
}
