// Command checklinks checks that every relative link in the repository's
// Markdown files resolves: the file or directory it names exists, and an
// #anchor names a heading of the Markdown file it points into (GitHub's
// rules: lowercase, spaces to '-', punctuation dropped except '-' and '_',
// a repeated heading gets -1, -2, …).
//
//	go run ./scripts/checklinks        # the repository (the current directory)
//	go run ./scripts/checklinks DIR
//
// It prints one line per broken link (file:line: target: why) and exits 1
// when there is any, else prints how many links it checked and exits 0.
// Links with a scheme (https:, mailto:) are not fetched; an anchor into a
// file that is not Markdown (a source file's #L10) is not checked.
package main

import (
	"fmt"
	"io/fs"
	"iter"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"unicode"
)

func main() {
	root := "."
	if len(os.Args) > 2 {
		fmt.Fprintln(os.Stderr, "usage: checklinks [DIR]")
		os.Exit(2)
	}
	if len(os.Args) == 2 {
		root = os.Args[1]
	}
	problems, links, files, err := check(root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "checklinks:", err)
		os.Exit(2)
	}
	for _, p := range problems {
		fmt.Println(p)
	}
	if len(problems) > 0 {
		fmt.Fprintf(os.Stderr, "checklinks: %d broken of %d relative links in %d Markdown files\n", len(problems), links, files)
		os.Exit(1)
	}
	fmt.Printf("checklinks: %d relative links in %d Markdown files, all resolve\n", links, files)
}

// check walks root for Markdown files and returns one line per broken
// relative link, how many relative links it checked, and in how many files.
func check(root string) (problems []string, links, files int, err error) {
	var mds []string
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != root && (d.Name() == ".git" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(strings.ToLower(d.Name()), ".md") {
			mds = append(mds, p)
		}
		return nil
	})
	if err != nil {
		return nil, 0, 0, err
	}
	sort.Strings(mds)
	anchorCache := map[string]map[string]bool{}
	anchorsOf := func(p string) (map[string]bool, error) {
		if a, ok := anchorCache[p]; ok {
			return a, nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		a := anchors(string(b))
		anchorCache[p] = a
		return a, nil
	}
	absRoot, err := filepath.Abs(root)
	if err != nil {
		return nil, 0, 0, err
	}
	for _, md := range mds {
		b, err := os.ReadFile(md)
		if err != nil {
			return nil, 0, 0, err
		}
		files++
		rel, _ := filepath.Rel(root, md)
		for _, l := range extractLinks(string(b)) {
			if !isRelative(l.target) {
				continue
			}
			links++
			if why := resolve(absRoot, md, l.target, anchorsOf); why != "" {
				problems = append(problems, fmt.Sprintf("%s:%d: %s: %s", filepath.ToSlash(rel), l.line, l.target, why))
			}
		}
	}
	return problems, links, files, nil
}

var schemeRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)

// isRelative says whether a link target is within the repository: no
// scheme (https:, mailto:), not protocol-relative (//host).
func isRelative(target string) bool {
	return !schemeRE.MatchString(target) && !strings.HasPrefix(target, "//")
}

// resolve returns why target, linked from the Markdown file md, does not
// resolve, or "" when it does.
func resolve(absRoot, md, target string, anchorsOf func(string) (map[string]bool, error)) string {
	pathPart, anchor, _ := strings.Cut(target, "#")
	if i := strings.IndexByte(pathPart, '?'); i >= 0 {
		pathPart = pathPart[:i]
	}
	p, err := url.PathUnescape(pathPart)
	if err != nil {
		return "bad escape in path"
	}
	absMD, err := filepath.Abs(md)
	if err != nil {
		return err.Error()
	}
	dest := absMD
	switch {
	case p == "":
	case strings.HasPrefix(p, "/"): // GitHub: from the repository's root
		dest = filepath.Join(absRoot, filepath.FromSlash(p))
	default:
		dest = filepath.Join(filepath.Dir(absMD), filepath.FromSlash(p))
	}
	if r, err := filepath.Rel(absRoot, dest); err != nil || r == ".." || strings.HasPrefix(r, ".."+string(filepath.Separator)) {
		return "leads outside the repository"
	}
	st, err := os.Stat(dest)
	if err != nil {
		return "no such file or directory"
	}
	if anchor == "" {
		return ""
	}
	if st.IsDir() || !strings.HasSuffix(strings.ToLower(dest), ".md") {
		return "" // a source file's #L10, a directory's README: not checked
	}
	a, err := anchorsOf(dest)
	if err != nil {
		return err.Error()
	}
	if dec, err := url.PathUnescape(anchor); err == nil {
		anchor = dec
	}
	if !a[strings.ToLower(anchor)] {
		return "no heading with anchor #" + anchor
	}
	return ""
}

type link struct {
	line   int
	target string
}

var (
	fenceRE   = regexp.MustCompile("^ {0,3}(```+|~~~+)")
	linkRE    = regexp.MustCompile(`\]\(\s*<?([^()\s<>]+)>?(?:\s+(?:"[^"]*"|'[^']*'))?\s*\)`)
	refDefRE  = regexp.MustCompile(`^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s.*)?$`)
	htmlRefRE = regexp.MustCompile(`(?i)<(?:a|img)\s[^>]*?(?:href|src)="([^"]+)"`)
)

// proseLines yields the lines of a Markdown text (with their index) that
// are outside fenced code blocks.
func proseLines(md string) iter.Seq2[int, string] {
	return func(yield func(int, string) bool) {
		var fence string
		for i, line := range strings.Split(md, "\n") {
			if m := fenceRE.FindStringSubmatch(line); m != nil {
				switch {
				case fence == "":
					fence = m[1]
					continue
				case strings.HasPrefix(m[1], fence[:1]) && len(m[1]) >= len(fence):
					fence = ""
					continue
				}
			}
			if fence != "" {
				continue
			}
			if !yield(i, line) {
				return
			}
		}
	}
}

// extractLinks returns the link targets of a Markdown text, outside fenced
// code blocks and code spans: inline links and images, reference
// definitions, and the href or src of HTML a and img tags.
func extractLinks(md string) []link {
	var out []link
	for i, line := range proseLines(md) {
		line = stripCodeSpans(line)
		for _, re := range []*regexp.Regexp{linkRE, refDefRE, htmlRefRE} {
			for _, m := range re.FindAllStringSubmatch(line, -1) {
				out = append(out, link{line: i + 1, target: m[1]})
			}
		}
	}
	return out
}

// stripCodeSpans blanks out `code spans` (a run of n backticks up to the
// next run of exactly n), so that a link shown as code is not checked.
func stripCodeSpans(line string) string {
	var b strings.Builder
	for i := 0; i < len(line); {
		if line[i] != '`' {
			b.WriteByte(line[i])
			i++
			continue
		}
		n := 0
		for i+n < len(line) && line[i+n] == '`' {
			n++
		}
		end := -1
		for j := i + n; j < len(line); {
			if line[j] != '`' {
				j++
				continue
			}
			m := 0
			for j+m < len(line) && line[j+m] == '`' {
				m++
			}
			if m == n {
				end = j + m
				break
			}
			j += m
		}
		if end < 0 { // an unmatched run is literal text
			b.WriteString(line[i : i+n])
			i += n
			continue
		}
		b.WriteString(strings.Repeat(" ", end-i))
		i = end
	}
	return b.String()
}

var (
	headingRE = regexp.MustCompile(`^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$`)
	idRE      = regexp.MustCompile(`(?i)<[a-z][^>]*?\s(?:id|name)="([^"]+)"`)
	mdLinkRE  = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
	htmlTagRE = regexp.MustCompile(`<[^>]+>`)
)

// anchors returns the anchors GitHub makes for a Markdown text: one per
// heading (outside fenced code), and the id or name of HTML elements.
func anchors(md string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, line := range proseLines(md) {
		for _, m := range idRE.FindAllStringSubmatch(line, -1) {
			out[strings.ToLower(m[1])] = true
		}
		m := headingRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		s := slug(m[2])
		if n, ok := seen[s]; ok {
			seen[s] = n + 1
			s = fmt.Sprintf("%s-%d", s, n+1)
		} else {
			seen[s] = 0
		}
		out[s] = true
	}
	return out
}

// slug is GitHub's anchor of a heading's text: the text as rendered (links
// by their text, no code or emphasis marks, no HTML tags), lowercased,
// every character that is not a letter, a mark, a digit, '_', '-' or a
// space dropped, and spaces made '-'.
func slug(heading string) string {
	h := mdLinkRE.ReplaceAllString(heading, "$1")
	h = htmlTagRE.ReplaceAllString(h, "")
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsMark(r) || unicode.IsDigit(r) || unicode.In(r, unicode.Nl, unicode.No):
			b.WriteRune(r)
		}
	}
	return b.String()
}
