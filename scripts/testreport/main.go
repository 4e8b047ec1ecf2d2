// Command testreport runs go test with the given arguments and prints what
// go test prints, then, at the end, every group of tests that skipped and
// why: without -v, go test says "ok" for a package whose tests all skipped
// (no cluster, no Docker engine), and the skips would be invisible.
//
//	go run ./scripts/testreport -race ./...
//
// It exits as go test does.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strings"
)

// event is one line of go test -json (cmd/test2json).
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

func main() {
	cmd := exec.Command("go", append([]string{"test", "-json"}, os.Args[1:]...)...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintln(os.Stderr, "testreport:", err)
		os.Exit(2)
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "testreport:", err)
		os.Exit(2)
	}
	skips := report(out, os.Stdout)
	err = cmd.Wait()
	printSkips(os.Stdout, skips)
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		os.Exit(ee.ExitCode())
	case err != nil:
		fmt.Fprintln(os.Stderr, "testreport:", err)
		os.Exit(2)
	}
}

// skip is why a group of tests skipped, and which.
type skip struct {
	reason string
	tests  []string // package.Test
}

// report copies go test's own output from the events on r to w, as go test
// without -json prints it (a test's output only when it fails), and
// returns the skips by reason.
func report(r io.Reader, w io.Writer) map[string]*skip {
	skips := map[string]*skip{}
	held := map[string][]string{} // a running test's output, by package/test
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e event
		if json.Unmarshal(sc.Bytes(), &e) != nil {
			fmt.Fprintln(w, sc.Text()) // not an event: a build error, say
			continue
		}
		key := e.Package + "." + e.Test
		switch {
		case e.Test == "" && e.Action == "output":
			// Package lines: "ok", "FAIL", "?" (go test alone prints no
			// "PASS" line for a package that passed).
			if e.Output != "PASS\n" {
				fmt.Fprint(w, e.Output)
			}
		case e.Test == "":
			// A package's own end (a package without tests "skips").
		case e.Action == "output":
			held[key] = append(held[key], e.Output)
		case e.Action == "fail":
			for _, l := range held[key] {
				fmt.Fprint(w, l)
			}
			delete(held, key)
		case e.Action == "skip":
			reason := skipReason(held[key])
			if skips[reason] == nil {
				skips[reason] = &skip{reason: reason}
			}
			skips[reason].tests = append(skips[reason].tests, shortPkg(e.Package)+"."+e.Test)
			delete(held, key)
		case e.Action == "pass":
			delete(held, key)
		}
	}
	return skips
}

// where is the file:line a test's log line starts with.
var where = regexp.MustCompile(`^\s*\S+\.go:\d+: `)

// skipReason is the message a skipped test gave (its last logged line).
func skipReason(lines []string) string {
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		if l == "" || strings.HasPrefix(l, "=== ") || strings.HasPrefix(l, "--- SKIP") {
			continue
		}
		return strings.TrimSpace(where.ReplaceAllString(lines[i], ""))
	}
	return "(no reason given)"
}

func shortPkg(p string) string {
	return strings.TrimPrefix(p, "github.com/sandbox-mcp/sandbox-mcp/")
}

// printSkips lists the groups of skipped tests, most tests first.
func printSkips(w io.Writer, skips map[string]*skip) {
	if len(skips) == 0 {
		fmt.Fprintln(w, "\nno test skipped")
		return
	}
	groups := make([]*skip, 0, len(skips))
	n := 0
	for _, s := range skips {
		groups = append(groups, s)
		n += len(s.tests)
	}
	sort.Slice(groups, func(i, j int) bool {
		if len(groups[i].tests) != len(groups[j].tests) {
			return len(groups[i].tests) > len(groups[j].tests)
		}
		return groups[i].reason < groups[j].reason
	})
	fmt.Fprintf(w, "\n%d tests skipped, in %d groups:\n", n, len(groups))
	for _, g := range groups {
		sort.Strings(g.tests)
		shown := g.tests
		more := ""
		if len(shown) > 4 {
			shown, more = shown[:4], fmt.Sprintf(" and %d more", len(g.tests)-4)
		}
		fmt.Fprintf(w, "  %d: %s\n     %s%s\n", len(g.tests), g.reason, strings.Join(shown, ", "), more)
	}
}
