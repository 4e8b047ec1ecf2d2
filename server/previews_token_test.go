package server_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/server"
)

// The server's own bearer token never reaches a preview's app (code in
// the sandbox, which could drive /mcp with it), wherever it stands among
// the request's Authorization values: a client (a harness that adds its
// configured "Authorization: Bearer <token>" to every request) may send
// one of its own first. Found by the red team: only the first value was
// checked.
func TestPreviewServerTokenNeverReachesApp(t *testing.T) {
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
