package docker

import (
	"archive/tar"
	"bytes"
	"encoding/binary"
)

// keeperPath is where the keep-alive program lives in every container.
const keeperPath = "/.sandbox-mcp-keep-alive"

// keeperCode is the keep-alive program's machine code for each
// architecture the engine may run: a loop around a system call that sleeps
// until a signal comes, which (no handler being installed) ends it. It
// needs nothing from the image — no sleep, no shell, no libc — so that any
// image, whatever its CMD or ENTRYPOINT, makes a container that stays up;
// the engine's init (tini, HostConfig.Init) runs it, reaps orphans and
// passes on the SIGTERM of a stop.
var keeperCode = map[string][]byte{
	// 0: mov eax, 34 (pause); syscall; jmp 0
	"amd64": {0xb8, 0x22, 0x00, 0x00, 0x00, 0x0f, 0x05, 0xeb, 0xf7},
	// 0: mov x8, #73 (ppoll); mov x0..x3, #0 (no fds, no timeout, no mask); svc #0; b 0
	"arm64": words(0xd2800928, 0xd2800000, 0xd2800001, 0xd2800002, 0xd2800003, 0xd4000001, 0x17fffffa),
}

// keeperMachine is the ELF e_machine of each architecture.
var keeperMachine = map[string]uint16{"amd64": 62, "arm64": 183}

func words(ws ...uint32) []byte {
	b := make([]byte, 0, 4*len(ws))
	for _, w := range ws {
		b = binary.LittleEndian.AppendUint32(b, w)
	}
	return b
}

// keeperELF is the keep-alive program for arch (GOARCH names, as the
// engine reports an image's architecture) as a static ELF executable: one
// header, two program headers — one loadable segment (the whole file, read
// and execute) and PT_GNU_STACK (read-write: the stack is not executable,
// whatever a kernel's default for a program that does not say) — and the
// code. nil for an architecture it has no code for.
func keeperELF(arch string) []byte {
	code, ok := keeperCode[arch]
	if !ok {
		return nil
	}
	const base, ehsize, phsize, phnum = 0x400000, 64, 56, 2
	size := uint64(ehsize + phnum*phsize + len(code))
	var b bytes.Buffer
	le := binary.LittleEndian
	b.Write([]byte{0x7f, 'E', 'L', 'F', 2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0}) // 64-bit, little-endian, version 1, System V
	binary.Write(&b, le, struct {
		Type, Machine                                        uint16
		Version                                              uint32
		Entry, PhOff, ShOff                                  uint64
		Flags                                                uint32
		EhSize, PhEntSize, PhNum, ShEntSize, ShNum, ShStrNdx uint16
	}{2, keeperMachine[arch], 1, base + ehsize + phnum*phsize, ehsize, 0, 0, ehsize, phsize, phnum, 0, 0, 0})
	type progHeader struct {
		Type, Flags                                uint32
		Offset, VAddr, PAddr, FileSz, MemSz, Align uint64
	}
	binary.Write(&b, le, progHeader{1, 5, 0, base, base, size, size, 0x1000}) // PT_LOAD, R+X, the whole file
	binary.Write(&b, le, progHeader{0x6474e551, 6, 0, 0, 0, 0, 0, 16})        // PT_GNU_STACK, R+W
	b.Write(code)
	return b.Bytes()
}

// keeperArchive is a tar holding the keep-alive program at keeperPath,
// root's and executable by all, for CopyToContainer at "/".
func keeperArchive(elf []byte) *bytes.Buffer {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	tw.WriteHeader(&tar.Header{Name: keeperPath[1:], Mode: 0o555, Size: int64(len(elf)), Typeflag: tar.TypeReg})
	tw.Write(elf)
	tw.Close()
	return &b
}
