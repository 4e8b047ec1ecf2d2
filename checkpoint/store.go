package checkpoint

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/filelock"
)

// Store holds one thread's checkpoints in a directory (see the package
// documentation for its layout). Its methods may be called concurrently,
// also by several processes on one directory: each takes the store's lock
// (a mutex in the process, an flock across processes) for its duration.
type Store struct {
	dir     string
	opts    Options
	exclude map[string]bool
	sem     chan struct{}           // the in-process half of the store lock
	racy    int64                   // racyWindow; tests shorten it
	hook    func(point, rel string) // tests: called at race-prone points

	// Guarded by the store lock.
	lockf   *os.File // the flock half; nil once closed
	gen     string   // the prune generation s.trees' stored flags hold for
	records map[int]*record
	ids     []int      // of the records present, ascending
	maxID   int        // highest id ever seen in checkpoints/, also unreadable ones
	cache   *statCache // the latest save's walk; nil: the latest checkpoint's
	reads   int64      // files the latest scan read (tests check the stat cache with it)

	treeMu sync.Mutex     // guards trees; scans load trees from several goroutines
	trees  map[hash]*tree // decoded trees by hash, trimmed after each operation

	packState
}

// at calls the test hook, if any, at a point where another process may
// change the tree.
func (s *Store) at(point, rel string) {
	if s.hook != nil {
		s.hook(point, rel)
	}
}

// statCache is what a walk trusts: the tree of an earlier walk (an entry
// whose stat is the same is not read again), and which of its entries are
// racy — their content may have changed after they were read without
// their stat changing (a write in the same clock tick as the read, or
// during it) — and are read again whatever their stat says.
type statCache struct {
	root *tree
	// racy lists the racy paths of a walk of this process; when nil (a
	// checkpoint read from the store), an entry is racy when its ctime
	// lies within racyWindow of start, the checkpoint's walk's start.
	racy  map[string]bool
	start int64
}

func (c *statCache) isRacy(rel string, e *entry, window int64) bool {
	if c.racy != nil {
		return c.racy[rel]
	}
	return e.ctime >= c.start-window
}

// racyWindow: a file whose ctime is this close to the start of a save (or
// later) may be written again within the same timestamp tick after it was
// read, leaving its stat as it was; the next save reads it again rather
// than trusting its stat. It covers the coarse clock the kernel stamps
// files with and a little skew of a file server's clock.
const racyWindow = int64(time.Second)

// record is a checkpoint's file: checkpoints/<id>, JSON. It is written to
// a temporary file, fsynced and renamed: the rename is what makes the
// checkpoint exist.
type record struct {
	V        int       `json:"v"`
	ID       string    `json:"id"`
	Time     time.Time `json:"time"`
	Message  string    `json:"message"`
	Auto     bool      `json:"auto,omitempty"`
	Root     string    `json:"root"` // the root directory's tree, hex SHA-256
	Added    int       `json:"added"`
	Modified int       `json:"modified"`
	Deleted  int       `json:"deleted"`
	Files    int       `json:"files"`
	Size     int64     `json:"size"`
	// ScanStart is when the walk started (ns): entries whose ctime is
	// within racyWindow of it are read again by a save that takes this
	// checkpoint as its stat cache.
	ScanStart int64 `json:"scan_start"`

	root  hash
	bytes int64 // the record file's size
}

func (r *record) info() Info {
	return Info{ID: r.ID, Time: r.Time, Message: r.Message, Auto: r.Auto,
		Added: r.Added, Modified: r.Modified, Deleted: r.Deleted, Files: r.Files, Size: r.Size}
}

// Open opens (creating it when needed) the store in dir, which belongs to
// the store alone and must not lie inside a tree it saves (a thread's
// store goes beside its user-data, not in it).
func Open(dir string, opts Options) (*Store, error) {
	if !supported {
		return nil, ErrUnsupported
	}
	ex, err := cleanExclude(opts.Exclude)
	if err != nil {
		return nil, err
	}
	for _, sub := range []string{"objects", "packs", "checkpoints", "tmp"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o700); err != nil {
			return nil, errorf("open store: %v", bare(err))
		}
	}
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, errorf("open store: %v", bare(err))
	}
	s := &Store{dir: dir, opts: opts, exclude: ex, sem: make(chan struct{}, 1), lockf: f, racy: racyWindow,
		records: map[int]*record{}, trees: map[hash]*tree{},
		packState: packState{packs: map[string]*packFile{}, bad: map[string]bool{}, locs: map[hash]objLoc{}, fds: map[*packFile]*os.File{}}}
	// Temporary files left by a process killed mid-save go now if nobody
	// holds the store, or at the next Prune.
	if filelock.TryLock(f) == nil {
		s.cleanTmp()
		if _, err := os.Stat(filepath.Join(dir, "usage")); errors.Is(err, fs.ErrNotExist) {
			if ents, _ := os.ReadDir(filepath.Join(dir, "checkpoints")); len(ents) == 0 {
				s.writeUsage(0)
			}
		}
		filelock.Unlock(f)
	}
	return s, nil
}

// Close releases the store. It waits for a running operation.
func (s *Store) Close() error {
	s.sem <- struct{}{}
	defer func() { <-s.sem }()
	if s.lockf == nil {
		return nil
	}
	s.closePacks()
	err := s.lockf.Close()
	s.lockf = nil
	return err
}

var errClosed = errorf("store is closed")

// lock takes the store lock, waiting at most until ctx ends, and brings
// what the store knows up to date with the directory (other processes may
// have saved or pruned).
func (s *Store) lock(ctx context.Context) (unlock func(), err error) {
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if s.lockf == nil {
		<-s.sem
		return nil, errClosed
	}
	for wait := time.Millisecond; ; wait = min(2*wait, 50*time.Millisecond) {
		err := filelock.TryLock(s.lockf)
		if err == nil {
			break
		}
		if !errors.Is(err, filelock.ErrLocked) {
			<-s.sem
			return nil, errorf("lock store: %v", bare(err))
		}
		select {
		case <-ctx.Done():
			<-s.sem
			return nil, ctx.Err()
		case <-time.After(wait):
		}
	}
	unlock = func() {
		s.closePacks()
		filelock.Unlock(s.lockf)
		<-s.sem
	}
	if err := s.refresh(); err != nil {
		unlock()
		return nil, err
	}
	return unlock, nil
}

// refresh rereads the list of checkpoints and, when a Prune (of this
// process or another) removed objects since, forgets which trees are known
// to be stored with all they reach.
func (s *Store) refresh() error {
	gen, err := os.ReadFile(filepath.Join(s.dir, "gen"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return errorf("store: %v", bare(err))
	}
	if string(gen) != s.gen {
		s.gen = string(gen)
		s.forgetStored()
	}
	if err := s.refreshPacks(); err != nil {
		return err
	}
	ents, err := os.ReadDir(filepath.Join(s.dir, "checkpoints"))
	if err != nil {
		return errorf("store: %v", bare(err))
	}
	seen := map[int]bool{}
	s.ids = s.ids[:0]
	for _, e := range ents {
		id, ok := parseID(e.Name())
		if !ok {
			continue
		}
		s.maxID = max(s.maxID, id)
		seen[id] = true
		if s.records[id] == nil {
			r, err := s.readRecord(id)
			if err != nil {
				continue // damaged: not listed, its id not reused
			}
			s.records[id] = r
		}
		s.ids = append(s.ids, id)
	}
	for id := range s.records {
		if !seen[id] {
			delete(s.records, id)
		}
	}
	slices.Sort(s.ids)
	return nil
}

func (s *Store) forgetStored() {
	s.treeMu.Lock()
	for _, t := range s.trees {
		t.stored, t.present = false, false
	}
	s.treeMu.Unlock()
}

// parseID parses a checkpoint id: a positive decimal without leading zeros.
func parseID(name string) (int, bool) {
	if name == "" || len(name) > 9 || name[0] == '0' {
		return 0, false
	}
	id, err := strconv.Atoi(name)
	if err != nil || id <= 0 || strconv.Itoa(id) != name {
		return 0, false
	}
	return id, true
}

func (s *Store) readRecord(id int) (*record, error) {
	b, err := os.ReadFile(filepath.Join(s.dir, "checkpoints", strconv.Itoa(id)))
	if err != nil {
		return nil, err
	}
	var r record
	if err := json.Unmarshal(b, &r); err != nil || r.V != 1 || r.ID != strconv.Itoa(id) {
		return nil, ErrCorrupt
	}
	raw, err := hex.DecodeString(r.Root)
	if err != nil || len(raw) != len(r.root) {
		return nil, ErrCorrupt
	}
	copy(r.root[:], raw)
	r.bytes = int64(len(b))
	return &r, nil
}

// writeRecord makes checkpoint r exist: written to a temporary file and
// fsynced — at the same time as the directories of the objects it names,
// which w then fsyncs — then renamed to checkpoints/<id>, and that
// directory fsynced. With w's files already durable, the checkpoint
// exists only once everything it names does.
func (s *Store) writeRecord(r *record, w *objWriter) error {
	b, err := json.Marshal(r)
	if err != nil {
		return errorf("store: %v", err)
	}
	b = append(b, '\n')
	f, err := os.CreateTemp(filepath.Join(s.dir, "tmp"), "r-")
	if err != nil {
		return errorf("store: %v", bare(err))
	}
	dirsDone := make(chan error, 1)
	if w != nil {
		go func() { dirsDone <- w.syncDirs() }()
	} else {
		dirsDone <- nil
	}
	_, err = f.Write(b)
	if err == nil && !s.opts.NoSync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if derr := <-dirsDone; err == nil && derr != nil {
		os.Remove(f.Name())
		return derr
	}
	dir := filepath.Join(s.dir, "checkpoints")
	if err == nil {
		s.at("record-written", "")
		err = os.Rename(f.Name(), filepath.Join(dir, r.ID))
	}
	if err != nil {
		os.Remove(f.Name())
		return errorf("store: %v", bare(err))
	}
	s.at("record-renamed", "")
	if !s.opts.NoSync {
		if err := syncDir(dir); err != nil {
			return errorf("store: %v", bare(err))
		}
	}
	r.bytes = int64(len(b))
	return nil
}

// latest is the newest checkpoint, or nil.
func (s *Store) latest() *record {
	if len(s.ids) == 0 {
		return nil
	}
	return s.records[s.ids[len(s.ids)-1]]
}

// record is checkpoint id.
func (s *Store) record(id string) (*record, error) {
	n, ok := parseID(id)
	if r := s.records[n]; ok && r != nil {
		return r, nil
	}
	return nil, &wrapped{"checkpoint: no checkpoint " + quote(id), ErrNotFound}
}

// List lists the checkpoints, oldest first.
func (s *Store) List(ctx context.Context) ([]Info, error) {
	unlock, err := s.lock(ctx)
	if err != nil {
		return nil, err
	}
	defer unlock()
	out := make([]Info, 0, len(s.ids))
	for _, id := range s.ids {
		out = append(out, s.records[id].info())
	}
	return out, nil
}

// Get describes checkpoint id.
func (s *Store) Get(ctx context.Context, id string) (Info, error) {
	unlock, err := s.lock(ctx)
	if err != nil {
		return Info{}, err
	}
	defer unlock()
	r, err := s.record(id)
	if err != nil {
		return Info{}, err
	}
	return r.info(), nil
}

// loadTree is tree h: known, or read from the store and checked.
func (s *Store) loadTree(h hash) (*tree, error) {
	s.treeMu.Lock()
	t := s.trees[h]
	s.treeMu.Unlock()
	if t != nil {
		return t, nil
	}
	b, err := s.readObject(h)
	if err != nil {
		return nil, err
	}
	t, err = decodeTree(b)
	if err != nil {
		return nil, err
	}
	// Reached from a checkpoint present under the store lock: stored with
	// everything below it (the tree's closure; see Prune for why).
	t.stored, t.present = true, true
	s.treeMu.Lock()
	if old := s.trees[h]; old != nil {
		t = old
	} else {
		s.trees[h] = t
	}
	s.treeMu.Unlock()
	return t, nil
}

// addTrees makes the trees of a scan known, keeping those known already.
func (s *Store) addTrees(m map[hash]*tree) {
	s.treeMu.Lock()
	for h, t := range m {
		if s.trees[h] == nil {
			s.trees[h] = t
		}
	}
	s.treeMu.Unlock()
}

// retain drops every known tree that neither the stat cache nor the
// latest checkpoint reaches, so that memory holds about one tree set.
func (s *Store) retain() {
	s.treeMu.Lock()
	defer s.treeMu.Unlock()
	keep := map[hash]*tree{}
	var walk func(t *tree)
	walk = func(t *tree) {
		if t == nil || keep[t.hash] != nil {
			return
		}
		keep[t.hash] = t
		for i := range t.entries {
			if e := &t.entries[i]; e.kind == kindDir {
				walk(s.trees[e.hash])
			}
		}
	}
	if s.cache != nil {
		walk(s.cache.root)
	}
	if r := s.latest(); r != nil {
		walk(s.trees[r.root])
	}
	s.trees = keep
}

// usage is the store's size as last counted, or -1.
func (s *Store) usage() int64 {
	b, err := os.ReadFile(filepath.Join(s.dir, "usage"))
	if err != nil {
		return -1
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || n < 0 {
		return -1
	}
	return n
}

// writeUsage records the store's size. No fsync: it is a hint, which
// Prune counts again when it is missing.
func (s *Store) writeUsage(n int64) {
	if err := s.writeSmall("usage", []byte(strconv.FormatInt(n, 10)+"\n")); err != nil {
		os.Remove(filepath.Join(s.dir, "usage"))
	}
}

// writeSmall replaces a small file of the store atomically.
func (s *Store) writeSmall(name string, b []byte) error {
	f, err := os.CreateTemp(filepath.Join(s.dir, "tmp"), "s-")
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), filepath.Join(s.dir, name))
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}

// cleanTmp removes every temporary file: called under the store lock,
// when no save of any process is writing one.
func (s *Store) cleanTmp() {
	dir := filepath.Join(s.dir, "tmp")
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		os.Remove(filepath.Join(dir, e.Name()))
	}
}

// newGen records that objects were removed: every process forgets which
// trees it knew to be stored.
func (s *Store) newGen() error {
	var b [8]byte
	rand.Read(b[:])
	g := hex.EncodeToString(b[:])
	if err := s.writeSmall("gen", []byte(g)); err != nil {
		return errorf("store: %v", bare(err))
	}
	s.gen = g
	s.forgetStored()
	return nil
}
