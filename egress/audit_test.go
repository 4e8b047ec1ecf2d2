package egress

import (
	"bufio"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/audit"
	"github.com/sandbox-mcp/sandbox-mcp/internal/testkit"
)

// auditLine is what a test reads of a line.
type auditLine struct {
	audit.Event
	Args struct {
		Host      string `json:"host"`
		Port      int    `json:"port"`
		Method    string `json:"method"`
		Allowed   bool   `json:"allowed"`
		BytesUp   int64  `json:"bytes_up"`
		BytesDown int64  `json:"bytes_down"`
		Injected  bool   `json:"injected"`
	} `json:"args"`
}

func readLines(t *testing.T, log string) []auditLine {
	t.Helper()
	var out []auditLine
	for _, l := range strings.Split(strings.TrimSpace(log), "\n") {
		if l == "" {
			continue
		}
		var a auditLine
		if err := json.Unmarshal([]byte(l), &a); err != nil {
			t.Fatalf("audit line %q: %v", l, err)
		}
		out = append(out, a)
	}
	return out
}

// sizeSink checks that no line is recorded larger than what Begin was
// shown: the room reserved is the room used.
type sizeSink struct {
	audit.Sink
	mu      sync.Mutex
	begun   map[string]int // by target
	tooLong []string
}

func lineSize(e audit.Event) int {
	e.Error = "" // Begin's bound counts the error message apart
	b, _ := json.Marshal(e)
	return len(b)
}

func (s *sizeSink) Begin(e audit.Event) (audit.Event, error) {
	s.mu.Lock()
	s.begun[fmt.Sprint(e.Args["host"], e.Args["port"], e.Args["method"])] = lineSize(e)
	s.mu.Unlock()
	return s.Sink.Begin(e)
}

func (s *sizeSink) Record(e audit.Event) error {
	// The line at its longest: a tunnel open for ages that carried the
	// most bytes.
	worst := e
	worst.DurationMS = math.MaxInt64
	worst.Args = maps.Clone(e.Args)
	worst.Args["bytes_up"], worst.Args["bytes_down"] = int64(math.MaxInt64), int64(math.MaxInt64)
	s.mu.Lock()
	if n, ok := s.begun[fmt.Sprint(e.Args["host"], e.Args["port"], e.Args["method"])]; ok && lineSize(worst) > n {
		s.tooLong = append(s.tooLong, fmt.Sprintf("%v: %d bytes after Begin saw %d", e.Args, lineSize(worst), n))
	}
	s.mu.Unlock()
	return s.Sink.Record(e)
}

func TestAuditLines(t *testing.T) {
	t.Parallel()
	const size = 300_000
	big := strings.Repeat("x", size)
	tlsUp := newUpstream(t, true, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, big) }))
	plainUp := newUpstream(t, false, nil)
	tp, pp := tlsUp.port(), plainUp.port()
	var log testkit.Buffer
	sink := &sizeSink{Sink: audit.NewWriter(&log), begun: map[string]int{}}
	p, err := New(Config{
		Mode:   ModeAllowlist,
		Allow:  []string{"127.0.0.1:" + pp, "127.0.0.1:" + tp, "example.com:" + tp},
		Inject: []Inject{{Host: "example.com:" + tp, Header: "X-Key", Value: secret}},
	}, Options{StateDir: t.TempDir(), Audit: sink, RootCAs: tlsUp.roots(), lookup: names(map[string]string{"example.com": "127.0.0.1"})})
	if err != nil {
		t.Fatal(err)
	}
	who := Who{Session: "sess", Thread: "thr", Sandbox: "box", Provider: "prov"}
	addr := start(t, p, who)

	if body, code, err := curl(t, addr, "http://127.0.0.1:"+pp+"/", "-d", "0123456789"); err != nil || code != "200" {
		t.Fatalf("plain: %s %q %v", code, body, err)
	}
	if _, code, err := curl(t, addr, "http://nowhere.test/"); err != nil || code != "403" {
		t.Fatalf("refused: %s %v", code, err)
	}
	tunnelled := proxyClient(addr, tlsUp.roots())
	resp, err := tunnelled.Get("https://127.0.0.1:" + tp + "/")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	tunnelled.CloseIdleConnections()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(p.CA())
	injected := proxyClient(addr, pool)
	resp, err = injected.Get("https://example.com:" + tp + "/")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	injected.CloseIdleConnections()

	var lines []auditLine
	if !testkit.Poll(10*time.Second, 10*time.Millisecond, func() bool {
		lines = readLines(t, log.String())
		return len(lines) == 4
	}) {
		t.Fatalf("want 4 audit lines, got %d:\n%s", len(lines), log.String())
	}
	byMethod := map[string]auditLine{}
	for _, l := range lines {
		if l.Tool != "network" || l.Session != "sess" || l.Thread != "thr" || l.Sandbox != "box" || l.Provider != "prov" {
			t.Errorf("line %+v: want tool network and the Who", l.Event)
		}
		key := l.Args.Method + " " + l.Args.Host
		byMethod[key] = l
	}
	check := func(key, outcome string, allowed, injected bool, minUp, minDown int64) {
		t.Helper()
		l, ok := byMethod[key]
		if !ok {
			t.Errorf("no line for %s in %v", key, byMethod)
			return
		}
		if l.Outcome != outcome || l.Args.Allowed != allowed || l.Args.Injected != injected || l.Args.BytesUp < minUp || l.Args.BytesDown < minDown {
			t.Errorf("%s: outcome %s allowed %v injected %v up %d down %d; want %s %v %v, up >= %d, down >= %d",
				key, l.Outcome, l.Args.Allowed, l.Args.Injected, l.Args.BytesUp, l.Args.BytesDown, outcome, allowed, injected, minUp, minDown)
		}
	}
	check("POST 127.0.0.1", audit.OK, true, false, 10, int64(len("hello from upstream")))
	check("GET nowhere.test", audit.Denied, false, false, 0, 0)
	check("CONNECT 127.0.0.1", audit.OK, true, false, 100, size)
	check("CONNECT example.com", audit.OK, true, true, 100, size)
	if l := byMethod["GET nowhere.test"]; !strings.Contains(l.Error, "nowhere.test:80 is not in network.allow") || l.Args.Port != 80 {
		t.Errorf("refused line: error %q port %d", l.Error, l.Args.Port)
	}
	if n, err := audit.Verify(strings.NewReader(log.String())); err != nil || n != 4 {
		t.Errorf("the audit chain: %d lines, %v", n, err)
	}
	if strings.Contains(log.String(), "s3cret") {
		t.Error("the audit log names the secret")
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	for _, s := range sink.tooLong {
		t.Errorf("a line outgrew its reservation: %s", s)
	}
}

// A connection whose line cannot be written is not made (SPEC §9).
func TestAuditFailsClosed(t *testing.T) {
	t.Parallel()
	var accepted atomic.Int64
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	target := ln.Addr().String()
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	w, err := audit.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	os.Remove(path) // the log is gone: Begin fails
	p, err := New(Config{Mode: ModeAllowlist, Allow: []string{target}}, Options{Audit: w})
	if err != nil {
		t.Fatal(err)
	}
	addr := start(t, p, Who{})

	code, body := rawRequest(t, addr, "GET http://"+target+"/ HTTP/1.1\r\nHost: "+target+"\r\n\r\n")
	if code != "502" || body != "sandbox-mcp: the audit log cannot be written, so no connection is made\n" {
		t.Errorf("plain request: %s %q", code, body)
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusBadGateway {
		t.Errorf("CONNECT: %d, want 502", resp.StatusCode)
	}
	if n := accepted.Load(); n != 0 {
		t.Errorf("the upstream was connected to %d times without an audit line", n)
	}
}
