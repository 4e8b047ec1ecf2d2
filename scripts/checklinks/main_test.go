package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Anchors are GitHub's: lowercase, spaces to '-', punctuation dropped
// except '-' and '_', code marks and link syntax gone, repeats numbered.
func TestSlug(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"Serving remote agents (HTTP)":                                          "serving-remote-agents-http",
		"Security model of the local provider, honestly":                        "security-model-of-the-local-provider-honestly",
		"The docker provider: a hardened container per thread":                  "the-docker-provider-a-hardened-container-per-thread",
		"Both MCP eras over HTTP, stateless by default (issue #17), 2026-11-26": "both-mcp-eras-over-http-stateless-by-default-issue-17-2026-11-26",
		"Config `http:` section":                                                "config-http-section",
		"What a — dash does":                                                    "what-a--dash-does",
		"[Linked](x.md) heading":                                                "linked-heading",
		"snake_case and Ünïcode":                                                "snake_case-and-ünïcode",
		"linux × amd64, arm64":                                                  "linux--amd64-arm64",
		"Jobs: dev servers, long builds, prompts":                               "jobs-dev-servers-long-builds-prompts",
	} {
		if got := slug(in); got != want {
			t.Errorf("slug(%q) = %q, want %q", in, got, want)
		}
	}
	a := anchors("# A\n## A\n```\n# not a heading\n```\n### A ###\n<a id=\"Custom\"></a>\n")
	for _, want := range []string{"a", "a-1", "a-2", "custom"} {
		if !a[want] {
			t.Errorf("anchors: no %q in %v", want, a)
		}
	}
	if a["not-a-heading"] {
		t.Error("a heading inside a fenced code block made an anchor")
	}
}

// Links in code are not links; every other kind is found.
func TestExtractLinks(t *testing.T) {
	t.Parallel()
	md := "see [a](a.md) and ![img](i.png \"title\") and `[code](no.md)`\n" +
		"```\n[fenced](no.md)\n```\n" +
		"[ref]: docs/r.md#x\n" +
		"<a href=\"h.md\">h</a> [ang](<b c.md>)\n"
	var got []string
	for _, l := range extractLinks(md) {
		got = append(got, l.target)
	}
	if want := "a.md i.png docs/r.md#x h.md"; strings.Join(got, " ") != want {
		t.Errorf("links %q, want %q", strings.Join(got, " "), want)
	}
}

// A missing file, a missing anchor, an anchor into a moved section and a
// path out of the tree are each reported with their line; good links,
// external ones and anchors into non-Markdown files are not.
func TestCheck(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, s string) {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("README.md", "# Top\n\n## Serving remote agents (HTTP)\n\n"+
		"[ok](docs/x.md#moved-here) [ok2](#top) [ok3](docs/) [ext](https://example.com/#nope) [src](main.go#L3)\n"+
		"[gone](docs/missing.md) [stale](docs/x.md#serving-remote-agents-http) [self](#nothing)\n"+
		"[out](../elsewhere.md) [root](/docs/x.md#moved-here)\n")
	write("docs/x.md", "# X\n\n## Moved here\n\n[back](../README.md#serving-remote-agents-http)\n")
	write("main.go", "package main\n")
	problems, links, files, err := check(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"README.md:6: docs/missing.md: no such file or directory",
		"README.md:6: docs/x.md#serving-remote-agents-http: no heading with anchor #serving-remote-agents-http",
		"README.md:6: #nothing: no heading with anchor #nothing",
		"README.md:7: ../elsewhere.md: leads outside the repository",
	}
	if strings.Join(problems, "\n") != strings.Join(want, "\n") {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(problems, "\n"), strings.Join(want, "\n"))
	}
	if links != 10 || files != 2 {
		t.Errorf("%d links in %d files, want 10 in 2", links, files)
	}
}
