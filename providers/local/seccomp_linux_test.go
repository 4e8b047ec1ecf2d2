//go:build unix

package local

import (
	"encoding/binary"
	"testing"

	"golang.org/x/sys/unix"
)

// runFilter runs the classic BPF seccomp filter prog on a system call nr
// of architecture arch and returns its verdict. It knows the instructions
// keyringFilter emits: absolute word loads, jump-if-equal and return.
func runFilter(t *testing.T, prog []byte, arch, nr uint32) uint32 {
	t.Helper()
	var acc uint32
	for pc := 0; ; pc++ {
		if 8*pc+8 > len(prog) {
			t.Fatalf("filter runs off its end")
		}
		in := prog[8*pc : 8*pc+8]
		code, jt, jf, k := binary.NativeEndian.Uint16(in), in[2], in[3], binary.NativeEndian.Uint32(in[4:])
		switch code {
		case bpfLdW:
			switch k {
			case offsetNr:
				acc = nr
			case offsetArch:
				acc = arch
			default:
				t.Fatalf("load of offset %d", k)
			}
		case bpfJeq:
			if acc == k {
				pc += int(jt)
			} else {
				pc += int(jf)
			}
		case bpfRet:
			return k
		default:
			t.Fatalf("instruction %#x", code)
		}
	}
}

// The filter refuses the keyring calls of every architecture a kernel may
// run in the sandbox, whatever GOARCH the server was built for: a 386 or
// arm server on a 64-bit kernel runs 64-bit programs (local review #3).
func TestKeyringFilterEveryArch(t *testing.T) {
	prog := keyringFilter()
	deny := unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
	for _, tc := range []struct {
		name      string
		arch      uint32
		keyring   []uint32
		allowedNr uint32 // an ordinary call (write, or so)
	}{
		{"x86_64", unix.AUDIT_ARCH_X86_64, []uint32{248, 249, 250}, 1},
		{"x32", unix.AUDIT_ARCH_X86_64, []uint32{x32Bit | 248, x32Bit | 249, x32Bit | 250}, x32Bit | 1},
		{"i386", unix.AUDIT_ARCH_I386, []uint32{286, 287, 288}, 4},
		{"aarch64", unix.AUDIT_ARCH_AARCH64, []uint32{217, 218, 219}, 64},
		{"arm", unix.AUDIT_ARCH_ARM, []uint32{309, 310, 311}, 4},
		{"riscv64", unix.AUDIT_ARCH_RISCV64, []uint32{217, 218, 219}, 64},
	} {
		for _, nr := range tc.keyring {
			if got := runFilter(t, prog, tc.arch, nr); got != deny {
				t.Errorf("%s: call %#x gets %#x, want EPERM", tc.name, nr, got)
			}
		}
		if got := runFilter(t, prog, tc.arch, tc.allowedNr); got != unix.SECCOMP_RET_ALLOW {
			t.Errorf("%s: call %d gets %#x, want allowed", tc.name, tc.allowedNr, got)
		}
	}
	// Another architecture's numbers are not refused by mistake: 248 is
	// not a keyring call on aarch64, 217 is not one on x86_64.
	if got := runFilter(t, prog, unix.AUDIT_ARCH_AARCH64, 248); got != unix.SECCOMP_RET_ALLOW {
		t.Errorf("aarch64 call 248 gets %#x", got)
	}
	if got := runFilter(t, prog, unix.AUDIT_ARCH_X86_64, 217); got != unix.SECCOMP_RET_ALLOW {
		t.Errorf("x86_64 call 217 gets %#x", got)
	}
}
