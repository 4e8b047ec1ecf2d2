//go:build unix

package local

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Asked for bash where there is no shell (a container image FROM
// scratch), the provider refuses to start, naming the missing shell and
// the setting that asked for bash — not "start command: no such file or
// directory" at the first call (issue #25 item 1).
func TestNoShellIsAnErrorThatSaysSo(t *testing.T) {
	t.Parallel()
	none := []string{filepath.Join(t.TempDir(), "no-bash"), filepath.Join(t.TempDir(), "no-sh")}
	for _, c := range []struct {
		cfg        Config
		where, why string
	}{
		{Config{AllowHostBash: true, Isolation: IsolationNone}, "on this host", "--allow-host-bash"},
		{Config{Isolation: IsolationContainer}, "in this image", "local.isolation container"},
	} {
		c.cfg.StateDir, c.cfg.shells = t.TempDir(), none
		_, err := New(c.cfg)
		if err == nil || !strings.Contains(err.Error(), "no /bin/sh "+c.where) || !strings.Contains(err.Error(), c.why) {
			t.Errorf("%+v: %v, want an error naming the missing shell and %s", c.cfg.Isolation, err, c.why)
		}
	}
	// Without bash asked for, no shell is no error: the file tools work.
	p, err := New(Config{StateDir: t.TempDir(), Isolation: IsolationNone, shells: none})
	if err != nil {
		t.Fatal(err)
	}
	p.Close()
}

// With isolation container, bash runs without --allow-host-bash: the
// container is the sandbox. Its commands see the virtual paths rewritten,
// as host bash does.
func TestContainerIsolationRunsBash(t *testing.T) {
	t.Parallel()
	p, err := New(Config{StateDir: t.TempDir(), Isolation: IsolationContainer})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	if err := p.BashDisabled(); err != nil {
		t.Fatalf("bash disabled: %v", err)
	}
	if p.Isolation() != IsolationContainer {
		t.Errorf("isolation %q", p.Isolation())
	}
	sb, err := p.Acquire(t.Context(), "t1")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Release("t1")
	out, res, err := execOut(t, sb.(*Sandbox), t.Context(), "echo hi > /mnt/user-data/outputs/x && cat /mnt/user-data/outputs/x", time.Minute)
	if err != nil || res.ExitCode != 0 || out != "hi\n" {
		t.Fatalf("bash: %q %+v %v", out, res, err)
	}
	if err := (&Config{Isolation: "containerd"}).Validate(); err == nil || !strings.Contains(err.Error(), "container") {
		t.Errorf("a bad isolation: %v", err)
	}
}
