// Command testreport reads the events of `go test -json` on stdin and writes what a plain
// `go test` run would have shown: each package's ok/FAIL line, build errors, and the whole
// output of every test that failed (the output of tests that passed is dropped). At the end
// it lists the slowest top-level tests of the run, so that a test which became slow shows in
// every CI log. It exits with status 1 when a test, a package or a build failed.
//
// Usage: go test -json ... | go run ./scripts/testreport [-slowest N] [-only-slowest]
//
// scripts/test.sh reports each phase's events as they come with -slowest 0, and lists the
// slowest of both phases at the end with -only-slowest.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// maxLine bounds one event line; a test's output line longer than the scanner's buffer would
// end the report, so it is generous (test2json splits longer outputs into several events).
const maxLine = 16 << 20

// event is one line of test2json's output (cmd/test2json documents the fields).
type event struct {
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
}

// timing is one finished top-level test.
type timing struct {
	pkg, test string
	elapsed   float64
	action    string
}

// report turns the events of in into plain output on out; it returns the finished top-level
// tests and whether anything failed.
func report(in io.Reader, out io.Writer) ([]timing, bool, error) {
	pending := map[string][]string{} // package + "\x00" + test → its output so far
	var order []string               // the keys of pending, in the order their tests started
	summed := map[string]bool{}      // the packages whose ok/FAIL line was printed
	var times []timing
	failed := false
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	for sc.Scan() {
		line := sc.Bytes()
		var ev event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &ev) != nil {
			// Not an event: the go command's own messages (a build error of a package that
			// has no events) pass through.
			fmt.Fprintf(out, "%s\n", line)
			continue
		}
		key := ev.Package + "\x00" + ev.Test
		switch ev.Action {
		case "build-output":
			fmt.Fprint(out, ev.Output)
		case "build-fail":
			failed = true
		case "output":
			if ev.Test == "" {
				// A package's own lines: ok/FAIL and its time, a panic outside any test.
				if ev.Output != "PASS\n" && !strings.HasPrefix(ev.Output, "=== RUN") {
					fmt.Fprint(out, ev.Output)
				}
				if strings.HasPrefix(ev.Output, "ok  \t") || strings.HasPrefix(ev.Output, "FAIL\t") {
					summed[ev.Package] = true
				}
				continue
			}
			if _, ok := pending[key]; !ok {
				order = append(order, key)
			}
			pending[key] = append(pending[key], ev.Output)
		case "pass", "skip", "fail":
			if ev.Test == "" {
				failed = failed || ev.Action == "fail"
				// go test prints a package's ok/FAIL line; a test binary run straight through
				// test2json (scripts/race.sh heavy) does not, and its end event stands for it.
				if !summed[ev.Package] && ev.Action != "skip" {
					word := "ok  "
					if ev.Action == "fail" {
						word = "FAIL"
					}
					fmt.Fprintf(out, "%s\t%s\t%.3fs\n", word, ev.Package, ev.Elapsed)
				}
				continue
			}
			if ev.Action == "fail" {
				failed = true
				for _, o := range pending[key] {
					fmt.Fprint(out, o)
				}
			}
			delete(pending, key)
			if !strings.Contains(ev.Test, "/") {
				times = append(times, timing{pkg: ev.Package, test: ev.Test, elapsed: ev.Elapsed, action: ev.Action})
			}
		}
	}
	// A test binary that died (a timeout's panic, a crash) may leave tests with no end event:
	// their output is the only account of what happened.
	for _, key := range order {
		if outs, ok := pending[key]; ok {
			failed = true
			for _, o := range outs {
				fmt.Fprint(out, o)
			}
		}
	}
	return times, failed, sc.Err()
}

// printSlowest writes the n slowest of times, slowest first.
func printSlowest(out io.Writer, times []timing, n int) {
	slices.SortStableFunc(times, func(a, b timing) int {
		switch {
		case a.elapsed > b.elapsed:
			return -1
		case a.elapsed < b.elapsed:
			return 1
		}
		return 0
	})
	if len(times) > n {
		times = times[:n]
	}
	if len(times) == 0 {
		return
	}
	fmt.Fprintf(out, "\nthe %d slowest tests:\n", len(times))
	for _, t := range times {
		mark := ""
		if t.action == "fail" {
			mark = " (FAIL)"
		}
		fmt.Fprintf(out, "%8.2fs  %s %s%s\n", t.elapsed, t.pkg, t.test, mark)
	}
}

func main() {
	n := flag.Int("slowest", 10, "how many of the slowest tests to list")
	only := flag.Bool("only-slowest", false, "print only the list of the slowest tests (of events already reported)")
	flag.Parse()
	// Unbuffered: the log follows the run as it goes.
	var out io.Writer = os.Stdout
	if *only {
		out = io.Discard
	}
	times, failed, err := report(os.Stdin, out)
	printSlowest(os.Stdout, times, *n)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testreport:", err)
		os.Exit(2)
	}
	if failed {
		os.Exit(1)
	}
}
