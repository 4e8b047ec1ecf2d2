package audit

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"
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
	Args       map[string]any `json:"args"`
	// PrevSHA256 is the sha256 of the previous line's bytes (without its
	// newline); "" on the first line. The log is a hash chain: a changed,
	// removed or inserted line breaks it (see Verify).
	PrevSHA256 string `json:"prev_sha256"`
}

// Content is how file content appears in the log: never the bytes.
type Content struct {
	Size   int    `json:"size"`
	SHA256 string `json:"sha256"`
}

// Summarize returns the record of a piece of content.
func Summarize(s string) Content {
	sum := sha256.Sum256([]byte(s))
	return Content{Size: len(s), SHA256: hex.EncodeToString(sum[:])}
}

// Sink receives events.
type Sink interface {
	Record(Event) error
	Close() error
}

// Writer writes events as JSON lines, one write per line, in the order
// Record is called, each chained to the one before.
type Writer struct {
	mu     sync.Mutex
	w      io.Writer
	file   *os.File // when writing a file: several processes may share it
	closer io.Closer
	prev   string // sha256 of the last line written
	end    int64  // the file's size after our last line
}

// NewWriter writes to w.
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
	return &Writer{w: f, file: f, closer: f, end: -1}, nil
}

// Record writes one line. Lines are not buffered: once Record returns, the
// line is in the file (the kernel's page cache).
func (w *Writer) Record(e Event) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.file != nil {
		if err := syscall.Flock(int(w.file.Fd()), syscall.LOCK_EX); err != nil {
			return fmt.Errorf("audit log lock: %w", err)
		}
		defer syscall.Flock(int(w.file.Fd()), syscall.LOCK_UN)
		if fi, err := w.file.Stat(); err == nil && fi.Size() != w.end {
			// Another process wrote since (or this is our first line).
			last, err := lastLine(w.file, fi.Size())
			if err != nil {
				return fmt.Errorf("audit log: %w", err)
			}
			w.prev = ""
			if last != nil {
				w.prev = lineHash(last)
			}
		}
	}
	e.PrevSHA256 = w.prev
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	w.prev = lineHash(b)
	if _, err = w.w.Write(append(b, '\n')); err != nil {
		return err
	}
	if w.file != nil {
		if fi, err := w.file.Stat(); err == nil {
			w.end = fi.Size()
		}
	}
	return nil
}

func lineHash(line []byte) string {
	sum := sha256.Sum256(line)
	return hex.EncodeToString(sum[:])
}

// lastLine reads the last complete line of f (size bytes), without its
// newline; nil for an empty file.
func lastLine(f *os.File, size int64) ([]byte, error) {
	if size == 0 {
		return nil, nil
	}
	const chunk = 64 << 10
	var buf []byte
	for off := size; off > 0; {
		n := min(int64(chunk), off)
		off -= n
		b := make([]byte, n)
		if _, err := f.ReadAt(b, off); err != nil && err != io.EOF {
			return nil, err
		}
		buf = append(b, buf...)
		body := bytes.TrimSuffix(buf, []byte("\n"))
		if i := bytes.LastIndexByte(body, '\n'); i >= 0 {
			return body[i+1:], nil
		}
		if off == 0 {
			return body, nil
		}
	}
	return nil, nil
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

func (Discard) Record(Event) error { return nil }
func (Discard) Close() error       { return nil }
