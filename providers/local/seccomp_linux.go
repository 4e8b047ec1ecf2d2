package local

import (
	"encoding/binary"

	"golang.org/x/sys/unix"
)

// The kernel keyrings are not namespaced by bubblewrap: as root, every
// thread's commands are nobody in the host's user namespace and share
// nobody's user and user-session keyrings (one thread's keys readable by
// the next); unprivileged, a command inherits the server's session
// keyring, and possession is enough to read its keys. A new session
// keyring per command would leave the per-uid ones shared, and a uid per
// thread the inherited one. So the sandbox has no keyrings at all: its
// seccomp filter answers add_key, request_key and keyctl with EPERM, as
// Docker's default profile does — a dev sandbox needs none of them.

// keyringSyscalls are the numbers of add_key, request_key and keyctl for
// an audit architecture.
type keyringSyscalls struct {
	arch uint32
	nrs  []uint32
}

// x32 system calls are the x86-64 numbers with this bit set.
const x32Bit = 0x40000000

// keyringFilterArches lists every architecture the filter knows, whatever
// GOARCH the server was built for: a 386 or arm build on a 64-bit kernel
// runs 64-bit programs in the sandbox, and a 64-bit kernel runs 32-bit
// (and x32) ones. A block for an architecture the kernel does not run is
// never entered: the filter compares the call's architecture first.
func keyringFilterArches() []keyringSyscalls {
	return []keyringSyscalls{
		{unix.AUDIT_ARCH_X86_64, []uint32{248, 249, 250, x32Bit | 248, x32Bit | 249, x32Bit | 250}},
		{unix.AUDIT_ARCH_I386, []uint32{286, 287, 288}},
		{unix.AUDIT_ARCH_AARCH64, []uint32{217, 218, 219}},
		{unix.AUDIT_ARCH_ARM, []uint32{309, 310, 311}},
		{unix.AUDIT_ARCH_RISCV64, []uint32{217, 218, 219}},
	}
}

// Classic BPF opcodes and the offsets of struct seccomp_data's fields.
const (
	bpfLdW     = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
	bpfJeq     = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
	bpfRet     = unix.BPF_RET | unix.BPF_K
	offsetNr   = 0
	offsetArch = 4
)

// keyringFilter is the compiled filter bwrap loads with --seccomp: the
// keyring calls of every architecture above fail with EPERM, every other
// call is allowed. The wire form is an array of struct sock_filter
// (u16 code, u8 jt, u8 jf, u32 k), in the machine's byte order.
func keyringFilter() []byte {
	type insn struct {
		code   uint16
		jt, jf uint8
		k      uint32
		deny   bool // a jump whose true branch is the final EPERM
	}
	var prog []insn
	for _, a := range keyringFilterArches() {
		// Not this architecture: skip its block (load, compares, allow).
		prog = append(prog,
			insn{code: bpfLdW, k: offsetArch},
			insn{code: bpfJeq, k: a.arch, jf: uint8(len(a.nrs) + 2)})
		prog = append(prog, insn{code: bpfLdW, k: offsetNr})
		for _, nr := range a.nrs {
			prog = append(prog, insn{code: bpfJeq, k: nr, deny: true})
		}
		prog = append(prog, insn{code: bpfRet, k: unix.SECCOMP_RET_ALLOW})
	}
	prog = append(prog, insn{code: bpfRet, k: unix.SECCOMP_RET_ALLOW}) // an architecture not listed
	denyAt := len(prog)
	prog = append(prog, insn{code: bpfRet, k: unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)})

	out := make([]byte, 0, 8*len(prog))
	for i, in := range prog {
		if in.deny {
			in.jt = uint8(denyAt - i - 1)
		}
		out = binary.NativeEndian.AppendUint16(out, in.code)
		out = append(out, in.jt, in.jf)
		out = binary.NativeEndian.AppendUint32(out, in.k)
	}
	return out
}
