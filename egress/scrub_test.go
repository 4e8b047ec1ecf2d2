package egress

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/masking"
)

// chunked hands out s a few bytes at a time, the sizes varying with seed:
// a secret is split across reads at every place over enough runs.
type chunked struct {
	s    string
	seed uint32
}

func (c *chunked) Read(p []byte) (int, error) {
	if c.s == "" {
		return 0, io.EOF
	}
	c.seed = c.seed*1103515245 + 12345
	n := min(len(p), len(c.s), int(c.seed>>16)%23+1)
	copy(p, c.s[:n])
	c.s = c.s[n:]
	return n, nil
}

// scrubbed is what the scrubber makes of text read in chunks.
func scrubbed(t testing.TB, text string, seed uint32, mark string, secrets ...string) string {
	t.Helper()
	b, err := io.ReadAll(newScrubber(io.NopCloser(&chunked{s: text, seed: seed}), secretForms(secrets), mark))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestScrubber(t *testing.T) {
	t.Parallel()
	const tok = "s3cret-t0ken"
	for _, tc := range []struct {
		name, text, want string
	}{
		{"nothing", "hello", "hello"},
		{"empty", "", ""},
		{"the value", "x Bearer " + tok + " y", "x [h] y"},
		{"a word of it alone", `{"token":"` + tok + `"}`, `{"token":"[h]"}`},
		{"a short word is left", "Bearer and more", "Bearer and more"},
		{"back to back", tok + tok + "Bearer " + tok, "[h][h][h]"},
		{"at the end", "abc" + tok, "abc[h]"},
		{"a beginning at the end", "abc s3cret-t0k", "abc s3cret-t0k"},
		{"the other secret", "k3y-value-42 k3y-value-4", "[h] k3y-value-4"},
	} {
		for seed := range uint32(50) {
			if got := scrubbed(t, tc.text, seed, "[h]", "Bearer "+tok, "k3y-value-42"); got != tc.want {
				t.Fatalf("%s (seed %d): %q, want %q", tc.name, seed, got, tc.want)
			}
		}
	}
}

// The scrubber hides what the server's masker hides, as the masker would
// in the whole text, however the text is cut into reads.
func FuzzScrubber(f *testing.F) {
	f.Add("hello Bearer s3cret-t0ken, or s3cret-t0ken alone", "Bearer s3cret-t0ken", uint32(1))
	f.Add("aaaaaaaaab aaaaaaaaaaab", "aaaaaaaaab aaaaaaaab", uint32(7))
	f.Add("token abcdefgh abcdefgh ijkl abcdefgh ij", "abcdefgh ijkl", uint32(3))
	f.Add("xyxyxyxyxyxyxyxyxyxyxyxy", "xyxyxyxyx", uint32(11))
	f.Fuzz(func(t *testing.T, text, secret string, seed uint32) {
		if secret == "" || !validValue(secret) {
			t.Skip()
		}
		secrets := []string{secret, "Bearer s3cret-t0ken"}
		want := (*masking.Masker)(nil).Hiding(secrets...).Mask(text)
		if got := scrubbed(t, text, seed, masking.SecretMask, secrets...); got != want {
			t.Errorf("scrubbed %q, the masker %q", got, want)
		}
	})
}

// A stream is passed on as it comes: only what could begin a secret waits
// for more.
func TestScrubberDoesNotHoldAStream(t *testing.T) {
	t.Parallel()
	pr, pw := io.Pipe()
	defer pw.Close()
	s := newScrubber(pr, secretForms([]string{"Bearer s3cret-t0ken"}), hiddenMark)
	got := make(chan string, 1)
	read := func() {
		b := make([]byte, 100)
		n, _ := s.Read(b)
		got <- string(b[:n])
	}
	go read()
	io.WriteString(pw, "data: one\n\n")
	select {
	case g := <-got:
		if g != "data: one\n\n" {
			t.Errorf("read %q", g)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("an event was held back")
	}
	go read()
	io.WriteString(pw, "data: Bear")
	select {
	case g := <-got:
		if g != "data: " {
			t.Errorf("read %q, want what cannot begin the secret", g)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("what cannot begin the secret was held back")
	}
	go read()
	select {
	case g := <-got:
		t.Fatalf("the beginning of a secret was passed on: %q", g)
	case <-time.After(100 * time.Millisecond):
	}
	io.WriteString(pw, "er s3cret-t0ken\n")
	if g := <-got; g != hiddenMark+"\n" {
		t.Errorf("read %q", g)
	}
}

// Its memory is bounded: a body of any size is read through a buffer of
// fixed size.
func TestScrubberBounded(t *testing.T) {
	t.Parallel()
	s := newScrubber(io.NopCloser(bytes.NewReader(bytes.Repeat([]byte("Bearer s3cret-t0ke"), 1<<16))), secretForms([]string{"Bearer s3cret-t0ken"}), hiddenMark)
	c := cap(s.work)
	n, err := io.Copy(io.Discard, s)
	if err != nil || n != 18<<16 {
		t.Fatalf("%d bytes, %v", n, err)
	}
	if cap(s.work) != c || cap(s.buf) > c {
		t.Errorf("buffers grew: work %d, buf %d, want %d at most", cap(s.work), cap(s.buf), c)
	}
}

func TestScrubHeader(t *testing.T) {
	t.Parallel()
	h := http.Header{
		"X-Echo":              {"Bearer s3cret-t0ken", "fine"},
		"Link":                {"</x>; token=s3cret-t0ken"},
		"X-S3cret-T0ken-Seen": {"yes"},
		"X-S3cret-t0ken":      {"yes"}, // a field name holding the secret
	}
	h["x-s3cret-t0ken"] = []string{"yes"}
	scrubHeader(h, secretForms([]string{"Bearer s3cret-t0ken"}))
	for k, vs := range h {
		if strings.Contains(strings.ToLower(k), "s3cret-t0ken") || strings.Contains(strings.Join(vs, ","), "s3cret-t0ken") {
			t.Errorf("%s: %q", k, vs)
		}
	}
	if h.Get("X-Echo") != hiddenMark || h.Values("X-Echo")[1] != "fine" {
		t.Errorf("X-Echo: %q", h.Values("X-Echo"))
	}
}
