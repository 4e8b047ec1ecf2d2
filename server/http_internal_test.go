package server

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

func TestOriginAllowed(t *testing.T) {
	t.Parallel()
	allowed := []string{"https://app.example", "http://tool.example:8080/"}
	for origin, want := range map[string]bool{
		"http://localhost":               true,
		"http://localhost:3000":          true,
		"https://127.0.0.1:8443":         true,
		"http://[::1]:80":                true,
		"http://127.5.6.7":               true,
		"https://app.example":            true,
		"https://APP.example/":           true,
		"http://tool.example:8080":       true,
		"https://app.example.evil":       false,
		"http://app.example":             false,
		"http://localhost.evil.example":  false,
		"http://evil.example#localhost":  false,
		"http://localhost@evil.example":  false,
		"null":                           false,
		"file://localhost":               false,
		"javascript:alert(1)":            false,
		"http://10.0.0.1":                false,
		"":                               false,
		"http://[::ffff:127.0.0.1]:3000": true,
	} {
		if got := originAllowed(origin, allowed); got != want {
			t.Errorf("originAllowed(%q) = %v, want %v", origin, got, want)
		}
	}
	// The origin of a preview's pages, whatever is configured.
	for _, origin := range []string{"null", "NULL", "null/", " null"} {
		for _, list := range [][]string{{"*"}, {"null"}} {
			if originAllowed(origin, list) {
				t.Errorf("originAllowed(%q, %q) = true", origin, list)
			}
		}
	}
}

// FuzzOriginAllowed: an origin passes only if it is listed or its host is
// loopback, whatever its spelling.
func FuzzOriginAllowed(f *testing.F) {
	for _, s := range []string{"http://localhost", "http://evil.example", "null", "http://localhost.evil", "https://app.example", "http://127.0.0.1:1@evil"} {
		f.Add(s)
	}
	allowed := []string{"https://app.example"}
	f.Fuzz(func(t *testing.T, origin string) {
		if !originAllowed(origin, allowed) {
			return
		}
		if strings.EqualFold(strings.TrimSuffix(origin, "/"), "https://app.example") {
			return
		}
		u, err := url.Parse(origin)
		if err != nil {
			t.Fatalf("%q allowed but does not parse", origin)
		}
		h := u.Hostname()
		if h != "localhost" && !strings.HasPrefix(h, "127.") && h != "::1" && !strings.HasPrefix(h, "::ffff:127.") {
			t.Fatalf("%q allowed with host %q", origin, h)
		}
	})
}

func FuzzBearer(f *testing.F) {
	for _, s := range []string{"Bearer abc", "bearer  abc ", "Basic abc", "Bearer", "Bearerabc", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		h := http.Header{}
		h.Set("Authorization", v)
		tok := bearer(h)
		if tok != "" && !strings.Contains(v, tok) {
			t.Fatalf("bearer(%q) = %q, not in the header", v, tok)
		}
		if tok != "" && !strings.HasPrefix(strings.ToLower(strings.TrimSpace(h.Get("Authorization"))), "bearer ") {
			t.Fatalf("bearer(%q) = %q without the Bearer scheme", v, tok)
		}
	})
}
