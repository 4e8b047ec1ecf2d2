package terminal

import (
	"fmt"
	"io"
	"strings"

	"github.com/charmbracelet/x/ansi"
	"github.com/charmbracelet/x/vt"
)

// Cursor marks the cursor's cell in a rendered screen where that cell is
// blank — where typing goes after text: a prompt, the end of a line being
// written. A block stands out of any program's text, takes one cell as
// the cursor does and says "here" without a legend. On a character the
// cursor is not drawn: the screen's text stays the program's own, to be
// read, searched and copied as it is, and the line under the screen names
// the character and where it is (Snapshot.Text).
const Cursor = "█"

// Screen is a terminal's screen, drawn by the bytes a program wrote to
// the terminal. It is not safe for concurrent use.
type Screen struct {
	emu       *vt.Emulator
	appCursor bool // DECCKM: the program asked for application cursor keys
	drained   chan struct{}
}

// NewScreen makes a blank screen of cols × rows cells.
func NewScreen(cols, rows int) *Screen {
	s := &Screen{emu: vt.NewEmulator(cols, rows), drained: make(chan struct{})}
	// What the emulator answers a program's queries (device attributes,
	// the cursor's position) goes to a pipe that blocks it until read:
	// nothing here types the answers back (a screen rebuilt from old
	// output would answer old questions), so they are read and dropped.
	go func() {
		defer close(s.drained)
		io.Copy(io.Discard, s.emu)
	}()
	// No scrollback: the screen is what is shown; the job's output keeps
	// every line.
	s.emu.SetScrollbackSize(1)
	s.emu.SetCallbacks(vt.Callbacks{
		EnableMode: func(m ansi.Mode) {
			if m == ansi.ModeCursorKeys {
				s.appCursor = true
			}
		},
		DisableMode: func(m ansi.Mode) {
			if m == ansi.ModeCursorKeys {
				s.appCursor = false
			}
		},
	})
	return s
}

// Write draws p, bytes the program wrote, on the screen.
func (s *Screen) Write(p []byte) { s.emu.Write(p) }

// Resize sets the screen's size, as the terminal's was set; the program
// redraws what it shows (it got SIGWINCH).
func (s *Screen) Resize(cols, rows int) {
	if cols != s.emu.Width() || rows != s.emu.Height() {
		s.emu.Resize(cols, rows)
	}
}

// Size is the screen's size.
func (s *Screen) Size() (cols, rows int) { return s.emu.Width(), s.emu.Height() }

// Keys is Keys in the screen's cursor-key mode.
func (s *Screen) Keys(input string) ([]byte, error) { return Keys(input, s.appCursor) }

// Close frees the screen.
func (s *Screen) Close() {
	// The answers' pipe is closed from its writing end: the drain ends
	// (vt's own Close sets a flag its Read reads unguarded, a data race
	// with the drain).
	if c, ok := s.emu.InputPipe().(io.Closer); ok {
		c.Close()
		<-s.drained
	}
}

// Snapshot is what a screen shows.
type Snapshot struct {
	Cols, Rows int
	// Cells is each row's cells, left to right: the character each shows
	// (" " for a blank one); a wide character's second cell is "".
	Cells [][]string
	// The cursor's cell, from 0; Hidden: the program hid it.
	Row, Col int
	Hidden   bool
}

// Snapshot is what the screen shows now.
func (s *Screen) Snapshot() Snapshot {
	cols, rows := s.Size()
	snap := Snapshot{Cols: cols, Rows: rows, Cells: make([][]string, rows), Hidden: s.emu.CursorHidden()}
	for y := range rows {
		row := make([]string, cols)
		for x := 0; x < cols; x++ {
			c := s.emu.CellAt(x, y)
			if c == nil || c.Content == "" {
				row[x] = " "
				continue
			}
			row[x] = c.Content
			for w := 1; w < c.Width && x+1 < cols; w++ {
				x++
				row[x] = "" // a wide character's second cell
			}
		}
		snap.Cells[y] = row
	}
	p := s.emu.CursorPosition()
	snap.Row, snap.Col = min(max(p.Y, 0), rows-1), min(max(p.X, 0), cols-1)
	return snap
}

// Text renders the snapshot for an agent to read: each row as a line
// (trailing blanks cut; the blank rows at the bottom left out, but the
// cursor's), the cursor's cell shown as Cursor where it is blank, then
// one line saying the screen's size and where the cursor is — "[screen
// 80x24, cursor at row 3, col 7]", "… col 7 on "x"]" where it is on a
// character, "[screen 80x24, cursor hidden]". Rows and columns count from
// 1. Every row goes through mask (nil: none); where masking changes the
// cursor's row, the row is shown masked without the mark (the line under
// it still says where the cursor is).
func (snap Snapshot) Text(mask func(string) string) string {
	if mask == nil {
		mask = func(s string) string { return s }
	}
	last := -1 // the last row shown
	for y, row := range snap.Cells {
		if strings.TrimRight(strings.Join(row, ""), " ") != "" {
			last = y
		}
	}
	if !snap.Hidden {
		last = max(last, snap.Row)
	}
	var b strings.Builder
	under := ""
	for y := 0; y <= last; y++ {
		row := snap.Cells[y]
		line := strings.TrimRight(strings.Join(row, ""), " ")
		if snap.Hidden || y != snap.Row {
			b.WriteString(mask(line))
			b.WriteByte('\n')
			continue
		}
		if c := row[snap.Col]; c != " " && c != "" {
			under = c
		}
		if under != "" || mask(line) != line {
			b.WriteString(mask(line))
			b.WriteByte('\n')
			continue
		}
		marked := make([]string, len(row))
		copy(marked, row)
		marked[snap.Col] = Cursor
		b.WriteString(strings.TrimRight(strings.Join(marked, ""), " "))
		b.WriteByte('\n')
	}
	switch {
	case snap.Hidden:
		fmt.Fprintf(&b, "[screen %dx%d, cursor hidden]", snap.Cols, snap.Rows)
	case under != "":
		fmt.Fprintf(&b, "[screen %dx%d, cursor at row %d, col %d on %q]", snap.Cols, snap.Rows, snap.Row+1, snap.Col+1, mask(under))
	default:
		fmt.Fprintf(&b, "[screen %dx%d, cursor at row %d, col %d]", snap.Cols, snap.Rows, snap.Row+1, snap.Col+1)
	}
	return b.String()
}
