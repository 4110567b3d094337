package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/validate"
)

// buildPlain builds pkg without -race: a race-built program sleeps a second when it exits with
// status 0, which would miss the stdin-close bound.
func buildPlain(t *testing.T, dir, pkg string) string {
	t.Helper()
	out := filepath.Join(dir, filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = filepath.Join("..", "..")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	return out
}

func runValidate(t *testing.T, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	code := run(ctx, append([]string{"validate", "capability"}, args...), strings.NewReader(""), &out, &errb)
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}

func TestValidateCapability(t *testing.T) {
	dir := t.TempDir()
	lamp := buildPlain(t, dir, "./examples/adapters/go-lamp")
	// The test binary does not dispatch the hidden fault mode: the fault probes run a built
	// airlock, as they run the installed one in production.
	airlock := buildPlain(t, dir, "./cmd/airlock")
	saved := faultAdapter
	faultAdapter = func(mode string) (string, []string) {
		return airlock, []string{"validate", "capability", faultArg, mode}
	}
	t.Cleanup(func() { faultAdapter = saved })

	r := runValidate(t, "--action", "set_power", "--args", `{"on":true}`, "--", lamp).wantCode(t, exitOK)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	for _, want := range []string{"PASS list", "PASS describe", "PASS observe", "PASS invoke", "PASS unsupported_action",
		"PASS unknown_capability", "PASS protocol_version", "PASS unsupported_method", "PASS deadline", "PASS bounds",
		"PASS screens", "PASS stdin_close", "PASS fault.malformed", "PASS fault.oversized", "PASS fault.duplicate",
		"PASS fault.missing", "PASS fault.crash", "PASS fault.hang-list"} {
		found := false
		for _, l := range lines {
			found = found || l == want
		}
		if !found {
			t.Errorf("no line %q in\n%s", want, r.stdout)
		}
	}
	if !strings.Contains(r.stdout, "PASS invalid_args") || strings.Contains(r.stdout, "FAIL") {
		t.Errorf("output:\n%s", r.stdout)
	}
	if last := lines[len(lines)-1]; !strings.HasPrefix(last, "PASS: 19 passed, 0 failed, 0 skipped of 19 probes") {
		t.Errorf("summary %q", last)
	}

	r = runValidate(t, "--json", "--", lamp).wantCode(t, exitOK)
	var env jsonEnvelope
	if err := json.Unmarshal([]byte(r.stdout), &env); err != nil {
		t.Fatalf("--json: %v\n%s", err, r.stdout)
	}
	var rep validate.Report
	if err := json.Unmarshal(env.Data, &rep); err != nil {
		t.Fatal(err)
	}
	if env.Schema != cliSchema || env.Command != "validate capability" || !env.OK || !rep.Pass || rep.Skipped != 1 || len(rep.Probes) != 19 {
		t.Errorf("--json envelope %+v report %+v", env, rep)
	}
	if p, _ := rep.Probe(validate.ProbeInvoke); !p.Skipped {
		t.Errorf("invoke without --action: %+v", p)
	}

	// An adapter that exits at once fails list; --json still carries the report.
	r = runValidate(t, "--json", "--", "true").wantCode(t, exitFailure)
	env = jsonEnvelope{}
	if err := json.Unmarshal([]byte(r.stdout), &env); err != nil {
		t.Fatalf("--json: %v\n%s", err, r.stdout)
	}
	rep = validate.Report{}
	if err := json.Unmarshal(env.Data, &rep); err != nil {
		t.Fatal(err)
	}
	if env.OK || env.Error == nil || env.Error.Code != codeConformance || rep.Pass {
		t.Errorf("failing --json envelope %+v", env)
	}
	if p, _ := rep.Probe(validate.ProbeList); p.Pass {
		t.Errorf("list of /bin/true passes: %+v", p)
	}
	if !strings.Contains(r.stderr, "airlock: conformance:") {
		t.Errorf("stderr %q", r.stderr)
	}
}

func TestValidateCapabilityFailureLines(t *testing.T) {
	saved := faultAdapter
	faultAdapter = nil // no fault probes: this test is about the adapter under test
	t.Cleanup(func() { faultAdapter = saved })
	// cat echoes each request back: not a response, so list fails.
	r := runValidate(t, "--", "cat")
	if r.code != exitFailure {
		t.Fatalf("exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stdout, "FAIL list: ") || !strings.Contains(r.stdout, "\nFAIL: ") {
		t.Errorf("stdout:\n%s", r.stdout)
	}
}

// TestValidateCapabilityWarning: the project's own test adapter that answers a wrong
// protocolVersion with invalid_request under the id "invalid", as Free4Chat's CUPS adapter
// does, passes with a WARN line saying why it is not a failure; --json counts the warning.
func TestValidateCapabilityWarning(t *testing.T) {
	saved := faultAdapter
	faultAdapter = nil // this test is about the adapter under test
	t.Cleanup(func() { faultAdapter = saved })
	adapter := buildPlain(t, t.TempDir(), "./cmd/airlock/testdata/otherid")
	r := runValidate(t, "--", adapter).wantCode(t, exitOK)
	if !strings.Contains(r.stdout, `WARN protocol_version: warning: answered invalid_request with the id "invalid", not the request's id, and kept serving. Not a failure: the protocol does not define`) ||
		!strings.Contains(r.stdout, "PASS: 12 passed, 0 failed, 1 skipped of 13 probes (1 passed with a warning)") || strings.Contains(r.stdout, "FAIL") {
		t.Errorf("stdout:\n%s", r.stdout)
	}
	r = runValidate(t, "--json", "--", adapter).wantCode(t, exitOK)
	var env jsonEnvelope
	var rep validate.Report
	if err := json.Unmarshal([]byte(r.stdout), &env); err != nil || json.Unmarshal(env.Data, &rep) != nil {
		t.Fatalf("--json: %v\n%s", err, r.stdout)
	}
	if p, _ := rep.Probe(validate.ProbeProtocolVersion); !rep.Pass || rep.Warnings != 1 || !p.Pass || !p.Warning {
		t.Errorf("--json report %+v", rep)
	}
}

func TestValidateCapabilityUsage(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"--"},
		{"--args", `{}`, "--", "true"},
		{"--action", "a", "--args", `{`, "--", "true"},
		{"--timeout", "1ms", "--", "true"},
		{"--", "no-such-adapter-command-here"},
		{"extra", "--", "true"},
		{"--pass-env", "LD_PRELOAD", "--", "true"},
		{"--pass-env", "A=B", "--", "true"},
	} {
		if r := runValidate(t, args...); r.code != exitUsage {
			t.Errorf("%q: exit %d, want %d\n%s", args, r.code, exitUsage, r.stderr)
		}
	}
	// The hidden mode serves a built-in misbehaving adapter on stdin and stdout.
	var fault bytes.Buffer
	code := run(context.Background(), []string{"validate", "capability", faultArg, validate.FaultMalformed},
		strings.NewReader(`{"protocolVersion":1,"id":"1","method":"list"}`+"\n"), &fault, &fault)
	if code != 0 || fault.String() != "not-json\n" {
		t.Errorf("fault mode: exit %d, output %q", code, fault.String())
	}
	var out bytes.Buffer
	run(context.Background(), []string{"help"}, strings.NewReader(""), &out, &out)
	if !strings.Contains(out.String(), "validate capability") || strings.Contains(out.String(), faultArg) {
		t.Errorf("help:\n%s", out.String())
	}
}
