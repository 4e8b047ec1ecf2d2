//go:build linux || darwin || freebsd

package checkpoint

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"testing/iotest"
	"time"
)

// tarTree is a tree with what a checkpoint keeps: modes (also setgid and
// sticky directories), symlinks (some pointing out), empty directories,
// a binary file, a large one, an executable, a FIFO (skipped).
func tarTree(t *testing.T, root string) {
	t.Helper()
	big := bytes.Repeat([]byte("0123456789abcdef"), (smallFile*3)/16+7) // over smallFile
	bin := []byte{0, 1, 2, 0xff, 0xfe, '\n', 0}
	build(t, root, map[string]node{
		"workspace/a.txt":           file(0o644, "hello\n"),
		"workspace/run.sh":          file(0o755, "#!/bin/sh\necho hi\n"),
		"workspace/secret":          file(0o600, "s"),
		"workspace/empty":           dir(0o755),
		"workspace/locked":          dir(0o500),
		"workspace/shared":          dir(0o1777),
		"workspace/group":           dir(0o2775),
		"workspace/deep/a/b/c/d/e":  file(0o644, "deep"),
		"workspace/link-in":         link("a.txt"),
		"workspace/link-out":        link("/etc/passwd"),
		"workspace/link-up":         link("../../../outside"),
		"workspace/link-dangling":   link("nowhere/at/all"),
		"workspace/dir with spaces": dir(0o755),
		"uploads/bin.dat":           file(0o644, string(bin)),
		"uploads/big.dat":           file(0o640, string(big)),
		"outputs/report.md":         file(0o644, "# r\n"),
	})
	mkfifo(t, filepath.Join(root, "workspace", "fifo"))
	// Sub-second mtimes, kept to the nanosecond.
	mt := time.Unix(1700000000, 123456789)
	must(t, os.Chtimes(filepath.Join(root, "workspace", "a.txt"), mt, mt))
	must(t, os.Chtimes(filepath.Join(root, "workspace", "empty"), mt, mt))
}

// freshRoot is a new thread's user-data: three empty directories.
func freshRoot(t *testing.T) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), "user-data")
	for _, d := range []string{"workspace", "uploads", "outputs"} {
		must(t, os.MkdirAll(filepath.Join(root, d), 0o755))
	}
	return root
}

func TestExportImportTarRoundTrip(t *testing.T) {
	t.Parallel()
	src := filepath.Join(t.TempDir(), "user-data")
	tarTree(t, src)
	a := openStore(t, t.TempDir(), Options{NoSync: true})
	res := save(t, a, src, "source")
	want := snapshot(t, src)
	delete(want, "workspace/fifo") // skipped: not in the stream

	var buf bytes.Buffer
	must(t, a.ExportTar(t.Context(), res.Info.ID, &buf))

	// The stream itself: relative names, directories with "/", symlinks
	// as links, no FIFO, the trailer.
	names := map[string]*tar.Header{}
	tr := tar.NewReader(bytes.NewReader(buf.Bytes()))
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		must(t, err)
		if strings.HasPrefix(hdr.Name, "/") || strings.Contains(hdr.Name, "..") {
			t.Errorf("entry %q is not a plain relative name", hdr.Name)
		}
		names[hdr.Name] = hdr
	}
	if h := names["workspace/link-out"]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != "/etc/passwd" {
		t.Errorf("link-out in the stream: %+v", h)
	}
	if h := names["workspace/empty/"]; h == nil || h.Typeflag != tar.TypeDir {
		t.Errorf("the empty directory in the stream: %+v", h)
	}
	if h := names["workspace/fifo"]; h != nil {
		t.Errorf("the skipped FIFO is in the stream: %+v", h)
	}
	if h := names["workspace/a.txt"]; h == nil || h.ModTime.UnixNano() != 1700000000123456789 {
		t.Errorf("a.txt's mtime in the stream: %+v", h)
	}

	b := openStore(t, t.TempDir(), Options{NoSync: true})
	dst := freshRoot(t)
	info, err := b.ImportTar(t.Context(), dst, bytes.NewReader(buf.Bytes()), "forked")
	must(t, err)
	if info.ID != "1" || info.Message != "forked" || info.Files != res.Info.Files || info.Size != res.Info.Size {
		t.Errorf("imported checkpoint %+v; the source's was %+v", info, res.Info)
	}
	sameSnap(t, "imported", want, snapshot(t, dst))
	checkObjects(t, b.dir)

	// The imported checkpoint is a checkpoint like any: restorable, and
	// the next save of the same tree finds nothing changed.
	if r := save(t, b, dst, "again"); r.Saved {
		t.Errorf("a save right after the import saved %+v", r.Info)
	}
	must(t, os.RemoveAll(filepath.Join(dst, "workspace")))
	restore(t, b, dst, info.ID)
	sameSnap(t, "restored after rm -rf", want, snapshot(t, dst))

	// Exported again from the new store: the same stream.
	var again bytes.Buffer
	must(t, b.ExportTar(t.Context(), info.ID, &again))
	if !bytes.Equal(again.Bytes(), buf.Bytes()) {
		t.Errorf("the stream exported from the import differs (%d vs %d bytes)", again.Len(), buf.Len())
	}
}

func TestExportTarCorruptStore(t *testing.T) {
	t.Parallel()
	src := filepath.Join(t.TempDir(), "user-data")
	build(t, src, map[string]node{"workspace/f": file(0o644, "original content")})
	dir := t.TempDir()
	a := openStore(t, dir, Options{NoSync: true})
	save(t, a, src, "one")
	// Damage the file's object (same length, other bytes).
	e, err := a.Stat(t.Context(), "1", "workspace/f")
	must(t, err)
	var h hash
	copy(h[:], mustHex(t, e.Hash))
	overwrite(t, a, h, []byte("tampered content"))
	err = a.ExportTar(t.Context(), "1", io.Discard)
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("ExportTar of a tampered store: %v, want ErrCorrupt", err)
	}
	if err := a.ExportTar(t.Context(), "7", io.Discard); !errors.Is(err, ErrNotFound) {
		t.Errorf("ExportTar of no checkpoint: %v", err)
	}
}

// rawEntry is one entry of a hand-made stream.
type rawEntry struct {
	hdr  tar.Header
	data string
}

func makeTar(t *testing.T, ents []rawEntry, trailer bool) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range ents {
		h := e.hdr
		if h.Typeflag == tar.TypeReg && h.Size == 0 {
			h.Size = int64(len(e.data))
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		must(t, tw.WriteHeader(&h))
		if e.data != "" {
			if _, err := tw.Write([]byte(e.data)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if trailer {
		must(t, tw.Close())
	} else {
		must(t, tw.Flush())
	}
	return buf.Bytes()
}

func reg(name, data string) rawEntry {
	return rawEntry{tar.Header{Name: name, Typeflag: tar.TypeReg}, data}
}

// Hostile streams never write outside the root — nor inside it: each is
// refused before anything is restored, and leaves no checkpoint.
func TestImportTarHostile(t *testing.T) {
	t.Parallel()
	deep := strings.Repeat("d/", importMaxDepth) + "f"
	cases := []struct {
		name string
		tar  func(t *testing.T) []byte
	}{
		{"dotdot", func(t *testing.T) []byte { return makeTar(t, []rawEntry{reg("../escaped", "x")}, true) }},
		{"dotdot inside", func(t *testing.T) []byte {
			return makeTar(t, []rawEntry{reg("workspace/../../escaped", "x")}, true)
		}},
		{"dot slash dotdot", func(t *testing.T) []byte { return makeTar(t, []rawEntry{reg("./../escaped", "x")}, true) }},
		{"absolute", func(t *testing.T) []byte { return makeTar(t, []rawEntry{reg("/escaped", "x")}, true) }},
		{"dot component", func(t *testing.T) []byte { return makeTar(t, []rawEntry{reg("workspace/./x", "x")}, true) }},
		{"double slash", func(t *testing.T) []byte { return makeTar(t, []rawEntry{reg("workspace//x", "x")}, true) }},
		{"through a symlink", func(t *testing.T) []byte {
			return makeTar(t, []rawEntry{
				{tar.Header{Name: "workspace/out", Typeflag: tar.TypeSymlink, Linkname: "../../outside"}, ""},
				reg("workspace/out/escaped", "x"),
			}, true)
		}},
		{"through a file", func(t *testing.T) []byte {
			return makeTar(t, []rawEntry{reg("workspace/f", "x"), reg("workspace/f/g", "y")}, true)
		}},
		{"file where a dir was", func(t *testing.T) []byte {
			return makeTar(t, []rawEntry{reg("workspace/d/f", "x"), reg("workspace/d", "y")}, true)
		}},
		{"dir where a file was", func(t *testing.T) []byte {
			return makeTar(t, []rawEntry{reg("workspace/d", "y"), {tar.Header{Name: "workspace/d/", Typeflag: tar.TypeDir, Mode: 0o755}, ""}}, true)
		}},
		{"duplicate", func(t *testing.T) []byte {
			return makeTar(t, []rawEntry{reg("workspace/f", "x"), reg("workspace/f", "y")}, true)
		}},
		{"duplicate dir", func(t *testing.T) []byte {
			d := rawEntry{tar.Header{Name: "workspace/d/", Typeflag: tar.TypeDir, Mode: 0o755}, ""}
			return makeTar(t, []rawEntry{d, d}, true)
		}},
		{"hard link", func(t *testing.T) []byte {
			return makeTar(t, []rawEntry{{tar.Header{Name: "workspace/h", Typeflag: tar.TypeLink, Linkname: "/etc/passwd"}, ""}}, true)
		}},
		{"device", func(t *testing.T) []byte {
			return makeTar(t, []rawEntry{{tar.Header{Name: "workspace/null", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 3}, ""}}, true)
		}},
		{"fifo", func(t *testing.T) []byte {
			return makeTar(t, []rawEntry{{tar.Header{Name: "workspace/p", Typeflag: tar.TypeFifo}, ""}}, true)
		}},
		{"root as a file", func(t *testing.T) []byte { return makeTar(t, []rawEntry{reg(".", "x")}, true) }},
		{"empty symlink", func(t *testing.T) []byte {
			return makeTar(t, []rawEntry{{tar.Header{Name: "workspace/l", Typeflag: tar.TypeSymlink}, ""}}, true)
		}},
		{"too deep", func(t *testing.T) []byte { return makeTar(t, []rawEntry{reg(deep, "x")}, true) }},
		{"no trailer", func(t *testing.T) []byte {
			return makeTar(t, []rawEntry{reg("workspace/a", "x"), reg("workspace/b", "y")}, false)
		}},
		{"half a trailer", func(t *testing.T) []byte {
			b := makeTar(t, []rawEntry{reg("workspace/a", "x")}, false)
			return append(b, make([]byte, 512)...)
		}},
		{"cut in a file", func(t *testing.T) []byte {
			b := makeTar(t, []rawEntry{reg("workspace/a", strings.Repeat("x", 2000))}, true)
			return b[:512+1000]
		}},
		{"cut in a header", func(t *testing.T) []byte {
			b := makeTar(t, []rawEntry{reg("workspace/a", "x")}, true)
			return b[:300]
		}},
		{"huge pax header", func(t *testing.T) []byte {
			// A PAX header of 2 MiB (archive/tar's writer refuses to make
			// one: made as a file, then its type byte changed).
			rec := "30 comment=" + strings.Repeat("x", 2<<20) + "\n"
			b := makeTar(t, []rawEntry{reg("PaxHeaders/p", rec), reg("workspace/p", "x")}, true)
			b[156] = tar.TypeXHeader
			setChecksum(b[:512])
			return b
		}},
		{"data after the trailer", func(t *testing.T) []byte {
			b := makeTar(t, []rawEntry{reg("workspace/a", "x")}, true)
			return append(b, "more"...)
		}},
		{"garbage", func(t *testing.T) []byte { return bytes.Repeat([]byte("not a tar "), 200) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			base := t.TempDir()
			outside := filepath.Join(base, "outside")
			must(t, os.MkdirAll(outside, 0o755))
			root := filepath.Join(base, "a", "b", "user-data")
			for _, d := range []string{"workspace", "uploads", "outputs"} {
				must(t, os.MkdirAll(filepath.Join(root, d), 0o755))
			}
			before := snapshot(t, base)
			s := openStore(t, filepath.Join(t.TempDir(), "store"), Options{NoSync: true})
			info, err := s.ImportTar(t.Context(), root, bytes.NewReader(tc.tar(t)), "hostile")
			if err == nil {
				t.Fatalf("ImportTar took a hostile stream: %+v", info)
			}
			t.Log(err)
			if strings.Contains(err.Error(), base) || strings.Contains(err.Error(), "\n") {
				t.Errorf("the error names a host path or spans lines: %q", err)
			}
			sameSnap(t, "after a refused import", before, snapshot(t, base))
			if l, _ := s.List(t.Context()); len(l) != 0 {
				t.Errorf("a refused import left checkpoints: %+v", l)
			}
		})
	}
}

// Entries a stream may hold that are not kept: setuid bits, owners,
// excluded paths, the writers' temporary files; implied directories.
func TestImportTarNormalises(t *testing.T) {
	t.Parallel()
	stream := makeTar(t, []rawEntry{
		{tar.Header{Name: "./", Typeflag: tar.TypeDir, Mode: 0o700}, ""},
		{tar.Header{Name: "workspace/suid", Typeflag: tar.TypeReg, Mode: 0o4755, Uid: 0, Gid: 0}, "x"},
		{tar.Header{Name: "workspace/sgid", Typeflag: tar.TypeReg, Mode: 0o2755, Uid: 4242, Gid: 4242}, "y"},
		{tar.Header{Name: "workspace/sgid-dir/", Typeflag: tar.TypeDir, Mode: 0o2775}, ""},
		reg("workspace/implied/a/b", "z"),
		{tar.Header{Name: "workspace/implied/", Typeflag: tar.TypeDir, Mode: 0o700}, ""}, // listed after its contents
		reg("outputs/.tool-results/big.txt", "excluded"),
		reg("workspace/.sandbox-mcp-0123456789abcdef.tmp", "a temp file"),
		{tar.Header{Name: "workspace/.sandbox-mcp-fedcba9876543210.tmp/", Typeflag: tar.TypeDir, Mode: 0o755}, ""}, // user data: only a regular file is a temp
	}, true)
	s := openStore(t, t.TempDir(), Options{NoSync: true, Exclude: []string{"outputs/.tool-results"}})
	root := freshRoot(t)
	if os.Geteuid() == 0 {
		must(t, os.Chown(root, 1234, 2345))
	}
	_, err := s.ImportTar(t.Context(), root, bytes.NewReader(stream), "n")
	must(t, err)
	got := snapshot(t, root)
	for p, mode := range map[string]fs.FileMode{
		"workspace/suid":                              0o755,
		"workspace/sgid":                              0o755,
		"workspace/sgid-dir":                          0o775 | fs.ModeSetgid,
		"workspace/implied":                           0o700,
		"workspace/implied/a":                         0o755,
		"workspace/implied/a/b":                       0o644,
		"workspace/.sandbox-mcp-fedcba9876543210.tmp": 0o755,
	} {
		if got[p].mode != mode {
			t.Errorf("%s: mode %v, want %v", p, got[p].mode, mode)
		}
	}
	if e := got["workspace/.sandbox-mcp-fedcba9876543210.tmp"]; e.typ != "dir" {
		t.Errorf("a directory named like a writer's temporary file was imported as %q, want a directory", e.typ)
	}
	for _, p := range []string{"outputs/.tool-results", "outputs/.tool-results/big.txt", "workspace/.sandbox-mcp-0123456789abcdef.tmp"} {
		if _, ok := got[p]; ok {
			t.Errorf("%s was imported", p)
		}
	}
	if os.Geteuid() == 0 {
		for _, p := range []string{"workspace/suid", "workspace/sgid", "workspace/implied/a"} {
			st, err := os.Lstat(filepath.Join(root, p))
			must(t, err)
			if sys := st.Sys().(*syscall.Stat_t); sys.Uid != 1234 || sys.Gid != 2345 {
				t.Errorf("%s: owned by %d:%d, want the root's 1234:2345", p, sys.Uid, sys.Gid)
			}
		}
	}
}

func TestImportTarNotEmpty(t *testing.T) {
	t.Parallel()
	stream := makeTar(t, []rawEntry{reg("workspace/a", "x")}, true)
	s := openStore(t, t.TempDir(), Options{NoSync: true})
	root := freshRoot(t)
	must(t, os.WriteFile(filepath.Join(root, "uploads", "there"), []byte("mine"), 0o644))
	if _, err := s.ImportTar(t.Context(), root, bytes.NewReader(stream), "n"); !errors.Is(err, ErrNotEmpty) {
		t.Fatalf("ImportTar into a root with a file: %v, want ErrNotEmpty", err)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "uploads", "there")); string(b) != "mine" {
		t.Errorf("the file there is now %q", b)
	}
	// A reader that fails at its end (after the trailer) fails the import.
	root3 := freshRoot(t)
	failing := io.MultiReader(bytes.NewReader(stream), iotest.ErrReader(errors.New("transfer found short")))
	if _, err := s.ImportTar(t.Context(), root3, failing, "n"); err == nil || !strings.Contains(err.Error(), "transfer found short") {
		t.Errorf("ImportTar of a reader failing after the trailer: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root3, "workspace", "a")); err == nil {
		t.Errorf("a failed import restored files")
	}
	// GNU tar's padding (zeros to a 10 KiB record) is taken.
	padded := append(append([]byte(nil), stream...), make([]byte, 8192)...)
	if _, err := s.ImportTar(t.Context(), freshRoot(t), bytes.NewReader(padded), "padded"); err != nil {
		t.Errorf("ImportTar of a padded stream: %v", err)
	}
	// An empty stream into an empty root: a checkpoint of nothing.
	empty := makeTar(t, nil, true)
	root2 := filepath.Join(t.TempDir(), "ud")
	must(t, os.Mkdir(root2, 0o755))
	info, err := s.ImportTar(t.Context(), root2, bytes.NewReader(empty), "nothing")
	must(t, err)
	if info.Files != 0 || info.ID != "2" {
		t.Errorf("empty import: %+v", info)
	}
}

// setChecksum recomputes a tar header block's checksum.
func setChecksum(blk []byte) {
	copy(blk[148:156], "        ")
	var sum int64
	for _, c := range blk {
		sum += int64(c)
	}
	copy(blk[148:156], fmt.Sprintf("%06o\x00 ", sum))
}

// BenchmarkFork: a checkpoint of the benchmarks' workspace (10 000 small
// files) streamed out and into a new thread (ExportTar | ImportTar, as a
// fork between two Pods does, without the channel), beside its peer, GNU
// tar (tar -c | tar -x of the same tree), run side by side: the ratio is
// what counts.
func BenchmarkFork(b *testing.B) {
	src := b.TempDir()
	workspace(b, src, benchFiles)
	b.Run("checkpoint-tar", func(b *testing.B) {
		s := openStore(b, b.TempDir(), Options{NoSync: true})
		id := save(b, s, src, "src").Info.ID
		defer cpuPerOp(b)()
		for b.Loop() {
			d := openStore(b, b.TempDir(), Options{NoSync: true})
			root := b.TempDir()
			pr, pw := io.Pipe()
			go func() { pw.CloseWithError(s.ExportTar(b.Context(), id, pw)) }()
			if _, err := d.ImportTar(b.Context(), root, pr, "fork"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("gnu-tar", func(b *testing.B) {
		if _, err := exec.LookPath("tar"); err != nil {
			b.Skip("no tar")
		}
		defer cpuPerOp(b)()
		for b.Loop() {
			root := b.TempDir()
			cmd := exec.Command("sh", "-c", `tar -C "$1" -cf - . | tar -C "$2" -xf -`, "sh", src, root)
			if out, err := cmd.CombinedOutput(); err != nil {
				b.Fatalf("%v: %s", err, out)
			}
		}
	})
}

// cpuPerOp reports the CPU time (user and system, of this process and the
// children it waited for) per iteration, when the returned function is
// called: steadier than wall time on a shared machine.
func cpuPerOp(b *testing.B) func() {
	cpu := func() time.Duration {
		var self, kids syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &self)
		syscall.Getrusage(syscall.RUSAGE_CHILDREN, &kids)
		var t time.Duration
		for _, r := range []syscall.Rusage{self, kids} {
			t += time.Duration(r.Utime.Nano() + r.Stime.Nano())
		}
		return t
	}
	start := cpu()
	return func() { b.ReportMetric(float64(cpu()-start)/float64(b.N), "cpu-ns/op") }
}
