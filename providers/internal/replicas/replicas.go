// Package replicas is the docker and kubernetes providers' one table of
// the boxes they run (Table: in use here, last used, the places held for
// boxes being made, the idle ones) and one policy for their `replicas`
// cap (SPEC §16): the most sandboxes running at once, least recently used
// first to go, fair between tenants. Each provider gives its engine's
// acts: what runs (its containers; the Pods any replica made), how a box
// is made, and how one is taken (ask its supervisor whether a job runs,
// then remove it); this package decides which may go, in which order, and
// says when none may.
//
// The rules, and why:
//   - A sandbox in use never goes: a call in flight, or — asked by the
//     provider as it takes one — a command or job running under its
//     supervisor. Taking it would kill what the agent is waiting for or
//     left running (a dev server). A session merely open between calls
//     does not hold its sandbox: it may go, and the thread's next call
//     makes it again with its files (the cap would otherwise refuse every
//     new thread while a few idle sessions stay open).
//   - A tenant is a token's namespace of thread keys (Tenant). With T
//     tenants holding or wanting a running sandbox (those holding one,
//     and the new thread's), a tenant's share is ceil(limit/T), at least
//     1: the cap split evenly among those who use it now, rounded up so
//     that the shares together cover it.
//   - A new thread takes the least recently used sandbox of its own
//     tenant first: a tenant pays for its new threads with its own old
//     ones wherever it can, and costs no one else anything.
//   - Failing that, it takes the least recently used of a tenant holding
//     more than its share, and only while its own tenant holds less than
//     its share: one tenant's burst never pushes another below its share,
//     and a tenant that has its share already waits for its own.
//   - When nothing may go, the new thread's call fails with a FullError
//     (errors.Is ErrFull) naming the setting: its sandbox is not made,
//     and nothing of anyone else's is killed to make room.
package replicas

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"
)

// Box is a running sandbox as the cap sees it.
type Box struct {
	Name     string // container or Pod name
	ID       string // the engine's id of it (a container's id, a Pod's uid); "" for a place held (Table)
	Thread   string // its thread key
	LastUsed time.Time
	// InUse: a call in flight (here, or where the provider can tell:
	// another replica's fresh in-use mark). Never taken.
	InUse bool
}

// Tenant is the tenant of a thread key: the token namespace of a key
// namespaced by its token ("@<16 hex>/<id>", see sandbox.ValidThreadKey),
// "" for a plain key (the first configured token's threads, stdio's, a
// server without tokens).
func Tenant(key string) string {
	if ns, _, ok := strings.Cut(key, "/"); ok {
		return ns
	}
	return ""
}

// ErrFull: no running sandbox may go to make room for a new one.
var ErrFull = errors.New("replicas reached")

// FullError says that the cap is reached and nothing may go; Setting
// names it (docker.replicas, kubernetes.replicas). It is a tool error the
// agent reads.
type FullError struct {
	Setting string
	Limit   int
	Share   int // the new thread's tenant's share at the time
}

func (e *FullError) Error() string {
	return fmt.Sprintf("%s (%d) reached: no running sandbox may go (each has a call in flight or a job running, or belongs to another token holding no more than its share of %d); try again later, end a session or a job, or raise %s",
		e.Setting, e.Limit, e.Share, e.Setting)
}

// Is makes errors.Is(err, ErrFull) true.
func (e *FullError) Is(target error) bool { return target == ErrFull }

// MakeRoom takes sandboxes of running, one at a time in the order of the
// rules above, until fewer than limit run, so that thread's may start. take
// tries to take one (it may refuse: a job runs there, or it was used
// meanwhile) and reports whether it went; each is tried once. It returns
// nil when there is room (at once with limit < 0: no cap), else a
// *FullError for setting. running should not hold thread's own sandbox.
func MakeRoom(setting string, limit int, running []Box, thread string, take func(Box) bool) error {
	if limit < 0 {
		return nil
	}
	running = append([]Box(nil), running...)
	tried := map[string]bool{}
	for len(running) >= limit {
		i, share := pick(limit, running, thread, tried)
		if i < 0 {
			return &FullError{Setting: setting, Limit: limit, Share: share}
		}
		b := running[i]
		tried[b.Name] = true
		if take(b) {
			running = append(running[:i], running[i+1:]...)
		}
	}
	return nil
}

// pick is the index in running of the next sandbox to try for thread's
// room, or -1; and the share of thread's tenant.
func pick(limit int, running []Box, thread string, tried map[string]bool) (int, int) {
	me := Tenant(thread)
	held := map[string]int{me: 0}
	for _, b := range running {
		held[Tenant(b.Thread)]++
	}
	share := max(1, (limit+len(held)-1)/len(held))
	order := make([]int, len(running))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return running[order[a]].LastUsed.Before(running[order[b]].LastUsed) })
	other := -1
	for _, i := range order {
		b := running[i]
		if b.InUse || tried[b.Name] {
			continue
		}
		switch t := Tenant(b.Thread); {
		case t == me:
			return i, share // its own first
		case other < 0 && held[t] > share && held[me] < share:
			other = i
		}
	}
	return other, share
}
