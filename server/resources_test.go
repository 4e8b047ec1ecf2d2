package server_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/providers/local"
	"github.com/sandbox-mcp/sandbox-mcp/server"
)

func TestOutputsAsResources(t *testing.T) {
	t.Parallel()
	h := startHTTP(t, server.HTTPConfig{})
	var changed atomic.Int32
	connectWith := func(thread string) *sdk.ClientSession {
		c := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, &sdk.ClientOptions{
			ResourceListChangedHandler: func(context.Context, *sdk.ResourceListChangedRequest) { changed.Add(1) },
		})
		cs, err := c.Connect(t.Context(), &sdk.StreamableClientTransport{Endpoint: h.url + "/mcp", HTTPClient: client(map[string]string{"X-Thread-ID": thread}), MaxRetries: -1}, legacyOpts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cs.Close() })
		return cs
	}
	a := connectWith("res-a")
	b := connectWith("res-b")

	call(t, a, "write_file", map[string]any{"path": "/mnt/user-data/outputs/report.md", "content": "# Report\n"})
	call(t, a, "bash", map[string]any{"command": "mkdir -p /mnt/user-data/outputs/sub && printf '\\x00\\x01' > '/mnt/user-data/outputs/sub/data bin.bin'"})
	// Written behind the server's back, by another process on the thread.
	os.WriteFile(filepath.Join(local.ThreadDir(h.state, "res-a"), "outputs", "direct.txt"), []byte("direct"), 0o644)
	call(t, a, "write_file", map[string]any{"path": "notes.txt", "content": "not an output"})

	list, err := a.ListResources(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var uris []string
	for _, r := range list.Resources {
		uris = append(uris, r.URI)
	}
	sort.Strings(uris)
	want := "sandbox://info sandbox://outputs/direct.txt sandbox://outputs/report.md sandbox://outputs/sub/data%20bin.bin"
	if got := strings.Join(uris, " "); got != want {
		t.Fatalf("resources = %s\nwant        %s", got, want)
	}
	rr, err := a.ReadResource(t.Context(), &sdk.ReadResourceParams{URI: "sandbox://outputs/report.md"})
	if err != nil || rr.Contents[0].Text != "# Report\n" {
		t.Fatalf("read text: %v %+v", err, rr)
	}
	rr, err = a.ReadResource(t.Context(), &sdk.ReadResourceParams{URI: "sandbox://outputs/sub/data%20bin.bin"})
	if err != nil || string(rr.Contents[0].Blob) != "\x00\x01" {
		t.Fatalf("read blob: %v %+v", err, rr)
	}
	// Never another thread's files.
	if list, err := b.ListResources(t.Context(), nil); err != nil || len(list.Resources) != 1 || list.Resources[0].URI != "sandbox://info" {
		t.Fatalf("thread b lists %v (%v)", list, err)
	}
	for _, uri := range []string{"sandbox://outputs/report.md", "sandbox://outputs/../workspace/notes.txt", "sandbox://outputs/%2e%2e/workspace/notes.txt", "sandbox://outputs/../../../res-a/user-data/outputs/report.md"} {
		if rr, err := b.ReadResource(t.Context(), &sdk.ReadResourceParams{URI: uri}); err == nil {
			t.Errorf("thread b read %s: %+v", uri, rr)
		} else if strings.Contains(err.Error(), h.state) {
			t.Errorf("error names a host path: %v", err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for changed.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if changed.Load() == 0 {
		t.Error("no resources/list_changed notification after writes to outputs")
	}
}

// sandbox://info is sandbox_info's facts as JSON, and its lines as text,
// of the session's thread.
func TestInfoResource(t *testing.T) {
	t.Parallel()
	h := startHTTP(t, server.HTTPConfig{})
	c := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil)
	cs, err := c.Connect(t.Context(), &sdk.StreamableClientTransport{Endpoint: h.url + "/mcp", HTTPClient: client(map[string]string{"X-Thread-ID": "info-a"}), MaxRetries: -1}, legacyOpts)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	call(t, cs, "write_file", map[string]any{"path": "/mnt/user-data/outputs/x.txt", "content": "12345"})
	rr, err := cs.ReadResource(t.Context(), &sdk.ReadResourceParams{URI: "sandbox://info"})
	if err != nil || len(rr.Contents) != 2 {
		t.Fatalf("read: %v %+v", err, rr)
	}
	var facts map[string]any
	if err := json.Unmarshal([]byte(rr.Contents[0].Text), &facts); err != nil || rr.Contents[0].MIMEType != "application/json" {
		t.Fatalf("json: %v %q", err, rr.Contents[0].Text)
	}
	if facts["provider"] != "local" || facts["network"].(map[string]any)["mode"] != "none" {
		t.Errorf("facts %v", facts)
	}
	if disk, _ := facts["disk"].(map[string]any); disk == nil || disk["bytes"].(float64) < 5 {
		t.Errorf("disk %v", facts["disk"])
	}
	if text := rr.Contents[1].Text; !strings.HasPrefix(text, "provider: local\n") || !strings.Contains(text, "exposed ports: none") {
		t.Errorf("text %q", text)
	}
}
