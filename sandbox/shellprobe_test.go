package sandbox

import (
	"errors"
	"testing"
)

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
