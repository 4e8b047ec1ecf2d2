package server_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/server"
)

// TestRedTeamPreviewTokenToApp: the preview drops the request's
// Authorization only when its first value is a valid token
// (g.validToken reads Header.Get). A client that sends the server's
// token as a second Authorization value (a harness that adds its
// configured "Authorization: Bearer <token>" to every request, behind a
// first header of its own or of a library) hands the server's bearer
// token to the app in the sandbox — code the attacker controls — which
// then drives /mcp as that tenant from wherever it can reach the server.
//
// FAILS on the current code. Fix in server/previews.go (rewrite): drop
// every Authorization value that is a configured token (check each value,
// not the first), or simply never forward a "Bearer <configured token>"
// whatever its position; same for the stdio loopback (no tokens there).
func TestRedTeamPreviewTokenToApp(t *testing.T) {
	t.Parallel()
	pp := &portsProvider{}
	h := startHTTPOn(t, server.HTTPConfig{AuthTokens: []string{"tok"}}, false, withPorts(pp))
	cs := connect(t, h, "streamable", map[string]string{"Authorization": "Bearer tok", "X-Thread-ID": "web"})
	pp.serve(t, "web", 3000, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "auth=%q", r.Header.Values("Authorization"))
	}))
	u := exposeURL(t, cs, 3000)
	req, _ := http.NewRequestWithContext(t.Context(), "GET", u, nil)
	req.Header.Add("Authorization", "Basic dTpw")
	req.Header.Add("Authorization", "Bearer tok")
	resp, err := noRedirects.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.Contains(string(b), "Bearer tok") {
		t.Errorf("the server's bearer token reached the app in the sandbox: %s", b)
	}
}
