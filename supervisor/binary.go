package supervisor

import (
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"runtime"
)

// Binary is the supervisor daemon's binary on the host (FindBinary), and,
// once inspected, as a container sandbox gets it (docker binds it
// read-only; nothing of the image changes): the file and, for a
// dynamically linked build (cgo, the default of `go build` where a C
// compiler is), the host's loader and the libraries it needs, which are
// bound beside it and used through the loader, so that it runs in any
// image of its architecture, one without a C library too (busybox). A
// static build (CGO_ENABLED=0, as releases are) needs nothing else.
type Binary struct {
	Path  string // the file on the host
	Where string // how FindBinary found it, for messages: "the sandbox-mcp-supervisor beside the server", ...

	// Inspect's:
	Arch   string   // its architecture, as Docker names it (amd64, arm64, ...)
	Loader string   // the ELF interpreter on the host; "" for a static build
	Libs   []string // the shared libraries on the host, their real files
	Sums   string   // sha256 of the file, the loader and the libraries: a new build is another binary

	server bool // the server itself, which serves `supervise` (the fallback)
}

// BinaryDir is where a container sandbox has the binary: BinaryDir/sandbox-mcp,
// its libraries in BinaryDir/lib, and the supervisor's socket in
// BinaryDir/run.
const BinaryDir = "/.sandbox-mcp"

// InspectBinary is the Binary at p, inspected.
func InspectBinary(p string) (*Binary, error) {
	b := &Binary{Path: p}
	if err := b.Inspect(); err != nil {
		return nil, err
	}
	return b, nil
}

// Inspect reads b's ELF file and finds what it needs to run in a
// container.
func (b *Binary) Inspect() error {
	p := b.Path
	f, err := elf.Open(p)
	if err != nil {
		var fe *elf.FormatError
		if errors.As(err, &fe) {
			return fmt.Errorf("the supervisor binary %s is not a Linux (ELF) build: a container needs one", p)
		}
		return fmt.Errorf("read the supervisor binary: %w", err)
	}
	defer f.Close()
	b.Arch, b.Loader, b.Libs = elfArch(f.Machine), "", nil
	if b.Arch == "" {
		return fmt.Errorf("the supervisor binary is for %v, which no container sandbox runs", f.Machine)
	}
	for _, prog := range f.Progs {
		if prog.Type != elf.PT_INTERP {
			continue
		}
		raw, err := io.ReadAll(io.LimitReader(prog.Open(), 4096))
		if err != nil {
			return fmt.Errorf("read the supervisor binary's loader: %w", err)
		}
		if n := len(raw); n > 0 && raw[n-1] == 0 {
			raw = raw[:n-1]
		}
		if b.Loader, err = filepath.EvalSymlinks(string(raw)); err != nil {
			return fmt.Errorf("the supervisor binary's loader: %w", err)
		}
	}
	if b.Loader != "" && runtime.GOOS != "linux" {
		return fmt.Errorf("the supervisor binary %s is dynamically linked, and its libraries are a Linux host's: use a static build (CGO_ENABLED=0, as releases are)", p)
	}
	if b.Loader != "" {
		seen := map[string]bool{}
		if err := b.addLibs(f, seen); err != nil {
			return err
		}
	}
	h := sha256.New()
	for _, q := range append([]string{b.Path, b.Loader}, b.Libs...) {
		if q == "" {
			continue
		}
		if err := hashFile(h, q); err != nil {
			return fmt.Errorf("read the supervisor binary: %w", err)
		}
	}
	b.Sums = hex.EncodeToString(h.Sum(nil))
	return nil
}

func hashFile(w io.Writer, p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(w, f)
	return err
}

// addLibs adds the libraries f needs, and theirs, found where the loader
// would look first: beside the loader and in the usual directories.
func (b *Binary) addLibs(f *elf.File, seen map[string]bool) error {
	needed, err := f.ImportedLibraries()
	if err != nil {
		return fmt.Errorf("read the supervisor binary's libraries: %w", err)
	}
	dirs := []string{filepath.Dir(b.Loader)}
	if t := tripletOf(b.Arch); t != "" {
		dirs = append(dirs, "/lib/"+t, "/usr/lib/"+t)
	}
	dirs = append(dirs, "/lib64", "/usr/lib64", "/lib", "/usr/lib")
	for _, name := range needed {
		if seen[name] || name != path.Base(name) {
			continue
		}
		seen[name] = true
		var found string
		for _, d := range dirs {
			if real, err := filepath.EvalSymlinks(filepath.Join(d, name)); err == nil {
				found = real
				break
			}
		}
		if found == "" {
			return fmt.Errorf("the supervisor binary needs %s, not found on this host (a static build, CGO_ENABLED=0, needs none)", name)
		}
		if found == b.Loader {
			continue
		}
		b.Libs = append(b.Libs, found)
		lf, err := elf.Open(found)
		if err != nil {
			return fmt.Errorf("read %s: %w", name, err)
		}
		err = b.addLibs(lf, seen)
		lf.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// BinaryMount is one file of the binary bound into a sandbox.
type BinaryMount struct{ Host, Target string }

// Mounts are the files to bind read-only into a container sandbox.
func (b *Binary) Mounts() []BinaryMount {
	ms := []BinaryMount{{b.Path, BinaryDir + "/sandbox-mcp"}}
	if b.Loader != "" {
		ms = append(ms, BinaryMount{b.Loader, BinaryDir + "/lib/" + filepath.Base(b.Loader)})
		for _, l := range b.Libs {
			ms = append(ms, BinaryMount{l, BinaryDir + "/lib/" + libName(l)})
		}
	}
	return ms
}

// libName is the name a library is found by: its file's name, cut after
// ".so.N" (libc.so.6 for libc-2.31.so is what DT_NEEDED says; a file that
// is already named so keeps its name).
func libName(p string) string {
	f, err := elf.Open(p)
	if err == nil {
		defer f.Close()
		if names, err := f.DynString(elf.DT_SONAME); err == nil && len(names) > 0 && names[0] == path.Base(names[0]) {
			return names[0]
		}
	}
	return filepath.Base(p)
}

// Argv runs the binary in the sandbox with args: directly, or through the
// bound loader with the bound libraries.
func (b *Binary) Argv(args ...string) []string {
	exe := BinaryDir + "/sandbox-mcp"
	if b.Loader == "" {
		return append([]string{exe}, args...)
	}
	return append([]string{BinaryDir + "/lib/" + filepath.Base(b.Loader), "--library-path", BinaryDir + "/lib", exe}, args...)
}

// ErrArch: the sandbox's image is of another architecture than the binary.
var ErrArch = errors.New("architecture mismatch")

// CheckArch says when an image of architecture arch cannot run the binary.
func (b *Binary) CheckArch(arch string) error {
	if arch != "" && arch != b.Arch {
		return fmt.Errorf("%w: the image is %s, the supervisor binary (%s) %s", ErrArch, arch, b.Where, b.Arch)
	}
	return nil
}

func elfArch(m elf.Machine) string {
	switch m {
	case elf.EM_X86_64:
		return "amd64"
	case elf.EM_AARCH64:
		return "arm64"
	case elf.EM_386:
		return "386"
	case elf.EM_ARM:
		return "arm"
	case elf.EM_PPC64:
		return "ppc64le"
	case elf.EM_S390:
		return "s390x"
	case elf.EM_RISCV:
		return "riscv64"
	}
	return ""
}

func tripletOf(arch string) string {
	switch arch {
	case "amd64":
		return "x86_64-linux-gnu"
	case "arm64":
		return "aarch64-linux-gnu"
	case "386":
		return "i386-linux-gnu"
	case "arm":
		return "arm-linux-gnueabihf"
	case "ppc64le":
		return "powerpc64le-linux-gnu"
	case "s390x":
		return "s390x-linux-gnu"
	case "riscv64":
		return "riscv64-linux-gnu"
	}
	return ""
}
