package tools

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"path"
	"strings"
	"unicode/utf8"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// imageMaxBytes bounds an image sent back as content.
const imageMaxBytes = 10 << 20

// hashMaxBytes is the largest file whose sha256 and line count read_file
// reports (the largest an edit takes, so an expected_sha256 is usable);
// a larger file is read only as far as the text needs.
const hashMaxBytes = sandbox.EditMaxBytes

var imageTypes = map[string]string{
	".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".gif": "image/gif", ".webp": "image/webp",
}

func readFileTool() Tool {
	return newTool("read_file", readFileArgs{StartLine: 1}, readFile,
		mcp.WithDescription("Read a text file, whole or a range of lines. Images (png, jpeg, gif, webp) come back as "+
			"image content; other binary files, and text that is not UTF-8, are refused. Long output is cut with a note. The structured "+
			"result carries the whole file's sha256, lines and bytes; pass the sha256 as expected_sha256 to "+
			"write_file or str_replace to refuse an edit when the file changed since this read."),
		readOnly("Read file"),
		withIcon("file"),
		mcp.WithOutputSchema[fileFacts](),
	)
}

type readFileArgs struct {
	Path      string `json:"path" arg:"required" jsonschema_description:"File to read; relative paths are under /mnt/user-data/workspace."`
	StartLine int    `json:"start_line" arg:"minimum=1" jsonschema_description:"First line to return, 1-based (default 1)."`
	EndLine   int    `json:"end_line" arg:"minimum=1" jsonschema_description:"Last line to return, inclusive (default: the last line)."`
	WithHash  bool   `json:"with_hash" jsonschema_description:"Also end the text with a line [sha256: HEX] (the whole file's hash)."`
}

// fileFacts is read_file's structured content. For a file too large to
// read whole (over hashMaxBytes or the scan limit), SHA256 is "", Lines is
// -1 and Note says why.
type fileFacts struct {
	SHA256 string `json:"sha256" jsonschema_description:"The sha256 of the whole file (hex), also for a range; empty when the file is too large to hash (see note)."`
	Lines  int    `json:"lines" jsonschema_description:"The file's lines in all; -1 when not counted (see note); 0 for an image."`
	Bytes  int64  `json:"bytes" jsonschema_description:"The file's size."`
	Note   string `json:"note,omitempty"`
}

func readFile(ctx context.Context, env *Env, a readFileArgs) *Result {
	name, err := sandbox.Clean(a.Path)
	if err != nil {
		return fail(err)
	}
	start, end := a.StartLine, a.EndLine
	if end != 0 && end < start {
		return failf("end_line %d is before start_line %d", end, start)
	}

	limit := env.Limits.ReadFileOutputMaxChars
	// The whole file is read for its hash and line count only up to
	// hashMaxBytes (and the scan limit); past that, reading stops once the
	// text is complete, or at the scan limit.
	scanMax := env.Limits.ReadFileMaxScanBytes
	wholeMax := min(hashMaxBytes, positive(scanMax)) // the largest file read whole
	fsys := env.Sandbox.FS()
	_, image := imageTypes[strings.ToLower(path.Ext(name))]
	// A file that lives a round trip away (a Pod's) is digested where it
	// is, and then read only as far as the text needs. The digest comes
	// first: a hash taken before the read can only make an edit that
	// trusted it refuse, never vouch for content the agent was not shown.
	var digest *sandbox.Digest
	if dg, ok := fsys.(sandbox.Digester); ok && !image {
		d, err := dg.Digest(ctx, name, wholeMax)
		switch {
		case errors.Is(err, errors.ErrUnsupported):
		case err != nil:
			return fail(err)
		case d.Computed:
			digest = &d
		}
	}
	f, err := fsys.Open(ctx, name)
	if err != nil {
		return fail(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fail(sandbox.HostError(name, err))
	}
	if fi.IsDir() {
		return fail(&sandbox.PathError{Path: name, Err: sandbox.ErrIsDir})
	}
	h := sha256.New()
	var src io.Reader = io.TeeReader(f, h)
	if digest != nil {
		src = f // hashed already
	}
	// A small file gets a small buffer (bufio's minimum is 16 bytes; the
	// sniff needs sniffLen).
	br := bufio.NewReaderSize(src, int(min(max(fi.Size()+1, sniffLen), 64<<10)))
	sniff, _ := br.Peek(sniffLen)
	if mime, ok := imageTypes[strings.ToLower(path.Ext(name))]; ok && strings.HasPrefix(http.DetectContentType(sniff), "image/") {
		return readImage(br, h, name, mime, fi.Size())
	}
	if bytes.IndexByte(sniff, 0) >= 0 {
		return failf("binary file (%d bytes), not shown: %s", fi.Size(), name)
	}
	if digest != nil && !digest.UTF8 {
		return notUTF8(name, fi.Size(), sniff) // somewhere in the file, as a whole read would find
	}

	whole := digest != nil || fi.Size() <= wholeMax
	readAll := whole && digest == nil // read to the end for the hash and line count
	var b strings.Builder
	line, truncated := 0, false // line: how many lines have ended so far
	partial := false            // the last line read has no newline yet
	var scanned int64
	scanCut := false    // stopped at the scan limit
	var valid utf8Check // the text read is UTF-8
	eof := false
	for n := 0; ; n++ {
		if n%256 == 0 && ctx.Err() != nil {
			return failf("cancelled")
		}
		if !readAll && (truncated || (end != 0 && line >= end)) {
			break
		}
		if !whole && scanMax > 0 && scanned >= scanMax {
			scanCut = true
			break
		}
		chunk, err := br.ReadSlice('\n')
		scanned += int64(len(chunk))
		if !valid.write(chunk) {
			return notUTF8(name, fi.Size(), sniff)
		}
		if len(chunk) > 0 {
			partial = true
			inRange := line+1 >= start && (end == 0 || line+1 <= end)
			if inRange && !truncated {
				b.Write(chunk)
				if limit > 0 && b.Len() > limit*utf8.UTFMax { // more than limit characters
					truncated = true
				}
			}
		}
		if err == nil {
			line++
			partial = false
			continue
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue // the same line goes on
		}
		if err == io.EOF {
			eof = true
			break
		}
		return fail(sandbox.HostError(name, err))
	}
	if partial {
		line++
	}
	if eof && !valid.end() {
		return notUTF8(name, fi.Size(), sniff)
	}
	size, sum := fi.Size(), hex.EncodeToString(h.Sum(nil))
	if digest != nil {
		size, sum, line = digest.Size, digest.SHA256, digest.Lines
	}
	if whole && start > 1 && line < start {
		return failf("start_line %d is past the end of %s (%d lines)", start, name, line)
	}
	if scanCut && b.Len() == 0 {
		return failf("start_line %d not reached in the first %d bytes of %s (%d bytes in all), the most read_file reads; "+
			"use bash (e.g. tail -c, or sed -n on a smaller part) for such a file", start, scanMax, name, fi.Size())
	}
	facts := fileFacts{SHA256: sum, Lines: line, Bytes: size}
	if !whole {
		// Not read whole: see hashMaxBytes.
		facts.SHA256, facts.Lines = "", -1
		facts.Note = fmt.Sprintf("sha256 and lines not computed: the file is over %d bytes", wholeMax)
	}
	raw := []byte(b.String())
	if truncated || scanCut {
		// The read stopped inside a long line: a host path cut there
		// would not be masked.
		raw = trimCutWord(raw, false)
		if i := lastRuneStart(raw); i < len(raw) && !utf8.FullRune(raw[i:]) {
			raw = raw[:i] // a character cut by the stop
		}
	}
	out := validText(raw)
	if env.Mask != nil {
		out = env.Mask(out) // before the cut: no host path is cut in half
	}
	r := &Result{}
	if cut, ok := cutHead(out, limit); ok || truncated {
		out = cut + fmt.Sprintf("\n[... truncated: showing the first %d characters; use start_line and end_line to read the rest of %s]", limit, name)
		r.Truncated = true
	} else if scanCut {
		out += fmt.Sprintf("\n[... stopped after reading %d bytes of %s (%d bytes in all), the most read_file reads; use bash for the rest]", scanMax, name, fi.Size())
		r.Truncated = true
	}
	if a.WithHash {
		if out != "" && !strings.HasSuffix(out, "\n") {
			out += "\n"
		}
		if facts.SHA256 != "" {
			out += "[sha256: " + facts.SHA256 + "]"
		} else {
			out += "[sha256: not computed: " + name + " is over " + fmt.Sprint(wholeMax) + " bytes]"
		}
	}
	r.CallToolResult = mcp.NewToolResultText(out)
	r.StructuredContent = facts
	return r
}

// notUTF8 refuses text that is not UTF-8 like a binary file (SPEC §6):
// never returned with bytes replaced.
// Bytes that are neither UTF-8 nor mostly printable (controls past
// binaryControls of the first sniffLen bytes: random bytes have about one
// in ten) are a binary file, not text in another encoding: no iconv hint.
func notUTF8(name string, size int64, sniff []byte) *Result {
	if controlHeavy(sniff) {
		return failf("binary file (%d bytes), not shown: %s", size, name)
	}
	return failf("not UTF-8 text: %s (%d bytes); convert it with bash to read it, e.g. iconv -f LATIN1 -t UTF-8 %s (file -i tells the encoding)", name, size, name)
}

// lastRuneStart is where the last character of b starts (len(b) for none).
func lastRuneStart(b []byte) int {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			return i
		}
	}
	return len(b)
}

// utf8Check checks that a stream, written in pieces that may split a
// character, is UTF-8.
type utf8Check struct {
	pend []byte // the start of a character split by the last piece
	bad  bool
}

// write checks one more piece; false once the stream is not UTF-8.
func (u *utf8Check) write(p []byte) bool {
	if u.bad {
		return false
	}
	if len(u.pend) > 0 {
		p = append(u.pend, p...)
		u.pend = nil
	}
	// A character the piece ends in the middle of waits for the next one.
	if i := lastRuneStart(p); i < len(p) && !utf8.FullRune(p[i:]) {
		u.pend = append([]byte(nil), p[i:]...)
		p = p[:i]
	}
	u.bad = !utf8.Valid(p)
	return !u.bad
}

// end reports whether the whole stream was UTF-8.
func (u *utf8Check) end() bool { return !u.bad && len(u.pend) == 0 }

// positive is n, or the largest int64 when n is 0 or less (no limit).
func positive(n int64) int64 {
	if n <= 0 {
		return 1<<63 - 1
	}
	return n
}

func readImage(r io.Reader, h hash.Hash, name, mime string, size int64) *Result {
	if size > imageMaxBytes {
		return failf("image too large to show (%d bytes, limit %d): %s", size, imageMaxBytes, name)
	}
	data, err := io.ReadAll(io.LimitReader(r, imageMaxBytes+1))
	if err != nil {
		return fail(sandbox.HostError(name, err))
	}
	return &Result{CallToolResult: &mcp.CallToolResult{
		Content:           []mcp.Content{mcp.NewImageContent(base64.StdEncoding.EncodeToString(data), mime)},
		StructuredContent: fileFacts{SHA256: hex.EncodeToString(h.Sum(nil)), Bytes: int64(len(data))},
	}}
}

// binaryControls is the share of control bytes (other than tab, newlines,
// form feed, backspace and escape) past which bytes are not text.
const binaryControls = 0.05

// controlHeavy: more than binaryControls of b are control bytes.
func controlHeavy(b []byte) bool {
	n := 0
	for _, c := range b {
		if (c < 0x20 && c != '\t' && c != '\n' && c != '\r' && c != '\f' && c != '\b' && c != 0x1b) || c == 0x7f {
			n++
		}
	}
	return len(b) > 0 && float64(n) > binaryControls*float64(len(b))
}
