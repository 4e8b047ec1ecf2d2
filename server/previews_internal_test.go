package server

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/tools"
)

// boxSandbox is a sandbox.Ports whose box the test names; it dials
// nothing.
type boxSandbox struct {
	sandbox.Sandbox
	mu  sync.Mutex
	box string
}

func (b *boxSandbox) Box(context.Context) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.box, nil
}

func (b *boxSandbox) DialPort(_ context.Context, box string, _ int) (net.Conn, error) {
	if cur, _ := b.Box(context.Background()); box != cur {
		return nil, sandbox.ErrBoxGone
	}
	return nil, sandbox.ErrPortRefused
}

func scopeOf(p *previews, tenant, thread string, sb sandbox.Sandbox) previewScope {
	return previewScope{p: p, thread: ThreadRef{ID: thread, Key: thread, Tenant: tenant}, sb: sb, base: "http://srv"}
}

func capOf(t *testing.T, u string) string {
	t.Helper()
	c, ok := strings.CutPrefix(u, "http://srv/preview/")
	c, slash := strings.CutSuffix(c, "/")
	if !ok || !slash {
		t.Fatalf("URL %q", u)
	}
	return c
}

func (p *previews) count() (caps, ports int) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return len(p.byCap), len(p.byPort)
}

func TestPreviewTables(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	p := newPreviews(slog.New(slog.DiscardHandler))
	defer p.closeAll()
	sb := &boxSandbox{box: "b1"}
	s := scopeOf(p, "tok", "t", sb)

	u, err := s.Open(ctx, 3000)
	if err != nil {
		t.Fatal(err)
	}
	c := capOf(t, u)
	if raw, err := base64.RawURLEncoding.DecodeString(c); err != nil || len(raw) != 32 {
		t.Errorf("capability %q: %d bytes, %v; want 256 random bits", c, len(raw), err)
	}
	if again, _ := s.Open(ctx, 3000); again != u {
		t.Errorf("again: %s, want %s", again, u)
	}
	if e := p.lookup(c); e == nil || e.key != (previewKey{"t", 3000}) || e.box != "b1" || e.tenant != "tok" {
		t.Fatalf("lookup: %+v", e)
	}
	for _, bad := range []string{c[:len(c)-1], c + "A", strings.ToUpper(c), "", c[1:] + c[:1]} {
		if bad != c && p.lookup(bad) != nil {
			t.Errorf("lookup(%q) found the preview of %q", bad, c)
		}
	}

	// Another box: the old capability ends, the port gets a new one.
	sb.mu.Lock()
	sb.box = "b2"
	sb.mu.Unlock()
	u2, _ := s.Open(ctx, 3000)
	if u2 == u || p.lookup(c) != nil {
		t.Errorf("in a new box: %s (was %s), old found: %v", u2, u, p.lookup(c) != nil)
	}
	if caps, ports := p.count(); caps != 1 || ports != 1 {
		t.Errorf("tables: %d capabilities, %d ports; want 1, 1", caps, ports)
	}

	// Its box ends under it: the dial says so and the preview goes.
	e := p.lookup(capOf(t, u2))
	sb.mu.Lock()
	sb.box = "b3"
	sb.mu.Unlock()
	if _, err := e.dial(ctx, "tcp", ""); !errors.Is(err, sandbox.ErrBoxGone) {
		t.Fatalf("dial: %v", err)
	}
	if caps, ports := p.count(); caps != 0 || ports != 0 || p.lookup(e.cap) != nil || e.ctx.Err() == nil {
		t.Errorf("after the box ended: %d capabilities, %d ports, ended %v", caps, ports, e.ctx.Err() != nil)
	}
	if err := s.Close(ctx, 3000); !errors.Is(err, tools.ErrNotExposed) {
		t.Errorf("close after the box ended: %v", err)
	}

	// The thread's cap.
	for port := 1; port <= previewsPerThread; port++ {
		if _, err := s.Open(ctx, port); err != nil {
			t.Fatalf("port %d: %v", port, err)
		}
	}
	_, err = s.Open(ctx, 9999)
	if !errors.Is(err, tools.ErrTooManyPorts) || !strings.Contains(err.Error(), fmt.Sprint(previewsPerThread)) {
		t.Errorf("past the thread's cap: %v", err)
	}
	// Another thread of the token has its own.
	if _, err := scopeOf(p, "tok", "u", sb).Open(ctx, 9999); err != nil {
		t.Errorf("another thread: %v", err)
	}
	if err := s.Close(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Open(ctx, 9999); err != nil {
		t.Errorf("after closing one: %v", err)
	}

	// A thread gone for good takes its previews.
	p.dropThread("t")
	if _, err := s.Open(ctx, 1); err != nil {
		t.Fatal(err)
	}
	p.mu.RLock()
	n := p.threads["t"]
	p.mu.RUnlock()
	if n != 1 {
		t.Errorf("thread t after dropThread and one open: %d previews", n)
	}
	if err := s.Close(ctx, 2); !errors.Is(err, tools.ErrNotExposed) {
		t.Errorf("a dropped preview closed: %v", err)
	}

	// Ports of a sandbox that has none.
	if _, err := scopeOf(p, "tok", "v", struct{ sandbox.Sandbox }{}).Open(ctx, 1); err == nil || err.Error() != "expose_port is not available with this provider" {
		t.Errorf("no sandbox.Ports: %v", err)
	}

	// The server's end ends them all, and no more are made.
	last := p.lookup(capOf(t, must(s.Open(ctx, 1))))
	p.closeAll()
	if p.lookup(last.cap) != nil || last.ctx.Err() == nil {
		t.Error("a preview outlived closeAll")
	}
	if _, err := s.Open(ctx, 5); err == nil {
		t.Error("opened after closeAll")
	}
}

func must(s string, err error) string {
	if err != nil {
		panic(err)
	}
	return s
}

// A token's previews in all its threads are capped: the least used goes,
// never another token's.
func TestPreviewTenantCap(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	p := newPreviews(slog.New(slog.DiscardHandler))
	defer p.closeAll()
	sb := &boxSandbox{box: "b"}
	other := p.lookup(capOf(t, must(scopeOf(p, "other", "x", sb).Open(ctx, 1))))
	var first, second *preview
	for i := range previewsPerTenant {
		e := p.lookup(capOf(t, must(scopeOf(p, "tok", fmt.Sprintf("t%d", i/previewsPerThread), sb).Open(ctx, 1+i%previewsPerThread))))
		switch i {
		case 0:
			first = e
		case 1:
			second = e
		}
	}
	first.touch() // used lately: the second is the least used now
	if _, err := scopeOf(p, "tok", "new", sb).Open(ctx, 1); err != nil {
		t.Fatal(err)
	}
	p.mu.RLock()
	n := p.tenants["tok"]
	p.mu.RUnlock()
	if n != previewsPerTenant || p.lookup(second.cap) != nil || p.lookup(first.cap) == nil || p.lookup(other.cap) == nil {
		t.Errorf("past the token's cap: %d previews; least used gone %v, recent kept %v, other token's kept %v",
			n, p.lookup(second.cap) == nil, p.lookup(first.cap) != nil, p.lookup(other.cap) != nil)
	}
}

func TestScopeCookie(t *testing.T) {
	t.Parallel()
	const tag, prefix = "sbxT_", "/preview/C"
	for in, want := range map[string]string{
		"sid=abc; Path=/; Domain=localhost; HttpOnly": "sbxT_sid=abc; Path=/preview/C/; HttpOnly",
		"a=b":                                   "sbxT_a=b; Path=/preview/C/",
		"a=b; path=/x/y; Secure; SameSite=Lax":  "sbxT_a=b; Path=/preview/C/x/y; Secure; SameSite=Lax",
		"a=b; Path=relative":                    "sbxT_a=b; Path=/preview/C/",
		"a=b; DOMAIN=.example.com; Max-Age=60;": "sbxT_a=b; Max-Age=60; Path=/preview/C/",
		"=nameless":                             "",
		"garbage":                               "",
	} {
		if got := scopeCookie(in, tag, prefix); got != want {
			t.Errorf("scopeCookie(%q) = %q, want %q", in, got, want)
		}
	}
	if got := ownCookies([]string{"a=1; sbxT_sid=abc; sbxU_x=2", "sbxT_p=q;sbxT_=v"}, tag); got != "sid=abc; p=q" {
		t.Errorf("ownCookies = %q", got)
	}
}
