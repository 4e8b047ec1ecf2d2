package checkpoint

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	gohash "hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
)

// objPath is where object h lives: objects/<2 hex>/<62 hex>.
func (s *Store) objPath(h hash) string {
	x := hex.EncodeToString(h[:])
	return filepath.Join(s.dir, "objects", x[:2], x[2:])
}

func shortHash(h hash) string { return hex.EncodeToString(h[:6]) }

// objWriter adds objects to the store during one save. Small objects
// (file contents up to smallFile, trees) go to one pack (see pack.go),
// appended by a background goroutine so that reading and hashing go on
// while it writes; larger ones, copied to a temporary file while hashed,
// become loose objects: fsynced in the background, many at once, and
// renamed to their hash's name. Either way an object's name is the hash of
// what was written, and a pack or an object file is complete or absent,
// whatever stops the process. waitFiles returns once every object is
// durable under its name (but for the fsync of the directories, which
// syncDirs does).
type objWriter struct {
	s       *Store
	sync    bool
	mu      sync.Mutex
	claimed map[hash]bool // objects this save has written or found present
	dirs    map[string]bool
	pack    *packWriter // the pack being written, nil until the first small object
	err     error
	wg      sync.WaitGroup
	sem     chan struct{} // bounds background fsyncs
	added   atomic.Int64  // bytes of new objects
}

func (s *Store) newWriter() *objWriter {
	return &objWriter{s: s, sync: !s.opts.NoSync, claimed: map[hash]bool{}, dirs: map[string]bool{}, sem: make(chan struct{}, 64)}
}

// claim reports whether the caller must write object h: it is neither in
// the store nor written by this save. After true, the caller writes it
// (or the save fails).
func (w *objWriter) claim(h hash) bool {
	w.mu.Lock()
	if w.claimed[h] {
		w.mu.Unlock()
		return false
	}
	w.claimed[h] = true
	w.mu.Unlock()
	return !w.s.hasObject(h)
}

// present reports whether object h is in the store or being written.
func (w *objWriter) present(h hash) bool {
	w.mu.Lock()
	ok := w.claimed[h]
	w.mu.Unlock()
	return ok || w.s.hasObject(h)
}

func (w *objWriter) fail(err error) {
	w.mu.Lock()
	if w.err == nil {
		w.err = err
	}
	w.mu.Unlock()
}

// temp creates a temporary file in the store's tmp directory.
func (w *objWriter) temp() (*os.File, error) {
	f, err := os.CreateTemp(filepath.Join(w.s.dir, "tmp"), "o-")
	if err != nil {
		return nil, errorf("store: %v", bare(err))
	}
	return f, nil
}

// putBytes writes object h, whose content is data, to the save's pack.
// data is copied: the caller may reuse it at once.
func (w *objWriter) putBytes(h hash, data []byte) error {
	w.mu.Lock()
	p := w.pack
	if p == nil {
		var err error
		if p, err = w.newPack(); err != nil {
			w.mu.Unlock()
			return err
		}
		w.pack = p
	}
	w.mu.Unlock()
	w.added.Add(int64(len(data)))
	p.ch <- packObj{h: h, data: slices.Clone(data)}
	return nil
}

// finish makes the temporary file f object h: fsync (unless NoSync),
// close, rename. In the background: wait reports an error.
func (w *objWriter) finish(f *os.File, h hash, size int64) {
	w.added.Add(size)
	done := func() {
		err := error(nil)
		if w.sync {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = w.rename(f.Name(), h)
		}
		if err != nil {
			os.Remove(f.Name())
			w.fail(errorf("store: %v", bare(err)))
		}
	}
	if !w.sync {
		done()
		return
	}
	w.wg.Add(1)
	w.sem <- struct{}{}
	go func() {
		defer func() { <-w.sem; w.wg.Done() }()
		done()
	}()
}

func (w *objWriter) rename(tmp string, h hash) error {
	dst := w.s.objPath(h)
	err := os.Rename(tmp, dst)
	if errors.Is(err, fs.ErrNotExist) {
		if err = os.Mkdir(filepath.Dir(dst), 0o700); err == nil || errors.Is(err, fs.ErrExist) {
			err = os.Rename(tmp, dst)
		}
	}
	if err == nil && w.sync {
		w.mu.Lock()
		w.dirs[filepath.Dir(dst)] = true
		w.mu.Unlock()
	}
	return err
}

// wait waits for every object written and makes their names durable.
func (w *objWriter) wait() error {
	if err := w.waitFiles(); err != nil {
		return err
	}
	return w.syncDirs()
}

// waitFiles waits for every object to be written, fsynced and renamed:
// the loose ones, and the pack, which it seals. Objects put afterwards go
// to another pack.
func (w *objWriter) waitFiles() error {
	w.mu.Lock()
	p := w.pack
	w.pack = nil
	w.mu.Unlock()
	if p != nil {
		pf, err := w.seal(p)
		if err != nil {
			w.fail(err)
		} else if pf != nil {
			w.s.addPack(pf)
			if w.sync {
				w.mu.Lock()
				w.dirs[w.s.packDir()] = true
				w.mu.Unlock()
			}
		}
	}
	w.wg.Wait()
	return w.err
}

// syncDirs fsyncs the directories objects were renamed into, all at once.
func (w *objWriter) syncDirs() error {
	if !w.sync {
		return w.err
	}
	var wg sync.WaitGroup
	for d := range w.dirs {
		wg.Go(func() {
			if err := syncDir(d); err != nil {
				w.fail(errorf("store: %v", bare(err)))
			}
		})
	}
	wg.Wait()
	w.dirs = map[string]bool{}
	return w.err
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// readObject reads object h whole and checks its hash.
func (s *Store) readObject(h hash) ([]byte, error) {
	var b []byte
	var err error
	if l, ok := s.locate(h); ok {
		var f *os.File
		if f, err = s.packFD(l.p); err == nil {
			b = make([]byte, l.n)
			_, err = f.ReadAt(b, l.off)
		}
	} else {
		b, err = os.ReadFile(s.objPath(h))
	}
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, errorf("%w: object %s is missing", ErrCorrupt, shortHash(h))
		}
		if errors.Is(err, io.EOF) {
			return nil, errorf("%w: object %s is cut short", ErrCorrupt, shortHash(h))
		}
		return nil, errorf("store: %v", bare(err))
	}
	if sha256.Sum256(b) != h {
		return nil, errorf("%w: object %s does not match its hash", ErrCorrupt, shortHash(h))
	}
	return b, nil
}

// openObject opens object h for reading; the reader fails instead of
// ending when what it read does not hash to h or is not size bytes. It has
// its own descriptor: it stays readable whatever happens to the store.
func (s *Store) openObject(h hash, size int64) (*objReader, error) {
	path, off, n := s.objPath(h), int64(0), int64(-1)
	if l, ok := s.locate(h); ok {
		path, off, n = filepath.Join(s.packDir(), l.p.name), l.off, l.n
	}
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, errorf("%w: object %s is missing", ErrCorrupt, shortHash(h))
		}
		return nil, errorf("store: %v", bare(err))
	}
	r := &objReader{f: f, r: f, want: h, left: size, h: sha256.New()}
	if n >= 0 {
		r.r = io.NewSectionReader(f, off, n)
	}
	return r, nil
}

// objReader reads an object and checks it as it goes.
type objReader struct {
	f    *os.File
	r    io.Reader // f, or the object's section of a pack
	want hash
	left int64
	h    gohash.Hash
}

func (r *objReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.h.Write(p[:n])
	r.left -= int64(n)
	if r.left < 0 {
		return n, errorf("%w: object %s is longer than recorded", ErrCorrupt, shortHash(r.want))
	}
	if err == io.EOF {
		var got hash
		if r.left != 0 || [sha256.Size]byte(r.h.Sum(got[:0])) != r.want {
			return n, errorf("%w: object %s does not match its hash", ErrCorrupt, shortHash(r.want))
		}
	} else if err != nil {
		err = errorf("store: %v", bare(err))
	}
	return n, err
}

func (r *objReader) Close() error { return r.f.Close() }
