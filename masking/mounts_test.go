package masking_test

import (
	"strings"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/masking"
)

const mountinfo = `22 1 254:0 / / rw,relatime - ext4 /dev/vda rw
43 22 0:39 / /srv/state rw,relatime - tmpfs tmpfs rw,size=4096k
44 22 254:0 /data/skills /opt/skills ro,relatime - ext4 /dev/vda rw
45 22 0:40 /vol/My\040Data /home/me/data rw - ext4 /dev/vdb rw
46 22 0:41 / /mnt/disk rw - ext4 /dev/vdc rw
47 22 0:42 /x /mnt/disk rw - ext4 /dev/vdd rw
bad line
`

func TestMountsRelative(t *testing.T) {
	t.Parallel()
	mt, err := masking.ParseMountInfo(strings.NewReader(mountinfo))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		host, want string // "" = no form to add
	}{
		// The state dir on a file system of its own: its thread dirs are
		// named from that file system's root.
		{"/srv/state/threads/t1/user-data/workspace", "/threads/t1/user-data/workspace"},
		{"/srv/state/threads/t1/user-data", "/threads/t1/user-data"},
		{"/srv/state", ""},         // the root of its file system: "/"
		{"/srv/state/threads", ""}, // one component: not specific
		{"/opt/skills", "/data/skills"},
		{"/opt/skills/team", "/data/skills/team"},
		{"/home/me/data/x", "/vol/My Data/x"},
		{"/usr/lib", ""},            // on "/" mounted at "/": itself
		{"/mnt/disk/a/b", "/x/a/b"}, // the last of two mounts at one point shows
		{"/srv/statex/a/b", ""},     // not under /srv/state
		{"relative/path", ""},       //
		{"/srv/state/../state/threads/t1/user-data", "/threads/t1/user-data"},
	} {
		got, ok := mt.Relative(c.host)
		if c.want == "" {
			if ok {
				t.Errorf("Relative(%q) = %q, want no form", c.host, got)
			}
			continue
		}
		if !ok || got != c.want {
			t.Errorf("Relative(%q) = %q, %v; want %q", c.host, got, ok, c.want)
		}
	}

	// Masked, also as mountinfo writes them.
	pairs := []masking.Pair{
		{Host: "/srv/state/threads/t1/user-data/workspace", Virtual: "/mnt/user-data/workspace"},
		{Host: "/srv/state", Virtual: "/sandbox-mcp-state"},
		{Host: "/home/me/data", Virtual: "/mnt/data"},
	}
	m := masking.New(append(pairs, mt.Pairs(pairs)...)...)
	in := "73 68 0:39 /threads/t1/user-data/workspace /mnt/user-data/workspace rw - tmpfs tmpfs rw\n" +
		`74 68 0:40 /vol/My\040Data /mnt/data rw - ext4 /dev/vdb rw` + "\n"
	want := "73 68 0:39 /mnt/user-data/workspace /mnt/user-data/workspace rw - tmpfs tmpfs rw\n" +
		"74 68 0:40 /mnt/data /mnt/data rw - ext4 /dev/vdb rw\n"
	if got := m.Mask(in); got != want {
		t.Errorf("Mask(mountinfo) =\n%s\nwant\n%s", got, want)
	}
}
