package main

import (
	"bytes"
	"strings"
	"testing"
)

// stream is test2json's account of a run: a package that passed, one with a failed subtest
// and a skipped test, a package that did not build, and a test that never ended (its binary
// died).
const stream = `{"Action":"start","Package":"ex/a"}
{"Action":"run","Package":"ex/a","Test":"TestQuick"}
{"Action":"output","Package":"ex/a","Test":"TestQuick","Output":"=== RUN   TestQuick\n"}
{"Action":"output","Package":"ex/a","Test":"TestQuick","Output":"    a_test.go:9: quiet when it passes\n"}
{"Action":"pass","Package":"ex/a","Test":"TestQuick","Elapsed":0.5}
{"Action":"pass","Package":"ex/a","Test":"TestSlow","Elapsed":12.25}
{"Action":"output","Package":"ex/a","Output":"PASS\n"}
{"Action":"output","Package":"ex/a","Output":"ok  \tex/a\t12.8s\n"}
{"Action":"pass","Package":"ex/a","Elapsed":12.8}
{"Action":"output","Package":"ex/b","Test":"TestTable","Output":"=== RUN   TestTable\n"}
{"Action":"output","Package":"ex/b","Test":"TestTable/one","Output":"    b_test.go:20: got 1, want 2\n"}
{"Action":"output","Package":"ex/b","Test":"TestTable/one","Output":"    --- FAIL: TestTable/one (0.10s)\n"}
{"Action":"fail","Package":"ex/b","Test":"TestTable/one","Elapsed":0.1}
{"Action":"output","Package":"ex/b","Test":"TestTable","Output":"--- FAIL: TestTable (3.00s)\n"}
{"Action":"fail","Package":"ex/b","Test":"TestTable","Elapsed":3}
{"Action":"skip","Package":"ex/b","Test":"TestSkipped","Elapsed":0}
{"Action":"output","Package":"ex/b","Test":"TestHang","Output":"panic: test timed out after 10m0s\n"}
{"Action":"output","Package":"ex/b","Output":"FAIL\tex/b\t600.1s\n"}
{"Action":"fail","Package":"ex/b","Elapsed":600.1}
{"ImportPath":"ex/c [ex/c.test]","Action":"build-output","Output":"c_test.go:3:1: syntax error\n"}
{"ImportPath":"ex/c [ex/c.test]","Action":"build-fail"}
FAIL	ex/c [build failed]
`

func TestReportKeepsFailuresAndListsTheSlowest(t *testing.T) {
	var out bytes.Buffer
	times, failed, err := report(strings.NewReader(stream), &out)
	if err != nil || !failed {
		t.Fatalf("report: failed=%t err=%v", failed, err)
	}
	printSlowest(&out, times, 2)
	got := out.String()
	for _, want := range []string{
		"ok  \tex/a\t12.8s\n",
		"    b_test.go:20: got 1, want 2\n    --- FAIL: TestTable/one (0.10s)\n",
		"=== RUN   TestTable\n--- FAIL: TestTable (3.00s)\n",
		"FAIL\tex/b\t600.1s\n",
		"c_test.go:3:1: syntax error\n",
		"FAIL\tex/c [build failed]\n",
		"panic: test timed out after 10m0s\n",
		"\nthe 2 slowest tests:\n   12.25s  ex/a TestSlow\n    3.00s  ex/b TestTable (FAIL)\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("no %q in\n%s", want, got)
		}
	}
	for _, not := range []string{"quiet when it passes", "TestQuick\n", "PASS\n"} {
		if strings.Contains(got, not) {
			t.Errorf("%q in\n%s", not, got)
		}
	}
}

func TestReportOfAPassingRun(t *testing.T) {
	var out bytes.Buffer
	times, failed, err := report(strings.NewReader(stream[:strings.Index(stream, `{"Action":"output","Package":"ex/b"`)]), &out)
	if err != nil || failed || len(times) != 2 {
		t.Fatalf("report: failed=%t err=%v times=%v", failed, err, times)
	}
}

// TestReportOfTest2JSONAlone: scripts/race.sh heavy runs test binaries through test2json,
// without go test, which prints a package's ok or FAIL line; the report prints them from the
// package's end event, once.
func TestReportOfTest2JSONAlone(t *testing.T) {
	const direct = `{"Action":"start","Package":"ex/d"}
{"Action":"pass","Package":"ex/d","Test":"TestOne","Elapsed":1.5}
{"Action":"output","Package":"ex/d","Output":"PASS\n"}
{"Action":"pass","Package":"ex/d","Elapsed":2.25}
{"Action":"start","Package":"ex/e"}
{"Action":"output","Package":"ex/e","Test":"TestTwo","Output":"    e_test.go:4: broken\n"}
{"Action":"fail","Package":"ex/e","Test":"TestTwo","Elapsed":0.5}
{"Action":"output","Package":"ex/e","Output":"FAIL\n"}
{"Action":"fail","Package":"ex/e","Elapsed":0.75}
`
	var out bytes.Buffer
	_, failed, err := report(strings.NewReader(direct), &out)
	if err != nil || !failed {
		t.Fatalf("report: failed=%t err=%v", failed, err)
	}
	if got, want := out.String(), "ok  \tex/d\t2.250s\n    e_test.go:4: broken\nFAIL\nFAIL\tex/e\t0.750s\n"; got != want {
		t.Errorf("report:\n%q\nwant\n%q", got, want)
	}
	// Through go test, the package's own line is the only one.
	out.Reset()
	if _, _, err := report(strings.NewReader(stream), &out); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out.String(), "ex/a\t"); n != 1 {
		t.Errorf("%d ok lines of ex/a in\n%s", n, out.String())
	}
}
