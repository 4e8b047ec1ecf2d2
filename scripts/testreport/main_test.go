package main

import (
	"strings"
	"testing"
)

// A passing test's output stays hidden, a failing one's shows, and skips
// are grouped by their reason, as the summary at the end lists them.
func TestReport(t *testing.T) {
	t.Parallel()
	in := `{"Action":"run","Package":"p","Test":"TestA"}
{"Action":"output","Package":"p","Test":"TestA","Output":"=== RUN   TestA\n"}
{"Action":"output","Package":"p","Test":"TestA","Output":"    a_test.go:9: noise of a passing test\n"}
{"Action":"pass","Package":"p","Test":"TestA"}
{"Action":"output","Package":"p","Test":"TestK","Output":"    k_test.go:12: SKIPPED: no cluster: set KUBECONFIG\n"}
{"Action":"output","Package":"p","Test":"TestK","Output":"--- SKIP: TestK (0.00s)\n"}
{"Action":"skip","Package":"p","Test":"TestK"}
{"Action":"output","Package":"q","Test":"TestK2","Output":"    k_test.go:40: SKIPPED: no cluster: set KUBECONFIG\n"}
{"Action":"skip","Package":"q","Test":"TestK2"}
{"Action":"output","Package":"q","Test":"TestF","Output":"    f_test.go:3: it broke\n"}
{"Action":"output","Package":"q","Test":"TestF","Output":"--- FAIL: TestF (0.00s)\n"}
{"Action":"fail","Package":"q","Test":"TestF"}
{"Action":"output","Package":"p","Output":"PASS\n"}
{"Action":"output","Package":"p","Output":"ok  \tp\t0.1s\n"}
{"Action":"skip","Package":"r"}
not json: a build error
`
	var out strings.Builder
	skips := report(strings.NewReader(in), &out)
	got := out.String()
	for _, want := range []string{"it broke", "--- FAIL: TestF", "ok  \tp", "not json: a build error"} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	for _, not := range []string{"noise of a passing test", "PASS\n", "SKIPPED"} {
		if strings.Contains(got, not) {
			t.Errorf("output shows %q:\n%s", not, got)
		}
	}
	s := skips["SKIPPED: no cluster: set KUBECONFIG"]
	if len(skips) != 1 || s == nil || strings.Join(s.tests, ",") != "p.TestK,q.TestK2" {
		t.Fatalf("skips = %+v", skips)
	}
	var sum strings.Builder
	printSkips(&sum, skips)
	if !strings.Contains(sum.String(), "2 tests skipped, in 1 groups:\n  2: SKIPPED: no cluster: set KUBECONFIG\n     p.TestK, q.TestK2") {
		t.Errorf("summary:\n%s", sum.String())
	}
}
