package terminal

import (
	"container/list"
	"sync"
)

// Term is one job's screen in a cache, and how far the job's output has
// been drawn on it.
type Term struct {
	mu     sync.Mutex
	Screen *Screen
	// Next is the job's output offset (characters) drawn up to; 0 and a
	// blank screen: nothing drawn yet.
	Next int64

	key   string
	elem  *list.Element
	cells int  // what it counted for when last released
	dead  bool // evicted while held: closed at its release
}

// Screens is a bounded cache of screens by key (the server's: a thread's
// job). A screen costs about 0.3 KB a cell (its main and alternate
// buffers) and the emulator's 4 MiB buffer for a sequence's data: the
// cache keeps the most recently used, at most maxScreens within maxCells
// cells (and at least the one in use), closing the others.
type Screens struct {
	maxScreens, maxCells int

	mu    sync.Mutex
	byKey map[string]*Term
	lru   *list.List // of *Term, most recent first
	cells int
}

// NewScreens makes a cache of at most maxScreens screens of maxCells
// cells in all.
func NewScreens(maxScreens, maxCells int) *Screens {
	return &Screens{maxScreens: maxScreens, maxCells: maxCells, byKey: map[string]*Term{}, lru: list.New()}
}

// The bounds of the server's cache: 16 screens, of 200 000 cells in all
// (two of the largest: 500×200 is 100 000 cells); at most about 120 MB.
const (
	DefaultScreens = 16
	DefaultCells   = 200_000
)

// Open returns key's screen, locked until release: the cached one, or a
// new blank one of cols × rows. A nil cache keeps nothing: each Open
// makes a new screen, closed at its release.
func (c *Screens) Open(key string, cols, rows int) (t *Term, release func()) {
	if c == nil {
		t = &Term{Screen: NewScreen(cols, rows)}
		t.mu.Lock()
		return t, func() { t.Screen.Close(); t.mu.Unlock() }
	}
	for {
		c.mu.Lock()
		t = c.byKey[key]
		if t == nil {
			t = &Term{Screen: NewScreen(cols, rows), key: key, cells: cols * rows}
			c.byKey[key] = t
			t.elem = c.lru.PushFront(t)
			c.cells += t.cells
		} else {
			c.lru.MoveToFront(t.elem)
		}
		c.mu.Unlock()
		t.mu.Lock()
		c.mu.Lock()
		cached := c.byKey[key] == t // not evicted while this waited for it
		c.mu.Unlock()
		if cached {
			return t, func() { c.release(t) }
		}
		t.mu.Unlock()
	}
}

// release unlocks t, counts its size now and evicts what is over the
// bound, least recently used first.
func (c *Screens) release(t *Term) {
	cols, rows := t.Screen.Size()
	c.mu.Lock()
	if t.dead {
		c.mu.Unlock()
		t.Screen.Close()
		t.mu.Unlock()
		return
	}
	c.cells += cols*rows - t.cells
	t.cells = cols * rows
	var closing []*Term
	for (c.cells > c.maxCells || c.lru.Len() > c.maxScreens) && c.lru.Len() > 1 {
		old := c.lru.Back().Value.(*Term)
		c.lru.Remove(old.elem)
		delete(c.byKey, old.key)
		c.cells -= old.cells
		if old == t {
			closing = append(closing, t)
			continue
		}
		if old.mu.TryLock() {
			closing = append(closing, old)
		} else {
			old.dead = true // its holder closes it
		}
	}
	c.mu.Unlock()
	for _, o := range closing {
		o.Screen.Close()
		if o != t {
			o.mu.Unlock()
		}
	}
	t.mu.Unlock()
}

// Len is how many screens the cache holds.
func (c *Screens) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len()
}
