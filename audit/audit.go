package audit

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
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
// Record is called.
type Writer struct {
	mu     sync.Mutex
	w      io.Writer
	closer io.Closer
}

// NewWriter writes to w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// OpenFile appends to the file at path, creating it (and its directory)
// with owner-only permissions.
func OpenFile(path string) (*Writer, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("audit log: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("audit log: %w", err)
	}
	return &Writer{w: f, closer: f}, nil
}

// Record writes one line. Lines are not buffered: once Record returns, the
// line is in the file (the kernel's page cache).
func (w *Writer) Record(e Event) error {
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	w.mu.Lock()
	defer w.mu.Unlock()
	_, err = w.w.Write(b)
	return err
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
