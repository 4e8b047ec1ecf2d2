package masking_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/masking"
)

func TestMask(t *testing.T) {
	t.Parallel()
	m := masking.New(
		masking.Pair{Host: "/srv/state/threads/t1/user-data/workspace", Virtual: "/mnt/user-data/workspace"},
		masking.Pair{Host: "/srv/state/threads/t1/user-data", Virtual: "/mnt/user-data"},
		masking.Pair{Host: "/srv/state", Virtual: "/sandbox-mcp-state"},
		masking.Pair{Host: "/", Virtual: "/ignored"},
	)
	tests := []struct{ in, want string }{
		{"/srv/state/threads/t1/user-data/workspace/a.txt", "/mnt/user-data/workspace/a.txt"},
		{"/srv/state/threads/t1/user-data/workspace", "/mnt/user-data/workspace"},
		{"cd /srv/state/threads/t1/user-data/outputs && ls", "cd /mnt/user-data/outputs && ls"},
		{"/srv/state/audit.jsonl", "/sandbox-mcp-state/audit.jsonl"},
		{"/srv/state/threads/t2/user-data/x", "/sandbox-mcp-state/threads/t2/user-data/x"},
		{"(/srv/state/threads/t1/user-data/workspace)", "(/mnt/user-data/workspace)"},
		{"'/srv/state'", "'/sandbox-mcp-state'"},
		{"saved in /srv/state.", "saved in /sandbox-mcp-state."},
		{"/srv/statefile", "/srv/statefile"},     // prefix confusion
		{"/srv/state-x/y", "/srv/state-x/y"},     // prefix confusion
		{"/tmp/srv/state/y", "/tmp/srv/state/y"}, // another path that contains it
		{"x:/srv/state/a\n/srv/state/b", "x:/sandbox-mcp-state/a\n/sandbox-mcp-state/b"},
		{"no paths here", "no paths here"},
		{"", ""},
		{"/srv/state/threads/t1/user-data/workspace/\u00e9", "/mnt/user-data/workspace/\u00e9"},
	}
	for _, tt := range tests {
		if got := m.Mask(tt.in); got != tt.want {
			t.Errorf("Mask(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestMaskSymlinkResolvedForm(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	real := filepath.Join(dir, "real")
	if err := os.Mkdir(real, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	m := masking.New(masking.Pair{Host: link, Virtual: "/mnt/user-data/workspace"})
	for _, in := range []string{link + "/f", real + "/f"} {
		if got := m.Mask(in); got != "/mnt/user-data/workspace/f" {
			t.Errorf("Mask(%q) = %q", in, got)
		}
	}
}

func FuzzMask(f *testing.F) {
	m := masking.New(
		masking.Pair{Host: "/srv/state/threads/t1/user-data/workspace", Virtual: "/mnt/user-data/workspace"},
		masking.Pair{Host: "/srv/state/threads/t1/user-data", Virtual: "/mnt/user-data"},
		masking.Pair{Host: "/srv/state", Virtual: "/sandbox-mcp-state"},
		masking.Pair{Host: "/opt/skills", Virtual: "/mnt/skills"},
	)
	for _, s := range []string{"/srv/state/x", "a /srv/state/threads/t1/user-data/workspace/b", "/srv/statex", "//srv/state", "/opt/skills."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		once := m.Mask(s)
		if twice := m.Mask(once); twice != once {
			t.Fatalf("not idempotent: %q -> %q -> %q", s, once, twice)
		}
		// No host root survives where it stands as a whole path.
		for _, host := range []string{"/srv/state", "/opt/skills"} {
			for i := strings.Index(once, host); i >= 0; {
				end := i + len(host)
				whole := (end == len(once) || strings.IndexByte("/ \n\t'\"():;,", once[end]) >= 0) && (i == 0 || strings.IndexByte(" \n\t'\"(=:", once[i-1]) >= 0)
				if whole {
					t.Fatalf("%q left in %q (from %q)", host, once, s)
				}
				j := strings.Index(once[i+1:], host)
				if j < 0 {
					break
				}
				i += 1 + j
			}
		}
	})
}
