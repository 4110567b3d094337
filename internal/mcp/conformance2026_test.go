package mcp_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
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
	e := startEnv(t)
	fsp := startFS(t)
	e.open(t, "agent", e.root, fsp.grant(t, e.host, e.root, "agent", 1, "fs.read,fs.list,fs.stat"))
	u, _ := tokenProxy(t, e, "agent")

	ctx, cancel := context.WithTimeout(context.Background(), clientTimeout)
	defer cancel()
	results := t.TempDir()
	cmd := nodeCommand(t, ctx, "conformance", "server", "--url", u, "--requirements", "2026-07-28", "-o", results)
	out, runErr := cmd.CombinedOutput()
	dirs, err := os.ReadDir(results)
	if err != nil {
		t.Fatal(err)
	}
	var passed, stateless []string
	checks := map[string]int{}
	failures := map[string][]string{} // scenario → its failed checks' messages
	for _, d := range dirs {
		scenario, ok := strings.CutPrefix(d.Name(), "server-")
		if !ok {
			continue
		}
		scenario = resultStamp.ReplaceAllString(scenario, "")
		b, err := os.ReadFile(filepath.Join(results, d.Name(), "checks.json"))
		if err != nil {
			t.Fatal(err)
		}
		var cs []struct{ ID, Status, ErrorMessage string }
		if err := json.Unmarshal(b, &cs); err != nil {
			t.Fatalf("%s: %v", d.Name(), err)
		}
		ok = true
		for _, c := range cs {
			checks[c.Status]++
			if c.Status != "FAILURE" {
				continue
			}
			ok = false
			failures[scenario] = append(failures[scenario], c.ID+": "+c.ErrorMessage)
			if scenario == "server-stateless" {
				stateless = append(stateless, c.ID)
			}
			if c.ID == "wire-schema-valid" {
				t.Errorf("%s: airlock sent a message the spec's schema refuses: %s", scenario, c.ErrorMessage)
			}
		}
		if ok {
			passed = append(passed, scenario)
		}
	}
	if len(checks) == 0 {
		t.Fatalf("conformance ran no scenario: %v\n%s", runErr, out)
	}
	for _, s := range conformance2026Passes {
		if !slices.Contains(passed, s) {
			t.Errorf("scenario %s failed: %q\n%s", s, failures[s], out)
		}
	}
	slices.Sort(stateless)
	if !slices.Equal(stateless, statelessFailures) {
		t.Errorf("server-stateless failed %v, want exactly %v\n%s", stateless, statelessFailures, out)
	}
	slices.Sort(passed)
	t.Logf("conformance 2026-07-28: %d server scenarios pass %v (checks: %d passed, %d failed, %d warnings)",
		len(passed), passed, checks["SUCCESS"], checks["FAILURE"], checks["WARNING"])
}
