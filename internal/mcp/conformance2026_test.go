package mcp_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
)

// conformance2026Passes are server scenarios of the 2026-07-28 requirement set that airlock
// mcp must pass. Before Streamable HTTP served 2026-07-28, none of the last six passed (the suite
// counted 68 checks passed and 90 failed; now 106 and 66). The suite's other passes are not
// held: the input-required-result scenarios it passes need fixture tools airlock lacks, so they
// pass vacuously, and two of them were reported as failures in some runs while every check
// passed. The failures are fixture tools, prompts and resources (airlock's tools are exactly a
// grant), completions and the tasks extension, which airlock mcp does not offer.
var conformance2026Passes = []string{
	"dns-rebinding-protection", "sep-2164-resource-not-found",
	"caching", "http-header-validation", "prompts-list", "resources-list", "server-sse-multiple-streams", "tools-list",
}

// statelessFailures are the checks of the server-stateless scenario that airlock mcp fails:
// four exercise fixture tools it does not have (test_missing_capability,
// test_streaming_elicitation, test_logging_tool), and the go-sdk answers prompts/list (empty)
// without declaring prompts in server/discover. Every other check of the scenario passes.
var statelessFailures = []string{
	"sep-2575-http-server-no-independent-requests-on-stream",
	"sep-2575-missing-capability-http-400",
	"sep-2575-server-declares-prompts-in-discover",
	"sep-2575-server-no-log-without-loglevel",
	"sep-2575-server-rejects-undeclared-capability",
}

// TestConformance2026 runs the official conformance suite's server scenarios of the
// 2026-07-28 requirement set (the stateless revision, SEP-2575) against airlock mcp over
// Streamable HTTP, through TestConformance's token proxy: the scenarios of
// conformance2026Passes pass, server-stateless fails exactly statelessFailures, and no message
// airlock sent is refused by the spec's schema. The suite's exit status is not used, since it
// fails while any scenario does.
func TestConformance2026(t *testing.T) {
	npmBin(t, "conformance")
	// The daemon's log, which the environment prints when a test fails, would bury why it did
	// (CI shows the end of a failure's output): the reasons are reported after it.
	var reasons []string
	t.Cleanup(func() {
		for _, r := range reasons {
			t.Error(r)
		}
	})
	e := startEnv(t)
	fsp := startFS(t)
	e.open(t, "agent", e.root, fsp.grant(t, e.host, e.root, "agent", 1, "fs.read,fs.list,fs.stat"))
	u, bridge := tokenProxy(t, e, "agent")

	ctx, cancel := context.WithTimeout(context.Background(), clientTimeout)
	defer cancel()
	results := t.TempDir()
	out, _ := runConformance(t, ctx, u, results, "--requirements", "2026-07-28")
	scenarios := readConformance(t, results)

	// The suite gives many of its requests 500 or 600 ms (server-stateless's removed-method
	// probes, for one), which CI's load, with every package's tests beside it, can outlast: the
	// likely cause of the one CI run in which this test failed (in 4 s, its reason not shown;
	// not reproduced in 30 runs here). A scenario whose outcome is not the one expected is run
	// once more on its own; a second miss fails the test. The first run is logged.
	var again []string
	for name, cs := range scenarios {
		if want, held := expected2026(name); !held || slices.Equal(failedChecks(cs), want) {
			continue
		}
		again = append(again, name)
		for _, c := range cs {
			if c.Status == "FAILURE" {
				t.Logf("%s, first run: %s: %s", name, c.ID, c.ErrorMessage)
			}
		}
		dir := filepath.Join(results, "again-"+name)
		runConformance(t, ctx, u, dir, "--scenario", name, "--spec-version", "2026-07-28")
		scenarios[name] = readConformance(t, dir)[name]
	}
	if len(again) > 0 {
		slices.Sort(again)
		t.Logf("scenarios %v did not end as expected and ran again on their own. The first run:\n%s", again, out)
	}

	var passed []string
	checks := map[string]int{}
	failures := map[string][]string{} // scenario → its failed checks' messages
	for scenario, cs := range scenarios {
		for _, c := range cs {
			checks[c.Status]++
			if c.Status != "FAILURE" {
				continue
			}
			failures[scenario] = append(failures[scenario], c.ID+": "+c.ErrorMessage)
			if c.ID == "wire-schema-valid" {
				reasons = append(reasons, fmt.Sprintf("%s: airlock sent a message the spec's schema refuses: %s", scenario, c.ErrorMessage))
			}
		}
		if len(failures[scenario]) == 0 {
			passed = append(passed, scenario)
		}
	}
	if len(checks) == 0 {
		t.Fatalf("conformance ran no scenario\n%s", out)
	}
	for _, name := range append([]string{"server-stateless"}, conformance2026Passes...) {
		want, _ := expected2026(name)
		if cs, ran := scenarios[name]; !ran || len(cs) == 0 {
			reasons = append(reasons, fmt.Sprintf("scenario %s did not run", name))
		} else if got := failedChecks(cs); !slices.Equal(got, want) {
			reasons = append(reasons, fmt.Sprintf("scenario %s failed %q, want exactly %v", name, failures[name], want))
		}
	}
	if len(reasons) > 0 {
		// A scenario that timed out twice (once in CI, its cause not reproduced) needs to
		// show what the server was doing: its goroutines end the log.
		t.Logf("the suite's output:\n%s", out)
		t.Logf("airlock mcp --http's goroutines after the run:\n%s", bridge.dump())
	}
	slices.Sort(passed)
	t.Logf("conformance 2026-07-28: %d server scenarios pass %v (checks: %d passed, %d failed, %d warnings)",
		len(passed), passed, checks["SUCCESS"], checks["FAILURE"], checks["WARNING"])
}

// failedChecks returns the sorted ids of the checks in cs that failed.
func failedChecks(cs []conformanceCheck) []string {
	var ids []string
	for _, c := range cs {
		if c.Status == "FAILURE" {
			ids = append(ids, c.ID)
		}
	}
	slices.Sort(ids)
	return ids
}

// expected2026 returns the checks of scenario that must fail (none for a scenario of
// conformance2026Passes, statelessFailures for server-stateless), and whether the test holds
// the scenario to them at all.
func expected2026(scenario string) (want []string, held bool) {
	switch {
	case slices.Contains(conformance2026Passes, scenario):
		return nil, true
	case scenario == "server-stateless":
		return statelessFailures, true
	}
	return nil, false
}
