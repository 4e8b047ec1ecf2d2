package checkpoint

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
)

// A pack holds the small objects (file contents up to smallFile, trees)
// one save (or one repack) added, in one file: one create, one fsync and
// one rename instead of one of each per object. Its layout:
//
//	"CKP1"                           magic
//	object bytes, back to back
//	index: per object, sorted by hash: hash (32) | offset (8) | length (8)
//	trailer: index offset (8) | count (8) | SHA-256 of the index (32) | "CKP1"
//
// integers big-endian. The file is named packs/<hex SHA-256 of the
// index>.pack, so a pack is whole or absent like an object, and a damaged
// index (or trailer) makes the pack refused as a whole: its objects are
// then missing, which a restore reports as ErrCorrupt. Each object read
// from a pack is still checked against its hash.
const (
	packMagic     = "CKP1"
	packEntrySize = sha256.Size + 8 + 8
	packTrailer   = 8 + 8 + sha256.Size + 4 // the last 4: packMagic
	packSuffix    = ".pack"
)

// packFile is a pack of the store, its index read and checked.
type packFile struct {
	name  string // the file's name in packs/
	size  int64
	index []packEntry
}

type packEntry struct {
	h      hash
	off, n int64
}

// objLoc is where a packed object lies.
type objLoc struct {
	p      *packFile
	off, n int64
}

// packState is what the store knows of its packs. Guarded by packMu
// (scans and verifies look objects up from several goroutines).
type packState struct {
	packMu sync.RWMutex
	packs  map[string]*packFile // by file name
	bad    map[string]bool      // names refused: not read again
	locs   map[hash]objLoc
	fds    map[*packFile]*os.File // opened during one operation; closed at unlock
}

func (s *Store) packDir() string { return filepath.Join(s.dir, "packs") }

// refreshPacks reads the index of every pack not known yet, and forgets
// the packs that are gone (a Prune, of this process or another, repacked
// them).
func (s *Store) refreshPacks() error {
	ents, err := os.ReadDir(s.packDir())
	if err != nil {
		return errorf("store: %v", bare(err))
	}
	s.packMu.Lock()
	defer s.packMu.Unlock()
	seen := make(map[string]bool, len(ents))
	for _, e := range ents {
		name := e.Name()
		seen[name] = true
		if s.packs[name] != nil || s.bad[name] || !strings.HasSuffix(name, packSuffix) {
			continue
		}
		if !e.Type().IsRegular() { // never opened: a FIFO would block
			s.bad[name] = true
			continue
		}
		p, err := loadPack(s.packDir(), name)
		if errors.Is(err, ErrCorrupt) {
			s.bad[name] = true // its objects are missing: ErrCorrupt where needed; Prune removes it
			continue
		}
		if err != nil { // not the pack's fault (EIO, EMFILE): never taken for damage
			return errorf("store: %v", bare(err))
		}
		s.addPackLocked(p)
	}
	gone := false
	for name := range s.packs {
		if !seen[name] {
			delete(s.packs, name)
			gone = true
		}
	}
	for name := range s.bad {
		if !seen[name] {
			delete(s.bad, name)
		}
	}
	if gone {
		s.rebuildLocsLocked()
	}
	return nil
}

func (s *Store) addPack(p *packFile) {
	s.packMu.Lock()
	s.addPackLocked(p)
	s.packMu.Unlock()
}

func (s *Store) addPackLocked(p *packFile) {
	s.packs[p.name] = p
	for _, e := range p.index {
		s.locs[e.h] = objLoc{p: p, off: e.off, n: e.n}
	}
}

// dropPacks forgets packs (removed by a repack) and closes their files.
func (s *Store) dropPacks(ps []*packFile) {
	s.packMu.Lock()
	defer s.packMu.Unlock()
	for _, p := range ps {
		delete(s.packs, p.name)
		if f := s.fds[p]; f != nil {
			f.Close()
			delete(s.fds, p)
		}
	}
	s.rebuildLocsLocked()
}

func (s *Store) rebuildLocsLocked() {
	s.locs = make(map[hash]objLoc, len(s.locs))
	for _, p := range s.packs {
		for _, e := range p.index {
			s.locs[e.h] = objLoc{p: p, off: e.off, n: e.n}
		}
	}
	for p, f := range s.fds {
		if s.packs[p.name] != p {
			f.Close()
			delete(s.fds, p)
		}
	}
}

// locate is where object h lies in a pack, if it is packed.
func (s *Store) locate(h hash) (objLoc, bool) {
	s.packMu.RLock()
	l, ok := s.locs[h]
	s.packMu.RUnlock()
	return l, ok
}

// hasObject reports whether object h is in the store: packed, or loose.
func (s *Store) hasObject(h hash) bool {
	if _, ok := s.locate(h); ok {
		return true
	}
	_, err := os.Lstat(s.objPath(h))
	return err == nil
}

// packFD is an open descriptor of pack p, kept until the operation ends.
func (s *Store) packFD(p *packFile) (*os.File, error) {
	s.packMu.Lock()
	defer s.packMu.Unlock()
	if f := s.fds[p]; f != nil {
		return f, nil
	}
	f, err := os.Open(filepath.Join(s.packDir(), p.name))
	if err != nil {
		return nil, err
	}
	s.fds[p] = f
	return f, nil
}

// closePacks closes the descriptors an operation opened.
func (s *Store) closePacks() {
	s.packMu.Lock()
	for p, f := range s.fds {
		f.Close()
		delete(s.fds, p)
	}
	s.packMu.Unlock()
}

// loadPack reads and checks the index of packs/name.
func loadPack(dir, name string) (*packFile, error) {
	f, err := os.Open(filepath.Join(dir, name))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	return readPackIndex(f, name, fi.Size())
}

type readerAt interface {
	ReadAt(p []byte, off int64) (int, error)
}

func readPackIndex(f readerAt, name string, size int64) (*packFile, error) {
	bad := func(what string) error { return errorf("%w: pack %s: %s", ErrCorrupt, quote(name), what) }
	if size < int64(len(packMagic)+packTrailer) {
		return nil, bad("too short")
	}
	readErr := func(err error) error {
		if errors.Is(err, io.EOF) {
			return bad("cut short")
		}
		return err
	}
	var tr [packTrailer]byte
	if _, err := f.ReadAt(tr[:], size-packTrailer); err != nil {
		return nil, readErr(err)
	}
	if string(tr[packTrailer-len(packMagic):]) != packMagic {
		return nil, bad("no trailer")
	}
	ioff := int64(binary.BigEndian.Uint64(tr[0:8]))
	count := binary.BigEndian.Uint64(tr[8:16])
	var sum hash
	copy(sum[:], tr[16:16+sha256.Size])
	if ioff < int64(len(packMagic)) || ioff > size-packTrailer ||
		count != uint64(size-packTrailer-ioff)/packEntrySize || uint64(size-packTrailer-ioff)%packEntrySize != 0 {
		return nil, bad("index bounds")
	}
	if name != hex.EncodeToString(sum[:])+packSuffix {
		return nil, bad("name")
	}
	idx := make([]byte, size-packTrailer-ioff)
	if _, err := f.ReadAt(idx, ioff); err != nil {
		return nil, readErr(err)
	}
	if sha256.Sum256(idx) != sum {
		return nil, bad("index checksum")
	}
	var head [len(packMagic)]byte
	if _, err := f.ReadAt(head[:], 0); err != nil {
		return nil, readErr(err)
	}
	if string(head[:]) != packMagic {
		return nil, bad("magic")
	}
	p := &packFile{name: name, size: size, index: make([]packEntry, count)}
	for i := range p.index {
		b := idx[i*packEntrySize:]
		e := &p.index[i]
		copy(e.h[:], b[:sha256.Size])
		e.off = int64(binary.BigEndian.Uint64(b[sha256.Size:]))
		e.n = int64(binary.BigEndian.Uint64(b[sha256.Size+8:]))
		if e.off < int64(len(packMagic)) || e.n < 0 || e.off > ioff || e.n > ioff-e.off {
			return nil, bad("object bounds")
		}
		if i > 0 && bytes.Compare(p.index[i-1].h[:], e.h[:]) >= 0 {
			return nil, bad("index order")
		}
	}
	return p, nil
}

// packWriter writes one pack: objects are handed to a goroutine that
// appends them to a temporary file (so that reading and hashing overlap
// writing), then seal writes the index and makes the pack durable under
// its name.
type packWriter struct {
	f     *os.File
	bw    *bufio.Writer
	off   int64
	index []packEntry
	ch    chan packObj
	done  chan struct{}
	err   error
}

type packObj struct {
	h    hash
	data []byte
}

func (w *objWriter) newPack() (*packWriter, error) {
	f, err := w.temp()
	if err != nil {
		return nil, err
	}
	// 64 KiB: large writes still, and a thread's save of a few small
	// files leaves the server 64 KiB of garbage, not 1 MiB (a thousand
	// idle threads' first saves grew its RSS by 90 MB at 1 MiB).
	p := &packWriter{f: f, bw: bufio.NewWriterSize(f, 64<<10), ch: make(chan packObj, 64), done: make(chan struct{})}
	_, p.err = p.bw.WriteString(packMagic)
	p.off = int64(len(packMagic))
	go func() {
		defer close(p.done)
		for o := range p.ch {
			if p.err != nil {
				continue
			}
			if _, p.err = p.bw.Write(o.data); p.err == nil {
				p.index = append(p.index, packEntry{h: o.h, off: p.off, n: int64(len(o.data))})
				p.off += int64(len(o.data))
				w.s.at("pack-object", "")
			}
		}
	}()
	return p, nil
}

// seal ends pack p: its index and trailer written, the file fsynced
// (unless NoSync), closed and renamed to its name in packs/ (whose own
// fsync is left to syncDirs). It returns the pack, or nil when p holds
// nothing.
func (w *objWriter) seal(p *packWriter) (*packFile, error) {
	close(p.ch)
	<-p.done
	fail := func(err error) (*packFile, error) {
		p.f.Close()
		os.Remove(p.f.Name())
		return nil, errorf("store: %v", bare(err))
	}
	if p.err != nil {
		return fail(p.err)
	}
	if len(p.index) == 0 {
		p.f.Close()
		os.Remove(p.f.Name())
		return nil, nil
	}
	slices.SortFunc(p.index, func(a, b packEntry) int { return bytes.Compare(a.h[:], b.h[:]) })
	idx := make([]byte, 0, len(p.index)*packEntrySize+packTrailer)
	for _, e := range p.index {
		idx = append(idx, e.h[:]...)
		idx = binary.BigEndian.AppendUint64(idx, uint64(e.off))
		idx = binary.BigEndian.AppendUint64(idx, uint64(e.n))
	}
	sum := sha256.Sum256(idx)
	idx = binary.BigEndian.AppendUint64(idx, uint64(p.off))
	idx = binary.BigEndian.AppendUint64(idx, uint64(len(p.index)))
	idx = append(idx, sum[:]...)
	idx = append(idx, packMagic...)
	if _, err := p.bw.Write(idx); err != nil {
		return fail(err)
	}
	if err := p.bw.Flush(); err != nil {
		return fail(err)
	}
	w.s.at("pack-written", "")
	if w.sync {
		if err := p.f.Sync(); err != nil {
			return fail(err)
		}
	}
	if err := p.f.Close(); err != nil {
		os.Remove(p.f.Name())
		return nil, errorf("store: %v", bare(err))
	}
	w.s.at("pack-synced", "")
	pf := &packFile{name: hex.EncodeToString(sum[:]) + packSuffix, size: p.off + int64(len(idx)), index: p.index}
	dst := filepath.Join(w.s.packDir(), pf.name)
	if err := os.Rename(p.f.Name(), dst); err != nil {
		os.Remove(p.f.Name())
		return nil, errorf("store: %v", bare(err))
	}
	w.s.at("pack-renamed", "")
	w.added.Add(pf.size - p.off + int64(len(packMagic))) // the index, trailer and magic
	return pf, nil
}
