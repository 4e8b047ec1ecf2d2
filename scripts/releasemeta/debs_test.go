package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// fakeDeb is a .deb (an ar archive) whose data.tar.gz holds files.
func fakeDeb(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var data bytes.Buffer
	zw := gzip.NewWriter(&data)
	tw := tar.NewWriter(zw)
	var names []string
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		tw.WriteHeader(&tar.Header{Name: "./" + n, Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(files[n]))})
		tw.Write([]byte(files[n]))
	}
	tw.Close()
	zw.Close()
	var ar bytes.Buffer
	ar.WriteString("!<arch>\n")
	member := func(name string, body []byte) {
		fmt.Fprintf(&ar, "%-16s%-12s%-6s%-6s%-8s%-10d`\n", name, "0", "0", "0", "100644", len(body))
		ar.Write(body)
		if len(body)%2 == 1 {
			ar.WriteByte('\n')
		}
	}
	member("debian-binary", []byte("2.0\n"))
	member("control.tar.gz", []byte("x"))
	member("data.tar.gz", data.Bytes())
	return ar.Bytes()
}

// fakeBusybox is a binary with busybox's applet table.
func fakeBusybox() string {
	names := []string{"[", "[["}
	for i := range 48 {
		names = append(names, fmt.Sprintf("a%02d", i))
	}
	names = append(names, "ls", "sh")
	return "\x7fELF...code...\x00" + strings.Join(names, "\x00") + "\x00\x00more code"
}

// The base layer is made of the pinned packages, each checked against its
// sha256, and holds what the image promises: bash, sh and the applets,
// /usr/bin/env, the CA bundle, the server's user, the state dir.
func TestBaseLayer(t *testing.T) {
	t.Parallel()
	debs := map[string][]byte{
		"pool/main/b/busybox/busybox-static_1_amd64.deb": fakeDeb(t, map[string]string{"bin/busybox": fakeBusybox(), "usr/share/doc/busybox-static/copyright": "GPL-2"}),
		"pool/main/b/bash/bash-static_5_amd64.deb":       fakeDeb(t, map[string]string{"bin/bash-static": "bash", "usr/share/man/man1/bash-static.1.gz": "man"}),
		"pool/main/c/ca-certificates/ca_1_all.deb":       fakeDeb(t, map[string]string{"usr/share/ca-certificates/mozilla/B.crt": "B\n", "usr/share/ca-certificates/mozilla/A.crt": "A"}),
	}
	hits := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits++
		b, ok := debs[strings.TrimPrefix(r.URL.Path, "/debian/")]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Write(b)
	}))
	defer srv.Close()
	lock := filepath.Join(t.TempDir(), "debs.lock")
	var lines []string
	for path, b := range debs {
		pkg := map[bool]string{true: "busybox-static", false: ""}[strings.Contains(path, "busybox")]
		if strings.Contains(path, "bash-static") {
			pkg = "bash-static"
		}
		arch := "amd64"
		if strings.Contains(path, "ca_1") {
			pkg, arch = "ca-certificates", "all"
		}
		lines = append(lines, fmt.Sprintf("%s %s 1.0 %s %s", arch, pkg, sum(b), path))
	}
	os.WriteFile(lock, []byte("# pins\n"+strings.Join(lines, "\n")+"\n"), 0o644)
	pins, err := readLock(lock)
	if err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir()
	entries, used, err := baseLayer("amd64", pins, srv.URL+"/debian", cache)
	if err != nil {
		t.Fatal(err)
	}
	if len(used) != 3 {
		t.Errorf("packages used: %v", used)
	}
	got := map[string]fileEntry{}
	for _, e := range entries {
		got[e.hdr.Name] = e
	}
	for name, want := range map[string]string{
		"bin/sh": "busybox", "bin/ls": "busybox", "bin/[[": "busybox", "bin/bash": "bash-static", "usr/bin/env": "/bin/busybox",
	} {
		if e, ok := got[name]; !ok || e.hdr.Typeflag != tar.TypeSymlink || e.hdr.Linkname != want {
			t.Errorf("%s: %+v, want a link to %s", name, e.hdr, want)
		}
	}
	for name, want := range map[string]string{
		"bin/bash-static": "bash", "etc/ssl/certs/ca-certificates.crt": "A\nB\n", "usr/share/doc/busybox-static/copyright": "GPL-2",
	} {
		if e, ok := got[name]; !ok || string(e.data) != want {
			t.Errorf("%s: %q, want %q", name, e.data, want)
		}
	}
	if e := got["bin/busybox"]; e.hdr.Mode != 0o755 || !strings.Contains(string(e.data), "\x00ls\x00") {
		t.Errorf("bin/busybox: %+v", e.hdr)
	}
	if e := got["var/lib/sandbox-mcp/"]; e.hdr.Uid != 65532 || e.hdr.Mode != 0o700 {
		t.Errorf("the state dir: %+v", e.hdr)
	}
	if !strings.Contains(string(got["etc/passwd"].data), "sandbox:x:65532:65532:") {
		t.Errorf("etc/passwd: %s", got["etc/passwd"].data)
	}
	if _, ok := got["usr/share/man/man1/bash-static.1.gz"]; ok {
		t.Error("a man page in the image")
	}
	// A second build reads the cache, not the mirror; a layer is the same
	// bytes twice.
	before := hits
	again, _, err := baseLayer("amd64", pins, srv.URL+"/debian", cache)
	if err != nil || hits != before {
		t.Fatalf("second build: %v, %d downloads", err, hits-before)
	}
	a, _, _ := tarLayer(entries, time.Unix(1, 0))
	b, _, _ := tarLayer(again, time.Unix(1, 0))
	if !bytes.Equal(a, b) {
		t.Error("two layers of the same packages differ")
	}
	// A package of another sha256, or gone from the mirror, is refused,
	// naming what to do.
	bad := slices.Clone(pins)
	for i := range bad {
		bad[i].sha256 = strings.Repeat("0", 64)
	}
	if _, _, err := baseLayer("amd64", bad, srv.URL+"/debian", t.TempDir()); err == nil || !strings.Contains(err.Error(), "debs.lock pins") {
		t.Errorf("a package of another sha256: %v", err)
	}
	gone := slices.Clone(pins)
	for i := range gone {
		gone[i].path = "pool/gone.deb"
	}
	if _, _, err := baseLayer("amd64", gone, srv.URL+"/debian", t.TempDir()); err == nil || !strings.Contains(err.Error(), "update-debs.sh") {
		t.Errorf("a package gone from the mirror: %v", err)
	}
	if _, _, err := baseLayer("arm64", pins, srv.URL+"/debian", cache); err == nil || !strings.Contains(err.Error(), "pins no busybox-static for arm64") {
		t.Errorf("an architecture not pinned: %v", err)
	}
}

// The applet table read from a real busybox is what it lists itself.
func TestBusyboxAppletsOfARealBusybox(t *testing.T) {
	t.Parallel()
	bb, err := exec.LookPath("busybox")
	if err != nil {
		t.Skip("SKIPPED: no busybox here")
	}
	bin, _ := os.ReadFile(bb)
	out, err := exec.Command(bb, "--list").Output()
	if err != nil {
		t.Skipf("SKIPPED: busybox --list: %v", err)
	}
	got, err := busyboxApplets(bin)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Fields(string(out))
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("read %d applets, busybox lists %d", len(got), len(want))
	}
	if _, err := busyboxApplets([]byte("not busybox")); err == nil {
		t.Error("a file without an applet table was read")
	}
}
