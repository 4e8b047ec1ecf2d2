package replicas

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

const (
	tokB = "@0123456789abcdef"
	tokC = "@fedcba9876543210"
)

func TestTenant(t *testing.T) {
	t.Parallel()
	for key, want := range map[string]string{"a1": "", "default": "", tokB + "/b1": tokB, tokC + "/x.y": tokC} {
		if got := Tenant(key); got != want {
			t.Errorf("Tenant(%q) = %q, want %q", key, got, want)
		}
	}
}

// box is a running sandbox of thread, used age ago; busy ones are in use.
func box(thread string, age int, busy bool) Box {
	return Box{Name: "c-" + thread, Thread: thread, LastUsed: time.Unix(1000-int64(age), 0), InUse: busy}
}

func TestMakeRoom(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		limit   int
		running []Box
		thread  string
		jobs    []string // take refuses these (a job runs there)
		want    []string // taken, in order
		full    bool
	}{
		{name: "room", limit: 2, running: []Box{box("a1", 5, false)}, thread: "a2"},
		{name: "no cap", limit: -1, running: []Box{box("a1", 5, false), box("a2", 1, false)}, thread: "a3"},
		{name: "one tenant: least recently used", limit: 2, running: []Box{box("a1", 1, false), box("a2", 9, false)}, thread: "a3", want: []string{"c-a2"}},
		{name: "one tenant: in use never", limit: 2, running: []Box{box("a1", 1, false), box("a2", 9, true)}, thread: "a3", want: []string{"c-a1"}},
		{name: "one tenant: all in use", limit: 2, running: []Box{box("a1", 1, true), box("a2", 9, true)}, thread: "a3", full: true},
		{name: "one tenant: a job refuses, the next goes", limit: 2, running: []Box{box("a1", 1, false), box("a2", 9, false)}, thread: "a3", jobs: []string{"c-a2"}, want: []string{"c-a1"}},
		{name: "one tenant: every one runs a job", limit: 2, running: []Box{box("a1", 1, false), box("a2", 9, false)}, thread: "a3", jobs: []string{"c-a1", "c-a2"}, full: true},
		// The case: A within its share of 1 is never B's room.
		{name: "own idle first, though another's is older", limit: 2, running: []Box{box("a1", 9, false), box(tokB+"/b1", 1, false)}, thread: tokB + "/b2", want: []string{"c-" + tokB + "/b1"}},
		{name: "another within its share: full", limit: 2, running: []Box{box("a1", 9, false), box(tokB+"/b1", 1, true)}, thread: tokB + "/b2", full: true},
		{name: "another beyond its share gives one", limit: 2, running: []Box{box("a1", 9, false), box("a2", 1, false)}, thread: tokB + "/b1", want: []string{"c-a1"}},
		{name: "another beyond its share, but its oldest in use", limit: 2, running: []Box{box("a1", 9, true), box("a2", 1, false)}, thread: tokB + "/b1", want: []string{"c-a2"}},
		// limit 4, tenants A and B: share 2 each. B holds 2 (in use): B
		// has its share, A's 2 are within A's: nothing for B's third.
		{name: "a tenant at its share takes no one else's", limit: 4, running: []Box{box("a1", 9, false), box("a2", 8, false), box(tokB+"/b1", 1, true), box(tokB+"/b2", 1, true)}, thread: tokB + "/b3", full: true},
		// limit 10, three tenants: share 4. A holds 4 (in use), B 5, C 1:
		// B is beyond its share, but A has its share already.
		{name: "beyond-share tenant left alone when the taker has its share", limit: 10, running: append(append([]Box{box(tokC+"/c1", 1, false)},
			boxes("a", 4, true)...), boxes(tokB+"/b", 5, false)...), thread: "a9", full: true},
		// The same with C asking: C holds 1 < 4, B holds 5 > 4.
		{name: "beyond-share tenant gives to one below its share", limit: 10, running: append(append([]Box{box(tokC+"/c1", 1, true)},
			boxes("a", 4, true)...), boxes(tokB+"/b", 5, false)...), thread: tokC + "/c2", want: []string{"c-" + tokB + "/b0"}},
		// Already over the cap (adopted at start): room for one more.
		{name: "over the cap: several go", limit: 2, running: []Box{box("a1", 3, false), box("a2", 2, false), box("a3", 1, false)}, thread: "a4", want: []string{"c-a1", "c-a2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var taken []string
			err := MakeRoom("docker.replicas", tc.limit, tc.running, tc.thread, func(b Box) bool {
				if b.InUse {
					t.Fatalf("offered %s, in use", b.Name)
				}
				if slices.Contains(tc.jobs, b.Name) {
					return false
				}
				taken = append(taken, b.Name)
				return true
			})
			if tc.full {
				if !errors.Is(err, ErrFull) || !strings.Contains(err.Error(), "docker.replicas (") {
					t.Fatalf("err %v, want docker.replicas reached", err)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(taken, tc.want) {
				t.Fatalf("taken %q, want %q", taken, tc.want)
			}
		})
	}
}

// boxes are n sandboxes of threads prefix0..prefix<n-1>, the first the
// least recently used.
func boxes(prefix string, n int, busy bool) []Box {
	var out []Box
	for i := range n {
		out = append(out, box(prefix+string(rune('0'+i)), 100-i, busy))
	}
	return out
}
