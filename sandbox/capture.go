package sandbox

import "sync"

// Capture keeps the first and the last bytes written to it, in memory
// bounded by headMax+tailMax whatever is written, and counts the rest.
// It is safe for concurrent use.
type Capture struct {
	mu       sync.Mutex
	headMax  int
	head     []byte
	tail     []byte // ring buffer of tailMax bytes
	tailPos  int    // next write position in tail
	tailFull bool
	total    int64
}

// NewCapture keeps up to headMax leading and tailMax trailing bytes.
func NewCapture(headMax, tailMax int) *Capture {
	return &Capture{headMax: headMax, head: make([]byte, 0, min(headMax, 64<<10)), tail: make([]byte, tailMax)}
}

// Write never fails.
func (c *Capture) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(p)
	c.total += int64(n)
	if room := c.headMax - len(c.head); room > 0 {
		k := min(room, len(p))
		c.head = append(c.head, p[:k]...)
		p = p[k:]
	}
	if len(c.tail) == 0 || len(p) == 0 {
		return n, nil
	}
	if len(p) >= len(c.tail) {
		copy(c.tail, p[len(p)-len(c.tail):])
		c.tailPos, c.tailFull = 0, true
		return n, nil
	}
	k := copy(c.tail[c.tailPos:], p)
	if k < len(p) {
		copy(c.tail, p[k:])
		c.tailFull = true
	}
	c.tailPos = (c.tailPos + len(p)) % len(c.tail)
	if c.tailPos == 0 {
		c.tailFull = true
	}
	return n, nil
}

// Skip counts n bytes as written and dropped — output no longer at hand,
// between what was written and what comes — and ends the head there:
// later bytes go to the tail only.
func (c *Capture) Skip(n int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.total += max(n, 0)
	c.headMax = len(c.head)
	c.tailPos, c.tailFull = 0, false
}

// Result returns the kept head, the kept tail (bytes after the head, only
// the last ones) and how many bytes were written in all. When
// total <= len(head)+len(tail) nothing was dropped.
func (c *Capture) Result() (head, tail []byte, total int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	head = append([]byte(nil), c.head...)
	if c.tailFull {
		tail = append(append([]byte(nil), c.tail[c.tailPos:]...), c.tail[:c.tailPos]...)
	} else {
		tail = append([]byte(nil), c.tail[:c.tailPos]...)
	}
	return head, tail, c.total
}

// Last returns the last n bytes of what was written (fewer when less was
// written) and whether anything written came before them, so a caller
// knows their first line may be partial. Bytes the capture dropped
// between head and tail are never part of it.
func (c *Capture) Last(n int) (b []byte, more bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var tail []byte
	if c.tailFull {
		tail = append(append(tail, c.tail[c.tailPos:]...), c.tail[:c.tailPos]...)
	} else {
		tail = c.tail[:c.tailPos]
	}
	if len(tail) >= n {
		return append([]byte(nil), tail[len(tail)-n:]...), true
	}
	if c.total > int64(len(c.head)+len(tail)) { // dropped between head and tail
		return append([]byte(nil), tail...), true
	}
	k := min(n-len(tail), len(c.head))
	b = append(append([]byte(nil), c.head[len(c.head)-k:]...), tail...)
	return b, k < len(c.head)
}
