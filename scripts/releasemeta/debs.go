package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

// The server image's own files beside the binary: a shell and the common
// tools, from Debian packages pinned in deploy/image/debs.lock (made by
// deploy/image/update-debs.sh from the suite's signed index). The image is
// the sandbox when a registry client runs it (local.isolation container):
// bash is bash-static, every other tool an applet of busybox-static, and
// the CA bundle is ca-certificates'. Both binaries are static, so the
// image needs no libc: about 5 MB beside the server.

// debPin is one line of debs.lock.
type debPin struct {
	arch, pkg, version, sha256, path string
}

// readLock reads debs.lock: "arch package version sha256 pool-path" a
// line, "#" comments.
func readLock(name string) ([]debPin, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var pins []debPin
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 5 || !sha256Hex.MatchString(f[3]) || !strings.HasPrefix(f[4], "pool/") || strings.Contains(f[4], "..") {
			return nil, fmt.Errorf("%s:%d: want \"arch package version sha256 pool/...\"", name, n)
		}
		pins = append(pins, debPin{f[0], f[1], f[2], f[3], f[4]})
	}
	return pins, sc.Err()
}

var sha256Hex = regexp.MustCompile(`^[0-9a-f]{64}$`)

// pinsFor are the pins of one architecture, the architecture-independent
// ones (all) included; every package of packages must be there.
func pinsFor(pins []debPin, arch string, packages ...string) (map[string]debPin, error) {
	out := map[string]debPin{}
	for _, p := range pins {
		if p.arch == arch || p.arch == "all" {
			out[p.pkg] = p
		}
	}
	for _, want := range packages {
		if _, ok := out[want]; !ok {
			return nil, fmt.Errorf("debs.lock pins no %s for %s: run deploy/image/update-debs.sh", want, arch)
		}
	}
	return out, nil
}

// fetchDeb is the pinned package's file: from the cache directory when it
// holds it, else downloaded from the mirror (and kept in the cache); of
// another sha256, it is refused.
func fetchDeb(p debPin, mirror, cache string) ([]byte, error) {
	cached := filepath.Join(cache, p.sha256+".deb")
	if b, err := os.ReadFile(cached); err == nil && sum(b) == p.sha256 {
		return b, nil
	}
	url := strings.TrimSuffix(mirror, "/") + "/" + p.path
	client := &http.Client{Timeout: 5 * time.Minute}
	resp, err := client.Get(url)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w (the Debian mirror: DEBIAN_MIRROR)", p.pkg, p.version, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s %s: %s from %s: a point release may have replaced it; run deploy/image/update-debs.sh and commit debs.lock, or set DEBIAN_MIRROR to a snapshot (https://snapshot.debian.org/archive/debian/<time>/)", p.pkg, p.version, resp.Status, url)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", url, err)
	}
	if got := sum(b); got != p.sha256 {
		return nil, fmt.Errorf("%s: sha256 %s, debs.lock pins %s", url, got, p.sha256)
	}
	if cache != "" {
		if err := os.MkdirAll(cache, 0o755); err == nil {
			tmp := cached + ".tmp"
			if os.WriteFile(tmp, b, 0o644) == nil {
				os.Rename(tmp, cached)
			}
		}
	}
	return b, nil
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// debFiles are the regular files of a .deb's data archive, by their path
// without the leading "./", that keep(path) wants.
func debFiles(deb []byte, keep func(string) bool) (map[string][]byte, error) {
	data, name, err := arMember(deb, "data.tar")
	if err != nil {
		return nil, err
	}
	var r io.Reader
	switch {
	case strings.HasSuffix(name, ".gz"):
		zr, err := gzip.NewReader(bytes.NewReader(data))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		r = zr
	case strings.HasSuffix(name, ".xz"), strings.HasSuffix(name, ".zst"):
		tool := map[bool]string{true: "xz", false: "zstd"}[strings.HasSuffix(name, ".xz")]
		cmd := exec.Command(tool, "-dc")
		cmd.Stdin = bytes.NewReader(data)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("%s: %s -dc: %v %s (install %s)", name, tool, err, strings.TrimSpace(errOut.String()), map[string]string{"xz": "xz-utils", "zstd": "zstd"}[tool])
		}
		r = &out
	case name == "data.tar":
		r = bytes.NewReader(data)
	default:
		return nil, fmt.Errorf("%s: an archive this tool does not read", name)
	}
	files := map[string][]byte{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		p := strings.TrimPrefix(path.Clean("/"+h.Name), "/")
		if h.Typeflag != tar.TypeReg || !keep(p) {
			continue
		}
		if files[p], err = io.ReadAll(tr); err != nil {
			return nil, fmt.Errorf("%s: %s: %w", name, p, err)
		}
	}
}

// arMember is the first member of an ar archive (a .deb) whose name starts
// with prefix, and its name.
func arMember(ar []byte, prefix string) ([]byte, string, error) {
	const magic = "!<arch>\n"
	if !bytes.HasPrefix(ar, []byte(magic)) {
		return nil, "", fmt.Errorf("not a .deb (no ar header)")
	}
	for off := len(magic); off+60 <= len(ar); {
		h := ar[off : off+60]
		name := strings.TrimSuffix(strings.TrimSpace(string(h[0:16])), "/")
		var size int
		if _, err := fmt.Sscanf(strings.TrimSpace(string(h[48:58])), "%d", &size); err != nil || size < 0 || off+60+size > len(ar) {
			return nil, "", fmt.Errorf("a .deb with a bad member header")
		}
		body := ar[off+60 : off+60+size]
		if strings.HasPrefix(name, prefix) {
			return body, name, nil
		}
		off += 60 + size + size%2
	}
	return nil, "", fmt.Errorf("a .deb without %s*", prefix)
}

// busyboxApplets are the applet names a busybox binary holds: its
// applet_names table, one NUL-terminated name after another in sorted
// order, starting with "[" and "[[" (an architecture-independent read:
// the release cannot run an arm64 busybox to ask it --list).
func busyboxApplets(bin []byte) ([]string, error) {
	i := bytes.Index(bin, []byte("[\x00[[\x00"))
	if i < 0 {
		return nil, fmt.Errorf("busybox: no applet table (not a busybox binary?)")
	}
	valid := regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]*$|^\[\[?$`)
	var names []string
	for j := i; j < len(bin); {
		k := bytes.IndexByte(bin[j:], 0)
		if k <= 0 || !valid.Match(bin[j:j+k]) {
			break
		}
		names = append(names, string(bin[j:j+k]))
		j += k + 1
	}
	if !slices.IsSorted(names) || !slices.Contains(names, "sh") || !slices.Contains(names, "ls") || len(names) < 50 {
		return nil, fmt.Errorf("busybox: the applet table read %d names, not sorted or without sh and ls", len(names))
	}
	return names, nil
}

// fileEntry is one entry of a layer.
type fileEntry struct {
	hdr  tar.Header
	data []byte
}

// imagePackages are the packages of the image's base layer.
var imagePackages = []string{"busybox-static", "bash-static", "ca-certificates"}

// baseLayer is the image's files but the binary, for one architecture,
// from the pinned packages: /bin/busybox and a link per applet, /bin/bash
// (bash-static), /usr/bin/env (for #! lines), the CA bundle, the packages'
// copyright files, passwd and group naming the server's user, /tmp, and
// the state directory (a volume's mount point, the server's user's).
func baseLayer(arch string, pins []debPin, mirror, cache string) ([]fileEntry, []debPin, error) {
	mine, err := pinsFor(pins, arch, imagePackages...)
	if err != nil {
		return nil, nil, err
	}
	dir := func(name string, mode int64, uid int) fileEntry {
		return fileEntry{hdr: tar.Header{Name: name + "/", Typeflag: tar.TypeDir, Mode: mode, Uid: uid, Gid: uid}}
	}
	file := func(name string, mode int64, data []byte) fileEntry {
		return fileEntry{hdr: tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: mode, Size: int64(len(data))}, data: data}
	}
	link := func(name, target string) fileEntry {
		return fileEntry{hdr: tar.Header{Name: name, Typeflag: tar.TypeSymlink, Linkname: target, Mode: 0o777}}
	}
	entries := []fileEntry{
		dir("bin", 0o755, 0), dir("etc", 0o755, 0), dir("etc/ssl", 0o755, 0), dir("etc/ssl/certs", 0o755, 0),
		dir("root", 0o700, 0), dir("tmp", 0o1777, 0), dir("usr", 0o755, 0), dir("usr/bin", 0o755, 0),
		dir("usr/local", 0o755, 0), dir("usr/local/bin", 0o755, 0), dir("usr/share", 0o755, 0), dir("usr/share/doc", 0o755, 0),
		dir("var", 0o755, 0), dir("var/lib", 0o755, 0), dir("var/lib/sandbox-mcp", 0o700, 65532),
		file("etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/bin/bash\nsandbox:x:65532:65532:sandbox-mcp:/var/lib/sandbox-mcp:/bin/bash\n")),
		file("etc/group", 0o644, []byte("root:x:0:\nsandbox:x:65532:\n")),
		link("bin/bash", "bash-static"),
		link("usr/bin/env", "/bin/busybox"),
	}
	var used []debPin
	for _, pkg := range imagePackages {
		p := mine[pkg]
		used = append(used, p)
		deb, err := fetchDeb(p, mirror, cache)
		if err != nil {
			return nil, nil, err
		}
		copyright := "usr/share/doc/" + pkg + "/copyright"
		files, err := debFiles(deb, func(f string) bool {
			return f == "bin/busybox" || f == "bin/bash-static" || f == copyright || strings.HasPrefix(f, "usr/share/ca-certificates/")
		})
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", pkg, err)
		}
		if b, ok := files[copyright]; ok {
			entries = append(entries, dir("usr/share/doc/"+pkg, 0o755, 0), file(copyright, 0o644, b))
		}
		switch pkg {
		case "busybox-static":
			bin, ok := files["bin/busybox"]
			if !ok {
				return nil, nil, fmt.Errorf("%s: no /bin/busybox", pkg)
			}
			applets, err := busyboxApplets(bin)
			if err != nil {
				return nil, nil, err
			}
			entries = append(entries, file("bin/busybox", 0o755, bin))
			for _, a := range applets {
				if a != "busybox" && a != "bash" {
					entries = append(entries, link("bin/"+a, "busybox"))
				}
			}
		case "bash-static":
			bin, ok := files["bin/bash-static"]
			if !ok {
				return nil, nil, fmt.Errorf("%s: no /bin/bash-static", pkg)
			}
			entries = append(entries, file("bin/bash-static", 0o755, bin))
		case "ca-certificates":
			// What update-ca-certificates makes of the package (its
			// postinst, which cannot run here): every certificate in one file.
			var names []string
			for f := range files {
				if strings.HasSuffix(f, ".crt") {
					names = append(names, f)
				}
			}
			slices.Sort(names)
			var bundle bytes.Buffer
			for _, f := range names {
				bundle.Write(bytes.TrimRight(files[f], "\n"))
				bundle.WriteByte('\n')
			}
			if len(names) == 0 {
				return nil, nil, fmt.Errorf("%s: no certificates", pkg)
			}
			entries = append(entries, file("etc/ssl/certs/ca-certificates.crt", 0o644, bundle.Bytes()))
		}
	}
	return entries, used, nil
}

// tarLayer writes entries as a layer: sorted by name, owned as their
// headers say, every time mtime, gzip without a name or time; it returns
// the compressed bytes and the uncompressed digest (the diff id).
func tarLayer(entries []fileEntry, mtime time.Time) (gz []byte, raw []byte, err error) {
	slices.SortStableFunc(entries, func(a, b fileEntry) int {
		return strings.Compare(strings.TrimSuffix(a.hdr.Name, "/"), strings.TrimSuffix(b.hdr.Name, "/"))
	})
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	seen := map[string]bool{}
	for _, e := range entries {
		if seen[e.hdr.Name] {
			continue // a directory two packages name
		}
		seen[e.hdr.Name] = true
		h := e.hdr
		h.ModTime, h.Format = mtime, tar.FormatPAX
		if err := tw.WriteHeader(&h); err != nil {
			return nil, nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, nil, err
	}
	var z bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&z, gzip.BestCompression)
	if _, err := zw.Write(buf.Bytes()); err != nil {
		return nil, nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, nil, err
	}
	return z.Bytes(), buf.Bytes(), nil
}
