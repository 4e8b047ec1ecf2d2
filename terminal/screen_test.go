package terminal

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

func render(cols, rows int, out string) string {
	s := NewScreen(cols, rows)
	defer s.Close()
	s.Write([]byte(out))
	return s.Snapshot().Text(nil)
}

func TestScreenText(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, out, want string
	}{
		{"a prompt: the cursor after it, blank rows below left out",
			"$ echo hi\r\nhi\r\n$ ", "$ echo hi\nhi\n$ █\n[screen 20x5, cursor at row 3, col 3]"},
		{"the cursor on a character",
			"hello\x1b[1;2H", "hello\n[screen 20x5, cursor at row 1, col 2 on \"e\"]"},
		{"a blank screen", "", "█\n[screen 20x5, cursor at row 1, col 1]"},
		{"a hidden cursor: no mark",
			"\x1b[?25ltop - 10:00\r\n\r\n  PID USER", "top - 10:00\n\n  PID USER\n[screen 20x5, cursor hidden]"},
		{"cursor addressing and erasing",
			"xxxxx\r\nyyyyy\x1b[2J\x1b[3;4Habc\x1b[1;1H", "█\n\n   abc\n[screen 20x5, cursor at row 1, col 1]"},
		{"a row cut at the width, the rest wrapped",
			"0123456789012345678901234", "01234567890123456789\n01234█\n[screen 20x5, cursor at row 2, col 6]"},
		{"wide characters take two cells",
			"日本語 ok\x1b[1;3H", "日本語 ok\n[screen 20x5, cursor at row 1, col 3 on \"本\"]"},
		{"a wide character's cells, one written over",
			"日本語\x1b[1;3Hé", "日é█語\n[screen 20x5, cursor at row 1, col 4]"},
		{"colours and styles are dropped",
			"\x1b[1;31mred\x1b[0m plain", "red plain█\n[screen 20x5, cursor at row 1, col 10]"},
		{"the alternate screen, and back",
			"$ vim\r\n\x1b[?1049h\x1b[H\x1b[2Jfull screen", "full screen█\n[screen 20x5, cursor at row 1, col 12]"},
		{"back from the alternate screen",
			"$ vim\r\n\x1b[?1049h\x1b[H\x1b[2Jfull screen\x1b[?1049l$ ", "$ vim\n$ █\n[screen 20x5, cursor at row 2, col 3]"},
		{"the bottom row",
			"\x1b[5;1H:wq", "\n\n\n\n:wq█\n[screen 20x5, cursor at row 5, col 4]"},
	} {
		if got := render(20, 5, tc.out); got != tc.want {
			t.Errorf("%s:\n got %q\nwant %q", tc.name, got, tc.want)
		}
	}
}

// The screen's rows go through the mask; the cursor's row too, unmarked
// where masking changes it.
func TestScreenMasked(t *testing.T) {
	t.Parallel()
	mask := func(s string) string { return strings.ReplaceAll(s, "/srv/host/ws", "/mnt/user-data/workspace") }
	s := NewScreen(40, 5)
	defer s.Close()
	s.Write([]byte("cd /srv/host/ws\r\n/srv/host/ws $ "))
	want := "cd /mnt/user-data/workspace\n/mnt/user-data/workspace $\n[screen 40x5, cursor at row 2, col 16]"
	if got := s.Snapshot().Text(mask); got != want {
		t.Fatalf("got %q\nwant %q", got, want)
	}
	s.Write([]byte("\x1b[2;1H"))
	want = "cd /mnt/user-data/workspace\n/mnt/user-data/workspace $\n[screen 40x5, cursor at row 2, col 1 on \"/\"]"
	if got := s.Snapshot().Text(mask); got != want {
		t.Fatalf("got %q\nwant %q", got, want)
	}
}

// A program's queries (device attributes, the cursor's position) do not
// block the screen: their answers are dropped.
func TestScreenQueries(t *testing.T) {
	t.Parallel()
	s := NewScreen(20, 5)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 100 {
			s.Write([]byte("\x1b[c\x1b[>c\x1b[6n\x1b[?1$p\x1b]10;?\x07"))
		}
		s.Write([]byte("done"))
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the screen blocked on a query's answer")
	}
	if got := s.Snapshot().Text(nil); got != "done█\n[screen 20x5, cursor at row 1, col 5]" {
		t.Fatalf("%q", got)
	}
	s.Close()
}

// The cursor-key mode follows the program: arrows are SS3 while it set
// DECCKM (vim, less), CSI otherwise.
func TestScreenKeys(t *testing.T) {
	t.Parallel()
	s := NewScreen(20, 5)
	defer s.Close()
	for _, step := range []struct{ out, want string }{
		{"", "\x1b[A"},
		{"\x1b[?1h\x1b=", "\x1bOA"},
		{"\x1b[?1l", "\x1b[A"},
		{"\x1b[?1h", "\x1bOA"},
		{"\x1bc", "\x1b[A"}, // a reset
	} {
		s.Write([]byte(step.out))
		if got, err := s.Keys("<Up>"); err != nil || string(got) != step.want {
			t.Fatalf("after %q: %q %v, want %q", step.out, got, err, step.want)
		}
	}
}

func TestScreenResize(t *testing.T) {
	t.Parallel()
	s := NewScreen(20, 5)
	defer s.Close()
	s.Write([]byte("hello"))
	s.Resize(30, 6)
	if c, r := s.Size(); c != 30 || r != 6 {
		t.Fatalf("%dx%d", c, r)
	}
	s.Write([]byte("\x1b[6;25Hend"))
	if got := s.Snapshot().Text(nil); got != "hello\n\n\n\n\n                        end█\n[screen 30x6, cursor at row 6, col 28]" {
		t.Fatalf("%q", got)
	}
}

// A real program's output through a real terminal is drawn as the
// terminal draws it: what vim, top and python print is in the e2e tests;
// here a long output scrolls, and the last rows are shown.
func TestScreenScrolls(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	for i := 1; i <= 100; i++ {
		fmt.Fprintf(&out, "line %d\r\n", i)
	}
	if got := render(20, 5, out.String()); got != "line 97\nline 98\nline 99\nline 100\n█\n[screen 20x5, cursor at row 5, col 1]" {
		t.Fatalf("%q", got)
	}
}

func TestScreensBounded(t *testing.T) {
	t.Parallel()
	c := NewScreens(3, 1000)
	use := func(key string, cols, rows int, out string) *Term {
		t.Helper()
		term, release := c.Open(key, cols, rows)
		defer release()
		term.Screen.Write([]byte(out))
		term.Next += int64(len(out))
		return term
	}
	a := use("a", 10, 10, "a")
	use("b", 10, 10, "b")
	use("c", 10, 10, "c")
	if c.Len() != 3 {
		t.Fatalf("%d screens", c.Len())
	}
	// The same key: the same screen, drawn on further.
	if term := use("a", 10, 10, "A"); term != a || term.Next != 2 || !strings.HasPrefix(term.Screen.Snapshot().Text(nil), "aA█") {
		t.Fatalf("a again: %+v", term)
	}
	use("d", 10, 10, "d") // over three: b (least recently used) goes
	if c.Len() != 3 {
		t.Fatalf("%d screens", c.Len())
	}
	if term := use("b", 10, 10, ""); term.Next != 0 {
		t.Fatalf("b was kept: %+v", term)
	}
	// Over the cells: one screen of 40x30 leaves only itself.
	use("big", 40, 30, "x")
	if c.Len() != 1 {
		t.Fatalf("%d screens after a big one", c.Len())
	}
	// A resize counts.
	term, release := c.Open("big", 40, 30)
	term.Screen.Resize(10, 10)
	release()
	use("e", 10, 10, "")
	if c.Len() != 2 {
		t.Fatalf("%d screens after a resize", c.Len())
	}
	// No cache: a new screen each time.
	var none *Screens
	term, release = none.Open("a", 10, 10)
	term.Screen.Write([]byte("x"))
	release()
	if term, release = none.Open("a", 10, 10); term.Next != 0 || !strings.HasPrefix(term.Screen.Snapshot().Text(nil), "█") {
		t.Fatalf("a nil cache kept %+v", term)
	}
	release()
}

// Concurrent users of one cache: each key's screen is held by one at a
// time, evictions never close a screen in use.
func TestScreensConcurrent(t *testing.T) {
	t.Parallel()
	c := NewScreens(2, 1000)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 50 {
				key := fmt.Sprint((g + i) % 4)
				term, release := c.Open(key, 10, 5)
				term.Next++
				term.Screen.Write([]byte("x"))
				if !strings.Contains(term.Screen.Snapshot().Text(nil), "x") {
					t.Errorf("a screen in use was closed")
				}
				release()
			}
		})
	}
	wg.Wait()
	if c.Len() > 2 {
		t.Fatalf("%d screens", c.Len())
	}
}
