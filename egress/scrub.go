package egress

import (
	"bytes"
	"io"
	"net/http"
	"strings"

	"github.com/sandbox-mcp/sandbox-mcp/masking"
)

// hiddenMark is what the sandbox gets in place of an inject value an
// upstream sent back: the mark the server's masker puts in its place in
// what the agent sees, so that one secret reads the same everywhere.
const hiddenMark = masking.SecretMask

// secretForms are the spellings of the inject values scrubbed from what
// an upstream sends the sandbox, longest first: the server's masker's
// (masking.SecretForms), so that one secret reads the same everywhere.
func secretForms(secrets []string) []string { return masking.SecretForms(secrets...) }

// scrubHeader replaces each value of h that holds a secret form with
// hiddenMark, and drops a field whose name holds one, in any case (names
// reach the sandbox in their canonical case: X-S3cret-T0ken).
func scrubHeader(h http.Header, forms []string) {
	for k, vs := range h {
		if containsAnyFold(k, forms) {
			delete(h, k)
			continue
		}
		for i, v := range vs {
			if containsAny(v, forms) {
				vs[i] = hiddenMark
			}
		}
	}
}

func containsAny(s string, forms []string) bool {
	for _, f := range forms {
		if strings.Contains(s, f) {
			return true
		}
	}
	return false
}

func containsAnyFold(s string, forms []string) bool {
	s = strings.ToLower(s)
	for _, f := range forms {
		if strings.Contains(s, strings.ToLower(f)) {
			return true
		}
	}
	return false
}

// scrubWriter is the sandbox's side of a response from an inject host:
// the headers of each response it writes, informational ones (103 Early
// Hints) included, are scrubbed as they are sent. Trailers are scrubbed
// by the handler once the body is done (they are sent after it returns).
type scrubWriter struct {
	http.ResponseWriter
	forms []string
}

func (w scrubWriter) WriteHeader(code int) {
	scrubHeader(w.Header(), w.forms)
	w.ResponseWriter.WriteHeader(code)
}

func (w scrubWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// scrubber replaces every secret form in a stream with mark, as
// strings.NewReplacer would in the whole stream: at the first place where
// a form starts, the longest form there. It holds back only the bytes at
// the end of what it has read that could still begin a form (fewer than
// the longest form), so it needs bounded memory, and a stream that pauses
// (server-sent events) is passed on as it comes unless it pauses in what
// looks like the start of a secret.
type scrubber struct {
	src   io.ReadCloser
	forms [][]byte // longest first
	mark  []byte

	work []byte // what was read: work[keep:] is held, not passed on yet
	keep int
	out  []byte // scrubbed, ready for Read: in work, or in buf
	buf  []byte // out's storage when a form was replaced
	err  error  // src's, once seen
}

// scrubChunk is how much the scrubber reads from its source at a time.
const scrubChunk = 32 << 10

func newScrubber(src io.ReadCloser, forms []string, mark string) *scrubber {
	s := &scrubber{src: src, mark: []byte(mark)}
	longest := 0
	for _, f := range forms {
		s.forms = append(s.forms, []byte(f))
		longest = max(longest, len(f))
	}
	s.work = make([]byte, 0, longest+scrubChunk)
	return s
}

func (s *scrubber) Read(p []byte) (int, error) {
	for len(s.out) == 0 {
		if s.err != nil {
			return 0, s.err
		}
		// out is drained: the held bytes move to work's start, and
		// what is read follows them.
		held := copy(s.work[:cap(s.work)], s.work[s.keep:])
		n, err := s.src.Read(s.work[held:cap(s.work)])
		s.work = s.work[:held+n]
		s.err = err
		s.scrub(err != nil)
	}
	n := copy(p, s.out)
	s.out = s.out[n:]
	return n, nil
}

func (s *scrubber) Close() error { return s.src.Close() }

// scrub scans work and sets out to what can be passed on, and keep to
// where the bytes held back (a possible start of a form) begin. At the
// end of the stream (final) nothing is held.
func (s *scrubber) scrub(final bool) {
	data := s.work
	pos := 0 // data[:pos] is scanned
	s.buf = s.buf[:0]
	replaced := false
	for {
		hold := len(data)
		if !final {
			hold = s.partial(data, pos)
		}
		at, form := s.next(data, pos)
		if at < 0 || at >= hold {
			// Nothing to replace before what may still become a form
			// (a longer one, maybe, where a shorter one matched).
			s.keep = hold
			if replaced {
				s.buf = append(s.buf, data[pos:hold]...)
				s.out = s.buf
			} else {
				s.out = data[:hold]
			}
			return
		}
		s.buf = append(append(s.buf, data[pos:at]...), s.mark...)
		pos = at + len(form)
		replaced = true
	}
}

// next is where the first form found in data[pos:] starts, and the
// longest form there; -1 when there is none.
func (s *scrubber) next(data []byte, pos int) (int, []byte) {
	at, form := -1, []byte(nil)
	for _, f := range s.forms {
		end := len(data)
		if at >= 0 {
			end = min(end, at+len(f)) // only a start at or before at can win
		}
		i := bytes.Index(data[pos:end], f)
		if i < 0 {
			continue
		}
		if i += pos; at < 0 || i < at {
			at, form = i, f // forms are longest first: the longest at i wins ties
		}
	}
	return at, form
}

// partial is where the held tail of data begins: the first place at or
// after pos from which data's end is a proper beginning of a form (more
// bytes may complete it); len(data) when there is none.
func (s *scrubber) partial(data []byte, pos int) int {
	first := len(data)
	for _, f := range s.forms {
		from := max(pos, len(data)-len(f)+1)
		for from < first {
			i := bytes.IndexByte(data[from:first], f[0])
			if i < 0 {
				break
			}
			j := from + i
			if bytes.HasPrefix(f, data[j:]) {
				first = j
				break
			}
			from = j + 1
		}
	}
	return first
}
