package audit

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/sandbox-mcp/sandbox-mcp/filelock"
)

// Outcomes.
const (
	OK      = "ok"
	Error   = "error"
	Denied  = "denied"
	Timeout = "timeout"
)

// Event is one tool call.
type Event struct {
	Time       time.Time      `json:"time"`
	Session    string         `json:"session"`
	Thread     string         `json:"thread"`
	Sandbox    string         `json:"sandbox"`
	Provider   string         `json:"provider"`
	Tool       string         `json:"tool"`
	Outcome    string         `json:"outcome"`
	DurationMS int64          `json:"duration_ms"`
	ExitCode   *int           `json:"exit_code,omitempty"`
	BytesOut   int            `json:"bytes_out"`
	Truncated  bool           `json:"truncated"`
	Error      string         `json:"error,omitempty"`
	TraceID    string         `json:"trace_id,omitempty"` // the call's trace when traces are sent (SPEC §19): 32 hex digits
	Args       map[string]any `json:"args"`
	// PrevSHA256 is the sha256 of the previous line's bytes (without its
	// newline); "" on the first line. The log is a hash chain: a changed,
	// removed or inserted line breaks it (see Verify).
	PrevSHA256 string `json:"prev_sha256"`

	reserved int64 // room Begin reserved for this line
}

// Content is how file content appears in the log: never the bytes.
type Content struct {
	Size   int    `json:"size"`
	SHA256 string `json:"sha256,omitempty"` // empty for a secret: its size only
}

// Summarize returns the record of a piece of content.
func Summarize(s string) Content {
	sum := sha256.Sum256([]byte(s))
	return Content{Size: len(s), SHA256: hex.EncodeToString(sum[:])}
}

// Sink receives events. A call runs only once Begin has said its line can
// be written; Record then writes that line (SPEC §9: the audit fails
// closed).
type Sink interface {
	// Begin checks, before a call runs, that its line can be written and
	// reserves room for it. e holds what is known before the call: session,
	// thread, tool, arguments. The Event returned carries the reservation
	// and is the one to fill in and pass to Record. An error means the
	// call must not run.
	Begin(e Event) (Event, error)
	// Record writes the call's line whole, or nothing, and releases the
	// room Begin reserved.
	Record(e Event) error
	Close() error
}

// ErrUnavailable is wrapped by every error of Begin and Record: the line
// cannot be written. Its messages name no path.
var ErrUnavailable = errors.New("audit log cannot be written")

// ErrorMax is how many bytes of a call's error message its line keeps.
const ErrorMax = 2048

// lineSlack bounds what a line gains after Begin (outcome, duration, exit
// code, sizes, a time of another length), beyond its error message.
const lineSlack = 1024

// DefaultHeadroom is the room kept free in the log beyond the calls of
// this process in flight: other processes appending to the same log write
// into it too.
const DefaultHeadroom = 256 << 10

// Writer writes events as JSON lines, one write per line, in the order
// Record is called, each chained to the one before.
type Writer struct {
	mu     sync.Mutex
	w      io.Writer
	file   *os.File // when writing a file: several processes may share it
	path   string   // the file's path, to see it removed or replaced
	closer io.Closer
	prev   string // sha256 of the last line written
	end    int64  // the file's size after our last line; -1: unknown

	// Headroom is the room Begin keeps free beyond the reservations of
	// this process's calls in flight (DefaultHeadroom when OpenFile made
	// the Writer). Set it before the first call.
	Headroom int64
	reserved int64 // room held by calls in flight
}

// NewWriter writes to w. It reserves nothing: Begin always succeeds.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// OpenFile appends to the file at path, creating it (and its directory)
// with owner-only permissions. Several processes may append to one file:
// each line is written under an exclusive flock, chained to the line that
// is last in the file at that moment.
func OpenFile(path string) (*Writer, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("audit log: %w", err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("audit log: %w", err)
	}
	return &Writer{w: f, file: f, path: path, closer: f, end: -1, Headroom: DefaultHeadroom}, nil
}

// Begin makes sure the line of the call about to run can be written: the
// log is still there (not removed; a log replaced at its path, as by a
// rotation, is opened again) and has room for the line, and for the lines
// of the calls in flight and some headroom. The room is taken from the
// file system now (fallocate beyond the end of the file), so a call that
// fills the disk still gets its line written; and a disk without room for
// one more line refuses the call even while that reserve lasts.
func (w *Writer) Begin(e Event) (Event, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.file == nil {
		return e, nil
	}
	need := lineBound(e)
	unlock, size, err := w.lock()
	if err != nil {
		return e, err
	}
	defer unlock()
	if err := reserve(w.file, size, w.reserved+need+w.Headroom, need); err != nil {
		return e, unavailable(err)
	}
	w.reserved += need
	e.reserved = need
	return e, nil
}

// lineBound is the most bytes e's line can take once the call has run:
// its error message is cut at ErrorMax bytes, each escaped in at most 6.
func lineBound(e Event) int64 {
	e.Error = ""
	e.PrevSHA256 = strings.Repeat("0", sha256.Size*2)
	b, err := json.Marshal(e)
	if err != nil {
		return 1 << 20
	}
	return int64(len(b)) + 6*ErrorMax + lineSlack
}

// unavailable wraps err as ErrUnavailable, without the path a *PathError
// would name.
func unavailable(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}

// errLogRemoved: the log was removed (unlinked) while open.
var errLogRemoved = errors.New("the log file was removed")

// lock takes the file's flock, after making sure w.file is the file at
// w.path, and readies w.prev for the next line: the hash of the last
// complete line. A torn last line (a writer killed mid-line) is cut off.
// It returns the file's size.
func (w *Writer) lock() (unlock func(), size int64, err error) {
	fi, err := w.file.Stat()
	if err != nil {
		return nil, 0, unavailable(err)
	}
	if unlinked(fi) || !samePath(fi, w.path) {
		// Removed, or replaced at its path (rotated): only a file at the
		// path is written to; a removed log is not made again.
		f, err := os.OpenFile(w.path, os.O_RDWR|os.O_APPEND, 0)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil, 0, unavailable(errLogRemoved)
			}
			return nil, 0, unavailable(err)
		}
		w.file.Close()
		w.file, w.w, w.closer, w.end = f, f, f, -1
	}
	f := w.file
	if err := filelock.Lock(f); err != nil {
		return nil, 0, unavailable(err)
	}
	unlock = func() { filelock.Unlock(f) }
	if fi, err = w.file.Stat(); err != nil {
		unlock()
		return nil, 0, unavailable(err)
	}
	size = fi.Size()
	if size == w.end {
		return unlock, size, nil
	}
	// Another process wrote since (or this is our first line).
	last, whole, err := lastLine(w.file, size)
	if err == nil && whole < size {
		err = w.file.Truncate(whole)
		size = whole
	}
	if err != nil {
		unlock()
		return nil, 0, unavailable(err)
	}
	w.prev = ""
	if last != nil {
		w.prev = lineHash(last)
	}
	w.end = size
	return unlock, size, nil
}

// samePath: the file at path is fi.
func samePath(fi os.FileInfo, path string) bool {
	pi, err := os.Stat(path)
	return err == nil && os.SameFile(fi, pi)
}

// Record writes one line, whole or not at all: a write cut short (the
// disk full) is undone, so the chain stays intact. Lines are not
// buffered: once Record returns, the line is in the file (the kernel's
// page cache).
func (w *Writer) Record(e Event) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.reserved -= e.reserved
	if len(e.Error) > ErrorMax {
		cut := ErrorMax
		for cut > 0 && !utf8.RuneStart(e.Error[cut]) {
			cut--
		}
		e.Error = e.Error[:cut] + " [cut]"
	}
	size := int64(-1)
	if w.file != nil {
		unlock, n, err := w.lock()
		if err != nil {
			return err
		}
		defer unlock()
		size = n
	}
	e.PrevSHA256 = w.prev
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	n, err := w.w.Write(append(b, '\n'))
	if err != nil {
		if w.file != nil {
			if n > 0 {
				w.file.Truncate(size) // else the next lock cuts the torn line
			}
			w.end = -1
			return unavailable(err)
		}
		return err
	}
	w.prev = lineHash(b)
	if w.file != nil {
		w.end = size + int64(n)
	}
	return nil
}

func lineHash(line []byte) string {
	sum := sha256.Sum256(line)
	return hex.EncodeToString(sum[:])
}

// lastLine reads the last complete line of f (size bytes), without its
// newline (nil when there is none), and the offset just after it: the
// end of the whole lines, size unless the file ends in a torn line.
func lastLine(f *os.File, size int64) (last []byte, whole int64, err error) {
	const chunk = 64 << 10
	var buf []byte // f's bytes from off to size
	nl := -1       // index in buf of the last newline
	for off := size; off > 0; {
		n := min(int64(chunk), off)
		off -= n
		b := make([]byte, n)
		if _, err := f.ReadAt(b, off); err != nil && err != io.EOF {
			return nil, 0, err
		}
		buf = append(b, buf...)
		if nl >= 0 {
			nl += int(n)
		} else {
			nl = bytes.LastIndexByte(buf, '\n')
			if nl < 0 {
				if off == 0 {
					return nil, 0, nil // one torn line, no whole one
				}
				continue
			}
		}
		// buf[nl] ends the last whole line; find where it starts.
		if i := bytes.LastIndexByte(buf[:nl], '\n'); i >= 0 {
			return buf[i+1 : nl], off + int64(nl) + 1, nil
		}
		if off == 0 {
			return buf[:nl], int64(nl) + 1, nil
		}
	}
	return nil, 0, nil
}

// Verify checks the hash chain of an audit log. It returns nil when every
// line's prev_sha256 is the hash of the line before it, else an error
// naming the first line where the chain breaks.
func Verify(r io.Reader) (lines int, err error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 64<<20)
	prev := ""
	for sc.Scan() {
		lines++
		line := sc.Bytes()
		var e struct {
			Prev *string `json:"prev_sha256"`
		}
		if err := json.Unmarshal(line, &e); err != nil {
			return lines, fmt.Errorf("line %d: not a JSON audit record", lines)
		}
		if e.Prev == nil {
			return lines, fmt.Errorf("line %d: no prev_sha256", lines)
		}
		if *e.Prev != prev {
			if lines == 1 {
				return lines, fmt.Errorf("line 1: prev_sha256 should be empty: lines before it were removed")
			}
			return lines, fmt.Errorf("line %d: prev_sha256 does not match line %d: a line was changed, removed or inserted", lines, lines-1)
		}
		prev = lineHash(line)
	}
	if err := sc.Err(); err != nil {
		return lines, fmt.Errorf("line %d: %w", lines+1, err)
	}
	return lines, nil
}

// Close closes the file (not stderr).
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closer != nil {
		if f, ok := w.closer.(*os.File); ok {
			f.Sync()
		}
		return w.closer.Close()
	}
	return nil
}

// Discard drops every event (--audit-log off).
type Discard struct{}

func (Discard) Begin(e Event) (Event, error) { return e, nil }
func (Discard) Record(Event) error           { return nil }
func (Discard) Close() error                 { return nil }
