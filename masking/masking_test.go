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
		{"/srv/statefile", "/srv/statefile"}, // prefix confusion
		{"/srv/state-x/y", "/srv/state-x/y"}, // prefix confusion
		// Whatever comes before a host path, it is masked (SPEC §5):
		// glued text does not hide it.
		{"x/srv/state/a", "x/sandbox-mcp-state/a"},
		{"/tmp/srv/state/y", "/tmp/sandbox-mcp-state/y"},
		{"9/srv/state", "9/sandbox-mcp-state"},
		{"--dir=/srv/state/a", "--dir=/sandbox-mcp-state/a"},
		{"PATH=/bin:/srv/state/bin", "PATH=/bin:/sandbox-mcp-state/bin"},
		{`"/srv/state"`, `"/sandbox-mcp-state"`},
		{"file:///srv/state/a", "file:///sandbox-mcp-state/a"},
		{"é/srv/state", "é/sandbox-mcp-state"},
		{"a.b/srv/state", "a.b/sandbox-mcp-state"},
		// Separators spelled loosely.
		{"//srv//state/a", "//sandbox-mcp-state/a"},
		{"/srv/./state", "/sandbox-mcp-state"},
		{"/srv/.//./state/threads/t1/user-data/workspace/a", "/mnt/user-data/workspace/a"},
		{"/./srv/state", "/./sandbox-mcp-state"},
		{"/srv/.state", "/srv/.state"},
		{"/srv/..state", "/srv/..state"},
		{"x:/srv/state/a\n/srv/state/b", "x:/sandbox-mcp-state/a\n/sandbox-mcp-state/b"},
		{"/mnt/user-data/workspace/a", "/mnt/user-data/workspace/a"}, // already virtual
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
	for _, s := range []string{"/srv/state/x", "a /srv/state/threads/t1/user-data/workspace/b", "/srv/statex", "//srv/state", "/opt/skills.", "x/srv/state", "/srv/./state"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		once := m.Mask(s)
		if twice := m.Mask(once); twice != once {
			t.Fatalf("not idempotent: %q -> %q -> %q", s, once, twice)
		}
		// No host root survives where it ends a path component.
		for _, host := range []string{"/srv/state", "/opt/skills"} {
			for i := strings.Index(once, host); i >= 0; {
				end := i + len(host)
				whole := end == len(once) || strings.IndexByte("/ \n\t'\"():;,", once[end]) >= 0
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

// A host path with a space is masked also as /proc/self/mountinfo writes it.
func TestMaskMountinfoEscapes(t *testing.T) {
	t.Parallel()
	m := masking.New(masking.Pair{Host: "/home/me/My State", Virtual: "/sandbox-mcp-state"})
	for in, want := range map[string]string{
		"/home/me/My State/threads":                 "/sandbox-mcp-state/threads",
		`12 1 0:3 /home/me/My\040State/x /mnt/y rw`: "12 1 0:3 /sandbox-mcp-state/x /mnt/y rw",
	} {
		if got := m.Mask(in); got != want {
			t.Errorf("Mask(%q) = %q, want %q", in, got, want)
		}
	}
}

// Host paths that are the head or the tail of a virtual form (a mount of
// the host's /data at /mnt/data, of its /mnt): virtual paths are left
// alone, host paths masked, and masking twice changes nothing.
func TestMaskHostInsideVirtual(t *testing.T) {
	t.Parallel()
	m := masking.New(
		masking.Pair{Host: "/srv/state/threads/t1/user-data/workspace", Virtual: "/mnt/user-data/workspace"},
		masking.Pair{Host: "/data", Virtual: "/mnt/data"},
		masking.Pair{Host: "/mnt", Virtual: "/mnt/host"},
		masking.Pair{Host: "/workspace", Virtual: "/mnt/ws"},
	)
	for _, c := range []struct{ in, want string }{
		{"/mnt/data/x", "/mnt/data/x"},
		{"/data/x", "/mnt/data/x"},
		{"x/data/y", "x/mnt/data/y"},
		{"/mnt/user-data/workspace/a", "/mnt/user-data/workspace/a"},
		{"/mnt/other", "/mnt/host/other"},
		{"/mnt/ws", "/mnt/ws"},
		{"/workspace/a", "/mnt/ws/a"},
	} {
		got := m.Mask(c.in)
		if got != c.want {
			t.Errorf("Mask(%q) = %q, want %q", c.in, got, c.want)
		}
		if again := m.Mask(got); again != got {
			t.Errorf("Mask(Mask(%q)) = %q, want %q", c.in, again, got)
		}
	}
}

// A long line is masked whole in linear time, whatever it holds (runs of
// slashes or of "/./" included): a tool can mask it before cutting it.
func TestMaskLongLines(t *testing.T) {
	t.Parallel()
	m := masking.New(masking.Pair{Host: "/srv/state", Virtual: "/sandbox-mcp-state"})
	for _, unit := range []string{"/", "/.", "/srv", "/srv/", "x/srv/state ", "/srv/./"} {
		s := strings.Repeat(unit, (1<<20)/len(unit))
		out := m.Mask(s)
		if strings.Contains(out, "/srv/state") {
			t.Errorf("%q repeated: host path left in the output", unit)
		}
	}
}
