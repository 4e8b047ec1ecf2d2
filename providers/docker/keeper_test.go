package docker

import (
	"bytes"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// Each keep-alive program runs, stays up, and ends on SIGTERM: natively
// for this machine's architecture, through qemu-user for the other one
// where it is installed.
func TestKeeperRunsUntilTerm(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" {
		t.Skip("SKIPPED: Linux executables")
	}
	for arch := range keeperCode {
		var argv []string
		path := filepath.Join(t.TempDir(), "keep-"+arch)
		if err := os.WriteFile(path, keeperELF(arch), 0o755); err != nil {
			t.Fatal(err)
		}
		switch emu := map[string]string{"amd64": "qemu-x86_64-static", "arm64": "qemu-aarch64-static"}[arch]; {
		case arch == runtime.GOARCH:
			argv = []string{path}
		default:
			if _, err := exec.LookPath(emu); err != nil {
				t.Logf("SKIPPED %s: no %s", arch, emu)
				continue
			}
			argv = []string{emu, path}
		}
		cmd := exec.Command(argv[0], argv[1:]...)
		if err := cmd.Start(); err != nil {
			t.Fatalf("%s: %v", arch, err)
		}
		ended := make(chan error, 1)
		go func() { ended <- cmd.Wait() }()
		select {
		case err := <-ended:
			t.Fatalf("%s: ended by itself: %v", arch, err)
		case <-time.After(500 * time.Millisecond):
		}
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-ended:
			ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
			if err == nil || !ws.Signaled() || ws.Signal() != syscall.SIGTERM {
				t.Errorf("%s: after SIGTERM: %v", arch, err)
			}
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			t.Fatalf("%s: still running 30 s after SIGTERM", arch)
		}
	}
}

// Each keep-alive program says its stack is not executable (PT_GNU_STACK,
// read-write), so that no kernel defaulting to an executable stack for a
// program that says nothing gives it one; its code is still read+execute.
func TestKeeperStackNotExecutable(t *testing.T) {
	for arch := range keeperCode {
		f, err := elf.NewFile(bytes.NewReader(keeperELF(arch)))
		if err != nil {
			t.Fatalf("%s: %v", arch, err)
		}
		var stack, load bool
		for _, p := range f.Progs {
			switch p.Type {
			case elf.PT_GNU_STACK:
				stack = true
				if p.Flags != elf.PF_R|elf.PF_W {
					t.Errorf("%s: PT_GNU_STACK flags %v, want R+W", arch, p.Flags)
				}
			case elf.PT_LOAD:
				load = true
				if p.Flags != elf.PF_R|elf.PF_X || f.Entry < p.Vaddr || f.Entry >= p.Vaddr+p.Memsz {
					t.Errorf("%s: PT_LOAD %+v, entry %#x", arch, p.ProgHeader, f.Entry)
				}
			}
		}
		if !stack || !load {
			t.Errorf("%s: PT_GNU_STACK %v, PT_LOAD %v", arch, stack, load)
		}
	}
}
