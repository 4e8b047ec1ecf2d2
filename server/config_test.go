package server_test

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/server"
)

// Unset settings take the defaults SPEC and docs/http.md give; set ones
// stay; threads_per_token 0 is no cap, not the default.
func TestHTTPConfigDefaults(t *testing.T) {
	t.Parallel()
	var c server.HTTPConfig
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	want := server.HTTPConfig{
		Stateless: c.Stateless, MaxBodyBytes: 10 << 20, MaxConnections: 2048, HeaderTimeout: 10 * time.Second,
		BodyTimeout: 15 * time.Second, IdleTimeout: 30 * time.Second, MaxSessions: 1000, MaxBodyBytesInFlight: 64 << 20,
		MaxCalls: 64, SessionIdleTTL: 30 * time.Minute, DrainTimeout: 10 * time.Second,
	}
	if c.Stateless == nil || !*c.Stateless || !reflect.DeepEqual(c, want) {
		t.Errorf("defaults %+v (stateless %v)\nwant %+v", c, c.Stateless != nil && *c.Stateless, want)
	}
	off, n := false, 0
	set := server.HTTPConfig{Stateless: &off, MaxCalls: 3, HeaderTimeout: time.Second}
	if err := set.Validate(); err != nil || *set.Stateless || set.MaxCalls != 3 || set.HeaderTimeout != time.Second {
		t.Errorf("set values changed: %+v, %v", set, err)
	}
	var b server.Bounds
	if err := b.Validate(); err != nil || b.ThreadsPerToken == nil || *b.ThreadsPerToken != 32 {
		t.Errorf("limits.threads_per_token default: %v", err)
	}
	b = server.Bounds{ThreadsPerToken: &n}
	if err := b.Validate(); err != nil || *b.ThreadsPerToken != 0 {
		t.Errorf("limits.threads_per_token 0 (no cap) became %d, %v", *b.ThreadsPerToken, err)
	}
}

// Every number of the http section is refused below 0, naming its key:
// whatever bound is declared, it is checked.
func TestHTTPConfigRefusesNegative(t *testing.T) {
	t.Parallel()
	typ := reflect.TypeFor[server.HTTPConfig]()
	checked := 0
	for i := range typ.NumField() {
		f := typ.Field(i)
		key, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if key == "-" || (f.Type.Kind() != reflect.Int && f.Type.Kind() != reflect.Int64) {
			continue
		}
		var c server.HTTPConfig
		v := reflect.ValueOf(&c).Elem().Field(i)
		v.SetInt(-1)
		if v.Type() == reflect.TypeFor[time.Duration]() {
			v.SetInt(int64(-time.Second))
		}
		err := c.Validate()
		if want := "http." + key + " -1: want 0 (the default) or more"; err == nil || err.Error() != want {
			t.Errorf("%s -1: %v, want %s", key, err, want)
		}
		checked++
	}
	if checked < 10 {
		t.Errorf("%d numbers checked: the http section has more", checked)
	}
	n := -1
	b := server.Bounds{ThreadsPerToken: &n}
	if err := b.Validate(); err == nil || err.Error() != "limits.threads_per_token -1: want 0 (no limit) or more" {
		t.Errorf("limits.threads_per_token -1: %v", err)
	}
	for _, c := range []server.HTTPConfig{{AuthTokens: []string{"a", " "}}, {AnonymousThreads: "forever"}} {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v passed", c)
		}
	}
}

// http.public_url is an http(s) URL with a host, kept without its
// trailing slash; anything else stops start-up naming the key.
func TestHTTPConfigPublicURL(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"https://sandbox.example/":      "https://sandbox.example",
		"http://10.0.0.5:8080/tools//":  "http://10.0.0.5:8080/tools",
		"https://sandbox.example/tools": "https://sandbox.example/tools",
	} {
		c := server.HTTPConfig{PublicURL: in}
		if err := c.Validate(); err != nil || c.PublicURL != want {
			t.Errorf("public_url %q: %q, %v; want %q", in, c.PublicURL, err, want)
		}
	}
	for _, bad := range []string{"sandbox.example", "ftp://x", "https://", "https://x/?q=1", "https://u:p@x", "https://x/#f", "://x"} {
		c := server.HTTPConfig{PublicURL: bad}
		if err := c.Validate(); err == nil || !strings.HasPrefix(err.Error(), "http.public_url ") {
			t.Errorf("public_url %q: %v", bad, err)
		}
	}
}
