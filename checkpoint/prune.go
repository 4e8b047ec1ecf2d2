package checkpoint

import (
	"context"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strconv"
)

// Prune drops the oldest checkpoints until the store (objects, trees and
// checkpoint files) is at most maxBytes, always keeping the newest, and
// removes every object no remaining checkpoint holds (also those a killed
// save left behind). While the size last recorded is within maxBytes it
// only clears temporary files, and merges the small packs of many saves
// once there are more than maxSmallPacks: cheap enough to call after every
// save.
func (s *Store) Prune(ctx context.Context, maxBytes int64) (PruneResult, error) {
	unlock, err := s.lock(ctx)
	if err != nil {
		return PruneResult{}, err
	}
	defer unlock()
	defer s.retain()
	if u := s.usage(); u >= 0 && u <= maxBytes {
		s.cleanTmp()
		if err := s.consolidate(); err != nil {
			return PruneResult{}, err
		}
		return PruneResult{Bytes: u}, nil
	}
	return s.prune(ctx, maxBytes)
}

// prune is the mark and sweep. Newest first, each checkpoint is kept while
// the objects it adds to those of the newer ones fit in maxBytes. Then,
// in this order: a new generation (every process forgets what it knew to
// be stored), the dropped checkpoint files go (a checkpoint never names a
// removed object, whatever stops the process), and every object not
// marked goes.
func (s *Store) prune(ctx context.Context, maxBytes int64) (PruneResult, error) {
	marked := map[hash]int64{}
	var total int64
	keep := len(s.ids)
	for i := len(s.ids) - 1; i >= 0; i-- {
		if err := ctx.Err(); err != nil {
			return PruneResult{}, err
		}
		r := s.records[s.ids[i]]
		delta := map[hash]int64{}
		s.mark(r.root, marked, delta) // a damaged checkpoint keeps what can be found of it
		add := r.bytes
		for _, n := range delta {
			add += n
		}
		if i < len(s.ids)-1 && total+add > maxBytes {
			break
		}
		for h, n := range delta {
			marked[h] = n
		}
		total += add
		keep = i
	}
	if err := s.newGen(); err != nil {
		return PruneResult{}, err
	}
	var res PruneResult
	dir := filepath.Join(s.dir, "checkpoints")
	for _, id := range s.ids[:keep] {
		name := strconv.Itoa(id)
		if err := os.Remove(filepath.Join(dir, name)); err != nil && !os.IsNotExist(err) {
			return res, errorf("prune: %v", bare(err))
		}
		res.Removed = append(res.Removed, name)
		res.Freed += s.records[id].bytes
		delete(s.records, id)
	}
	s.ids = append(s.ids[:0], s.ids[keep:]...)
	if !s.opts.NoSync && len(res.Removed) > 0 {
		if err := syncDir(dir); err != nil {
			return res, errorf("prune: %v", bare(err))
		}
	}
	objects := filepath.Join(s.dir, "objects")
	fan, err := os.ReadDir(objects)
	if err != nil {
		return res, errorf("prune: %v", bare(err))
	}
	for _, d := range fan {
		sub := filepath.Join(objects, d.Name())
		ents, _ := os.ReadDir(sub)
		for _, e := range ents {
			if h, ok := objName(d.Name() + e.Name()); ok {
				if _, keep := marked[h]; keep {
					continue
				}
			}
			if info, err := e.Info(); err == nil {
				if os.Remove(filepath.Join(sub, e.Name())) == nil {
					res.Freed += info.Size()
				}
			}
		}
	}
	freed, err := s.repack(marked)
	res.Freed += freed
	if err != nil {
		return res, err
	}
	s.cleanTmp()
	s.writeUsage(total)
	res.Bytes = total
	return res, nil
}

// repack drops the packed objects not in keep: a pack all of whose
// objects are kept stays as it is; the kept objects of the others are
// copied to one new pack (see rewrite); a pack whose index is damaged
// goes too. It returns the bytes freed.
func (s *Store) repack(keep map[hash]int64) (int64, error) {
	s.packMu.RLock()
	var drop []*packFile
	copyFrom := map[hash]bool{}
	kept := map[hash]bool{}
	for _, p := range s.packs {
		all := true
		for _, e := range p.index {
			if _, ok := keep[e.h]; !ok {
				all = false
				break
			}
		}
		if all {
			for _, e := range p.index {
				kept[e.h] = true
			}
			continue
		}
		drop = append(drop, p)
		for _, e := range p.index {
			if _, ok := keep[e.h]; ok {
				copyFrom[e.h] = true
			}
		}
	}
	for h := range kept {
		delete(copyFrom, h)
	}
	bad := make([]string, 0, len(s.bad))
	for name := range s.bad {
		bad = append(bad, name)
	}
	s.packMu.RUnlock()

	freed, err := s.rewrite(drop, copyFrom)
	if err != nil {
		return freed, err
	}
	for _, name := range bad {
		if fi, err := os.Lstat(filepath.Join(s.packDir(), name)); err == nil && os.Remove(filepath.Join(s.packDir(), name)) == nil {
			freed += fi.Size()
		}
	}
	return freed, nil
}

// Packs below smallPack are merged into one when there are more than
// maxSmallPacks of them (Prune's cheap path), so that a store that is
// never pruned for room still has few packs to read the indexes of.
const (
	smallPack     = 1 << 20
	maxSmallPacks = 32
)

// consolidate merges the small packs into one when there are too many.
func (s *Store) consolidate() error {
	s.packMu.RLock()
	var small []*packFile
	for _, p := range s.packs {
		if p.size < smallPack {
			small = append(small, p)
		}
	}
	s.packMu.RUnlock()
	if len(small) <= maxSmallPacks {
		return nil
	}
	all := map[hash]bool{}
	for _, p := range small {
		for _, e := range p.index {
			all[e.h] = true
		}
	}
	_, err := s.rewrite(small, all)
	return err
}

// rewrite copies the objects copyFrom (each checked against its hash: a
// damaged one is left out) to one new pack, made durable before the packs
// drop are deleted. It returns the bytes freed.
func (s *Store) rewrite(drop []*packFile, copyFrom map[hash]bool) (int64, error) {
	var freed int64
	if len(copyFrom) > 0 {
		w := s.newWriter()
		for h := range copyFrom {
			b, err := s.readObject(h)
			if err != nil {
				if errors.Is(err, ErrCorrupt) {
					continue // damaged: not carried over
				}
				w.waitFiles()
				return 0, err
			}
			if err := w.putBytes(h, b); err != nil {
				w.waitFiles()
				return 0, err
			}
		}
		if err := w.wait(); err != nil {
			return 0, err
		}
		freed -= w.added.Load()
	}
	s.at("prune-repacked", "")
	defer s.dropPacks(drop)
	for _, p := range drop {
		s.at("prune-drop", p.name)
		if err := os.Remove(filepath.Join(s.packDir(), p.name)); err != nil && !os.IsNotExist(err) {
			return freed, errorf("prune: %v", bare(err))
		}
		freed += p.size
	}
	return freed, nil
}

// mark adds to out every object reachable from tree h that neither seen
// nor out holds yet, with its size.
func (s *Store) mark(h hash, seen, out map[hash]int64) error {
	if _, ok := seen[h]; ok {
		return nil
	}
	if _, ok := out[h]; ok {
		return nil
	}
	t, err := s.loadTree(h)
	if err != nil {
		return err
	}
	out[h] = t.osize
	var firstErr error
	for i := range t.entries {
		e := &t.entries[i]
		switch e.kind {
		case kindFile:
			if _, ok := seen[e.hash]; !ok {
				out[e.hash] = e.size
			}
		case kindDir:
			if err := s.mark(e.hash, seen, out); err != nil && firstErr == nil {
				firstErr = err
			}
		}
	}
	return firstErr
}

func objName(name string) (hash, bool) {
	var h hash
	if len(name) != 2*len(h) {
		return h, false
	}
	if _, err := hex.Decode(h[:], []byte(name)); err != nil || hex.EncodeToString(h[:]) != name {
		return h, false
	}
	return h, true
}

// Usage is the store's size in bytes: objects, trees and checkpoint
// files (as last recorded; counted when unknown).
func (s *Store) Usage(ctx context.Context) (int64, error) {
	unlock, err := s.lock(ctx)
	if err != nil {
		return 0, err
	}
	defer unlock()
	if u := s.usage(); u >= 0 {
		return u, nil
	}
	var n int64
	for _, sub := range []string{"objects", "packs", "checkpoints"} {
		filepath.WalkDir(filepath.Join(s.dir, sub), func(_ string, d os.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				if info, err := d.Info(); err == nil {
					n += info.Size()
				}
			}
			return nil
		})
	}
	s.writeUsage(n)
	return n, nil
}
