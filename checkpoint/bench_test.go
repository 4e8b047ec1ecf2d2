//go:build linux || darwin || freebsd

package checkpoint

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// benchFiles is the size of the benchmarks' workspace: 10 000 source-like
// files of 100 to 1000 bytes (about 5.5 MB) in about 1 100 directories.
const benchFiles = 10_000

// benchStore makes the workspace and a store holding it, settled: a
// second save after racyWindow, so that the stat cache trusts every file
// as it does for a tree an agent is working in.
func benchStore(b *testing.B, opts Options) (s *Store, root string, files []string) {
	b.Helper()
	root = b.TempDir()
	files = workspace(b, root, benchFiles)
	s = openStore(b, b.TempDir(), opts)
	save(b, s, root, "base")
	time.Sleep(time.Duration(racyWindow) + 100*time.Millisecond)
	save(b, s, root, "settled")
	return s, root, files
}

// meter measures what the timed part of a benchmark costs besides wall
// time, which a busy machine stretches: the process's CPU time (user and
// system, every goroutine's), and the files it made in the store.
type meter struct {
	dir   string
	cpu   time.Duration
	files int
	t0    time.Duration
	f0    int
}

func cpuTime() time.Duration {
	var ru unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// storeFiles counts the files of the store at dir: checkpoints, objects,
// packs (what a save must create, fsync and rename).
func storeFiles(dir string) int {
	n := 0
	filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			n++
		}
		return nil
	})
	return n
}

// start and stop read the CPU time nearest the timed part (the count of
// files takes time of its own).
func (m *meter) start() {
	m.f0 = storeFiles(m.dir)
	m.t0 = cpuTime()
}

func (m *meter) stop() {
	m.cpu += cpuTime() - m.t0
	m.files += storeFiles(m.dir) - m.f0
}

func (m *meter) report(b *testing.B) {
	b.ReportMetric(float64(m.cpu.Microseconds())/1000/float64(b.N), "cpu-ms/op")
	b.ReportMetric(float64(m.files)/float64(b.N), "newfiles/op")
}

// change rewrites n of the files (same size class, new content).
func change(b testing.TB, files []string, n, round int) {
	b.Helper()
	for i := range n {
		f := files[(round*n+i)*7919%len(files)]
		must(b, os.WriteFile(f, fmt.Appendf(nil, "// round %d file %d\npackage x\n", round, i), 0o644))
	}
}

// BenchmarkSave: the cost an automatic checkpoint adds to a call.
func BenchmarkSave(b *testing.B) {
	for _, sync := range []bool{true, false} {
		name := map[bool]string{true: "fsync", false: "nosync"}[sync]
		b.Run("unchanged/"+name, func(b *testing.B) {
			s, root, _ := benchStore(b, Options{NoSync: !sync})
			m := &meter{dir: s.dir}
			m.start()
			for b.Loop() {
				if r := save(b, s, root, "x"); r.Saved {
					b.Fatal("saved with nothing changed")
				}
			}
			m.stop()
			m.report(b)
			b.ReportMetric(float64(s.reads), "reads/op")
		})
		// As an agent works: ten files changed, then the save; the next
		// change comes after racyWindow (untimed), so only the changed
		// files are read.
		b.Run("10changed/"+name, func(b *testing.B) {
			s, root, files := benchStore(b, Options{NoSync: !sync})
			m := &meter{dir: s.dir}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				time.Sleep(time.Duration(racyWindow) + 50*time.Millisecond)
				change(b, files, 10, i)
				m.start()
				b.StartTimer()
				if r := save(b, s, root, "x"); !r.Saved || r.Info.Modified != 10 {
					b.Fatalf("save: %+v", r.Info)
				}
				b.StopTimer()
				m.stop()
			}
			m.report(b)
			b.ReportMetric(float64(s.reads), "reads/op")
		})
	}
	// Saves back to back: files changed in the last second are racy
	// (their stat may not show a change made in the same clock tick) and
	// are read again by every save.
	b.Run("10changed/backtoback", func(b *testing.B) {
		s, root, files := benchStore(b, Options{})
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			change(b, files, 10, i)
			b.StartTimer()
			if r := save(b, s, root, "x"); !r.Saved || r.Info.Modified != 10 {
				b.Fatalf("save: %+v", r.Info)
			}
		}
		b.ReportMetric(float64(s.reads), "reads/op")
	})
	// The first save of a process: the stat cache comes from the store.
	b.Run("unchanged/reopened", func(b *testing.B) {
		s, root, _ := benchStore(b, Options{})
		for b.Loop() {
			s2, err := Open(s.dir, Options{})
			must(b, err)
			if r := save(b, s2, root, "x"); r.Saved {
				b.Fatal("saved with nothing changed")
			}
			s2.Close()
		}
	})
	// The first checkpoint of a thread: every file read and stored.
	b.Run("first", func(b *testing.B) {
		root := b.TempDir()
		workspace(b, root, benchFiles)
		for b.Loop() {
			b.StopTimer()
			s := openStore(b, b.TempDir(), Options{})
			b.StartTimer()
			save(b, s, root, "first")
		}
	})
}

// BenchmarkRestore: undoing 10 changed files, and writing back the whole
// workspace after it was deleted.
func BenchmarkRestore(b *testing.B) {
	b.Run("10changed", func(b *testing.B) {
		s, root, files := benchStore(b, Options{})
		m := &meter{dir: s.dir}
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			change(b, files, 10, i)
			m.start()
			b.StartTimer()
			res := restore(b, s, root, "1")
			if len(res.Changes) != 10 {
				b.Fatalf("restore changed %d paths, want 10", len(res.Changes))
			}
			b.StopTimer()
			m.stop()
		}
		m.report(b)
	})
	b.Run("all", func(b *testing.B) {
		s, root, _ := benchStore(b, Options{})
		m := &meter{dir: s.dir}
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			must(b, os.RemoveAll(filepath.Join(root, "workspace")))
			m.start()
			b.StartTimer()
			restore(b, s, root, "1")
			b.StopTimer()
			m.stop()
		}
		m.report(b)
		if _, err := os.Stat(filepath.Join(root, "workspace/src/pkg00/file00000.go")); err != nil {
			b.Fatal(err)
		}
	})
}

// BenchmarkTreeCodec: encoding and decoding every tree of the workspace
// (the manifest's cost, which a save pays only for changed directories).
func BenchmarkTreeCodec(b *testing.B) {
	s, _, _ := benchStore(b, Options{NoSync: true})
	var trees []*tree
	s.treeMu.Lock()
	for _, t := range s.trees {
		trees = append(trees, t)
	}
	s.treeMu.Unlock()
	var n int64
	for _, t := range trees {
		n += int64(len(t.encoded()))
	}
	b.SetBytes(n)
	b.Run("encode", func(b *testing.B) {
		for b.Loop() {
			for _, t := range trees {
				encodeTree(t.entries)
			}
		}
	})
	b.Run("decode", func(b *testing.B) {
		enc := make([][]byte, len(trees))
		for i, t := range trees {
			enc[i] = t.encoded()
		}
		for b.Loop() {
			for _, e := range enc {
				if _, err := decodeTree(e); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.ReportMetric(float64(len(trees)), "trees")
}

// BenchmarkFloor measures, on the same machine and moment, what the
// operations above cannot do with less: one fstatat per entry and one open
// per directory (a save where nothing changed does this on every
// processor, plus its bookkeeping), and creating and writing the
// workspace's files one by one (what a restore of a deleted workspace
// must do, plus renames, modes and times).
func BenchmarkFloor(b *testing.B) {
	b.Run("statwalk", func(b *testing.B) {
		root := b.TempDir()
		workspace(b, root, benchFiles)
		for b.Loop() {
			fd, err := openDir(unix.AT_FDCWD, root, false)
			must(b, err)
			var walk func(fd int)
			walk = func(fd int) {
				names, err := readNames(fd)
				must(b, err)
				for _, n := range names {
					var st unix.Stat_t
					must(b, fstatat(fd, n, &st))
					if st.Mode&unix.S_IFMT == unix.S_IFDIR {
						c, err := openDir(fd, n, true)
						must(b, err)
						walk(c)
					}
				}
				unix.Close(fd)
			}
			walk(fd)
		}
	})
	b.Run("create", func(b *testing.B) {
		src := b.TempDir()
		files := workspace(b, src, benchFiles)
		data := make([][]byte, len(files))
		for i, f := range files {
			data[i], _ = os.ReadFile(f)
		}
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			dst := filepath.Join(b.TempDir(), "w")
			b.StartTimer()
			for j, f := range files {
				p := filepath.Join(dst, f[len(src):])
				if j == 0 || filepath.Dir(p) != filepath.Dir(filepath.Join(dst, files[j-1][len(src):])) {
					must(b, os.MkdirAll(filepath.Dir(p), 0o755))
				}
				must(b, os.WriteFile(p, data[j], 0o644))
			}
		}
	})
}
