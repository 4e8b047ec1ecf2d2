package sandbox_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

func TestPruneSaved(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	files := []sandbox.Saved{
		{Name: "c", Size: 30, ModTime: at(3)},
		{Name: "a", Size: 10, ModTime: at(1)},
		{Name: "b2", Size: 20, ModTime: at(2)},
		{Name: "b1", Size: 20, ModTime: at(2)},
		{Name: "keep", Size: 50, ModTime: at(0), Keep: true},
	}
	for _, c := range []struct {
		files int
		bytes int64
		want  string
	}{
		{0, 0, ""},
		{5, 130, ""},
		{4, 0, "a"},
		{0, 129, "a"},
		{0, 110, "a b1"},
		{2, 0, "a b1 b2"},
		{0, 10, "a b1 b2 c"}, // as near as the kept file allows
		{1, 1000, "a b1 b2 c"},
	} {
		var got []string
		for _, f := range sandbox.PruneSaved(files, c.files, c.bytes) {
			got = append(got, f.Name)
		}
		if strings.Join(got, " ") != c.want {
			t.Errorf("at most %d files, %d bytes: %v, want %q", c.files, c.bytes, got, c.want)
		}
	}
	for name, want := range map[string]bool{"j1.log": true, "j10.log": true, "j0.log": false, "j01.log": false, "j.log": false, "j1.txt": false, "x1.log": false, "j1000000000.log": false} {
		if _, ok := sandbox.JobLogNumber(name); ok != want {
			t.Errorf("JobLogNumber(%q): %v", name, ok)
		}
	}
}
