package validate

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/capadapter/capclient"
)

func run(t *testing.T, cfg Config) Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return RunCapability(ctx, cfg)
}

func dump(rep Report) string {
	var b strings.Builder
	for _, p := range rep.Probes {
		b.WriteString(p.Name)
		if p.Pass {
			b.WriteString(" pass")
		} else {
			b.WriteString(" FAIL")
		}
		b.WriteString(": " + p.Detail + "\n")
	}
	return b.String()
}

func wantAllPass(t *testing.T, rep Report, names ...string) {
	t.Helper()
	if !rep.Pass || rep.Failed != 0 {
		t.Fatalf("report fails:\n%s", dump(rep))
	}
	for _, n := range names {
		p, ok := rep.Probe(n)
		if !ok || !p.Pass || p.Skipped {
			t.Errorf("probe %s: %+v (present %v)", n, p, ok)
		}
	}
}

var conformanceProbes = []string{ProbeList, ProbeDescribe, ProbeObserve, ProbeInvoke, ProbeUnsupportedAction,
	ProbeUnknownCapability, ProbeInvalidArgs, ProbeProtocolVersion, ProbeUnsupportedMethod, ProbeDeadline,
	ProbeBounds, ProbeScreens, ProbeStdinClose}

func TestGoLamp(t *testing.T) {
	lamp := buildLamp(t)
	trackChildren(t)
	rep := run(t, Config{Command: lamp, Action: "set_power", ActionArgs: json.RawMessage(`{"on":true}`), Fault: faultConfig(t)})
	wantAllPass(t, rep, conformanceProbes...)
	for _, m := range FaultModes {
		wantAllPass(t, rep, "fault."+m)
	}
	if len(rep.Probes) != len(conformanceProbes)+len(FaultModes) {
		t.Errorf("%d probes, want %d:\n%s", len(rep.Probes), len(conformanceProbes)+len(FaultModes), dump(rep))
	}
	// go-lamp exits on a wrong protocolVersion, which is allowed.
	if p, _ := rep.Probe(ProbeProtocolVersion); !strings.Contains(p.Detail, "exited") {
		t.Errorf("protocol_version: %q", p.Detail)
	}
}

// TestFaultProbesRunAtOnce: the fault probes run side by side, each with a child of its own,
// and are reported in FaultModes' order. The two that wait out the call deadline (missing,
// hang-list) overlap: each child, when it starts, finds the other's running. One after the
// other, every run of the validator waited out both.
func TestFaultProbesRunAtOnce(t *testing.T) {
	trackChildren(t)
	var mu sync.Mutex
	alive := map[string]*capclient.Client{}
	overlapped := false
	tracked := onSpawn
	onSpawn = func(c *capclient.Client) {
		tracked(c)
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", c.PID()))
		if err != nil {
			t.Errorf("child %d: %v", c.PID(), err)
			return
		}
		args := strings.Split(strings.TrimSuffix(string(cmdline), "\x00"), "\x00")
		mode := args[len(args)-1]
		mu.Lock()
		defer mu.Unlock()
		alive[mode] = c
		other := map[string]string{FaultMissing: FaultHangList, FaultHangList: FaultMissing}[mode]
		if o := alive[other]; o != nil {
			select {
			case <-o.Done():
			default:
				overlapped = true
			}
		}
	}
	var rep Report
	runFaultProbes(context.Background(), faultConfig(t), &rep)
	var names []string
	for _, p := range rep.Probes {
		if !p.Pass {
			t.Errorf("%s: %s", p.Name, p.Detail)
		}
		names = append(names, strings.TrimPrefix(p.Name, "fault."))
	}
	if !slices.Equal(names, FaultModes) {
		t.Errorf("probes reported as %v, want %v", names, FaultModes)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(alive) != len(FaultModes) {
		t.Errorf("children of %d modes started, want %d", len(alive), len(FaultModes))
	}
	if !overlapped {
		t.Error("the missing and hang-list probes ran one after the other")
	}
}

func TestGoLampWithoutAction(t *testing.T) {
	lamp := buildLamp(t)
	trackChildren(t)
	rep := run(t, Config{Command: lamp})
	wantAllPass(t, rep)
	if p, _ := rep.Probe(ProbeInvoke); !p.Skipped || !strings.Contains(p.Detail, "--action") {
		t.Errorf("invoke without --action: %+v", p)
	}
	if _, ok := rep.Probe("fault." + FaultCrash); ok {
		t.Error("fault probes ran without Config.Fault")
	}
}

func TestStrictAdapterPasses(t *testing.T) {
	trackChildren(t)
	rep := run(t, testConfig(t, "good"))
	wantAllPass(t, rep, conformanceProbes...)
	if p, _ := rep.Probe(ProbeInvalidArgs); strings.Contains(p.Detail, "warning") {
		t.Errorf("invalid_args warns for a strict adapter: %q", p.Detail)
	}
	if p, _ := rep.Probe(ProbeProtocolVersion); !strings.Contains(p.Detail, "kept serving") {
		t.Errorf("protocol_version: %q", p.Detail)
	}
}

// TestWrongVersionOtherIDWarns: an adapter that answers a request of another protocolVersion
// with invalid_request under an id other than the request's (Free4Chat's CUPS adapter answers
// "invalid") passes, with a warning on protocol_version that says why it is not a failure.
func TestWrongVersionOtherIDWarns(t *testing.T) {
	trackChildren(t)
	cfg := testConfig(t, "version-other-id")
	cfg.ShowAdapterText = true
	rep := run(t, cfg)
	wantAllPass(t, rep, conformanceProbes...)
	p, _ := rep.Probe(ProbeProtocolVersion)
	for _, want := range []string{"warning", `id "invalid"`, "kept serving", "does not define", "never sends"} {
		if !strings.Contains(p.Detail, want) {
			t.Errorf("protocol_version detail %q lacks %q", p.Detail, want)
		}
	}
	if !p.Warning || rep.Warnings != 1 || rep.Passed != len(conformanceProbes) {
		t.Errorf("protocol_version %+v; report warnings %d, passed %d", p, rep.Warnings, rep.Passed)
	}
	// The strict adapter has no warning.
	if rep := run(t, testConfig(t, "good")); rep.Warnings != 0 {
		t.Errorf("a strict adapter warns:\n%s", dump(rep))
	}
}

func TestBrokenAdapters(t *testing.T) {
	cases := []struct {
		mode   string
		fail   []string
		detail string // in the first failing probe's detail
		cfg    func(*Config)
		sent   []string // requests the first failing probe's detail must name, arguments included
	}{
		{mode: "accept-args", fail: []string{ProbeInvalidArgs}, detail: "missing", sent: []string{
			`sent {"protocolVersion":1,"method":"invoke","capabilityId":"test_light","action":"set_level","args":{}}): answered with a result, want error invalid_args`,
			`sent {"protocolVersion":1,"method":"invoke","capabilityId":"test_light","action":"set_level","args":{"level":"1"}}`,
			`sent {"protocolVersion":1,"method":"invoke","capabilityId":"test_light","action":"set_level","args":{"airlock_undeclared_probe":"probe","level":0}}`,
			`sent {"protocolVersion":1,"method":"invoke","capabilityId":"test_light","action":"flip","args":{"airlock_undeclared_probe":"probe"}}`,
		}},
		{mode: "no-exit", fail: []string{ProbeStdinClose}, detail: "stdin close"},
		{mode: "describe-differs", fail: []string{ProbeDescribe}, detail: "differs"},
		{mode: "sensitive", fail: []string{ProbeList, ProbeScreens}, detail: "invalid_descriptor"},
		{mode: "slow-observe", fail: []string{ProbeObserve, ProbeDeadline}, detail: "timeout",
			// The deadline is far below the adapter's delay and far above a fresh child's
			// start (a race-built test binary on a loaded machine missed 300 ms in CI).
			cfg: func(c *Config) { c.Timeout = 2 * time.Second }},
		{mode: "big-result", fail: []string{ProbeObserve, ProbeBounds}, detail: "over 4096"},
		{mode: "amp-titles", fail: []string{ProbeList, ProbeBounds}, detail: "too_large: descriptor is 1",
			sent: []string{"bytes, over 1024", `escaped as \u003c, \u003e and \u0026`}},
		{mode: "version-result", fail: []string{ProbeProtocolVersion}, detail: "want invalid_request",
			sent: []string{`(sent {"protocolVersion":2,"method":"list"}): answered a result`}},
		// Another id is a warning only for invalid_request from an adapter that keeps serving.
		{mode: "version-other-id-exit", fail: []string{ProbeProtocolVersion}, detail: "did not answer a list afterwards",
			sent: []string{`(sent {"protocolVersion":2,"method":"list"})`}},
		{mode: "version-other-result", fail: []string{ProbeProtocolVersion}, detail: "malformed_response",
			sent: []string{`(sent {"protocolVersion":2,"method":"list"})`}},
		{mode: "no-unsupported-method", fail: []string{ProbeUnsupportedMethod}, detail: "answered invalid_request",
			sent: []string{`sent {"protocolVersion":1,"method":"airlock_unknown_method"}`}},
		{mode: "no-unsupported-action", fail: []string{ProbeUnsupportedAction}, detail: "answered invalid_request",
			sent: []string{`sent {"protocolVersion":1,"method":"invoke","capabilityId":"test_light","action":"airlock_unsupported_probe","args":{}}`}},
		{mode: "no-unknown-capability", fail: []string{ProbeUnknownCapability}, detail: "answered invalid_request",
			sent: []string{`sent {"protocolVersion":1,"method":"observe","capabilityId":"airlock.unknown-probe"}`}},
	}
	for _, tc := range cases {
		t.Run(tc.mode, func(t *testing.T) {
			trackChildren(t)
			cfg := testConfig(t, tc.mode)
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			rep := run(t, cfg)
			if rep.Pass {
				t.Fatalf("report passes:\n%s", dump(rep))
			}
			var failed []string
			for _, p := range rep.Probes {
				if !p.Pass {
					failed = append(failed, p.Name)
				}
			}
			if strings.Join(failed, ",") != strings.Join(tc.fail, ",") {
				t.Fatalf("failed probes %v, want %v:\n%s", failed, tc.fail, dump(rep))
			}
			p, _ := rep.Probe(tc.fail[0])
			for _, want := range append([]string{tc.detail}, tc.sent...) {
				if !strings.Contains(p.Detail, want) {
					t.Errorf("%s detail %q lacks %q", p.Name, p.Detail, want)
				}
			}
		})
	}
}

// TestFailuresSayHowTheProcessEnded: a child that crashed or did not exit cleanly is reported
// with its exit status and, with ShowAdapterText, its last stderr lines, which are its author's only
// clue; without ShowAdapterText (the daemon's runs) no stderr text is in the report.
func TestFailuresSayHowTheProcessEnded(t *testing.T) {
	cases := []struct {
		mode, probe, stderr string
		want                []string
	}{
		{mode: "exit-status", probe: ProbeStdinClose, stderr: "cleanup failed: lost the device",
			want: []string{"exited", "not with status 0", "exit status 3"}},
		{mode: "crash-observe", probe: ProbeObserve, stderr: "observe crashed: no device",
			want: []string{"closed its stdout", "exit status 1"}},
	}
	for _, tc := range cases {
		for _, show := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/ShowAdapterText=%v", tc.mode, show), func(t *testing.T) {
				trackChildren(t)
				cfg := testConfig(t, tc.mode)
				cfg.ShowAdapterText = show
				rep := run(t, cfg)
				p, _ := rep.Probe(tc.probe)
				if p.Pass {
					t.Fatalf("%s passes:\n%s", tc.probe, dump(rep))
				}
				want := tc.want
				if show {
					want = append(want, tc.stderr)
				} else if strings.Contains(dump(rep), tc.stderr) {
					t.Errorf("the report quotes stderr without ShowAdapterText:\n%s", dump(rep))
				}
				for _, w := range want {
					if !strings.Contains(p.Detail, w) {
						t.Errorf("%s detail %q lacks %q", p.Name, p.Detail, w)
					}
				}
				if strings.Contains(p.Detail, "signalled") {
					t.Errorf("%s detail %q says the adapter was signalled", p.Name, p.Detail)
				}
			})
		}
	}
}

func TestConfigCheck(t *testing.T) {
	for _, cfg := range []Config{
		{},
		{Command: "/bin/true", Timeout: time.Millisecond},
		{Command: "/bin/true", ActionArgs: json.RawMessage(`{}`)},
		{Command: "/bin/true", Action: "a", ActionArgs: json.RawMessage(`{`)},
	} {
		if cfg.Check() == nil {
			t.Errorf("%+v: Check passes", cfg)
		}
		if rep := RunCapability(context.Background(), cfg); rep.Pass || len(rep.Probes) != 1 {
			t.Errorf("%+v: %+v", cfg, rep)
		}
	}
}

func TestFaultAdapterUnknownMode(t *testing.T) {
	if code := RunFaultAdapter("nope", strings.NewReader(""), &strings.Builder{}); code != 2 {
		t.Errorf("unknown mode: exit %d", code)
	}
}

// TestWithheldResultWarns: a result that fails a screen is no protocol violation (the runtime
// withholds it from its caller and keeps the adapter), so the harness passes the adapter and
// warns, naming the call, the screen and what it found: for an observe whose state carries a
// URL, and for the test's notice board, which echoes the text an invoke gave it.
func TestWithheldResultWarns(t *testing.T) {
	t.Run("url-result", func(t *testing.T) {
		trackChildren(t)
		rep := run(t, testConfig(t, "url-result"))
		wantAllPass(t, rep, conformanceProbes...)
		for _, name := range []string{ProbeObserve, ProbeScreens} {
			p, _ := rep.Probe(name)
			for _, want := range []string{"warning: ", `observe test_light (sent {"protocolVersion":1,"method":"observe","capabilityId":"test_light"})`,
				"result_withheld: it fails the url screen", "its callers would get result_withheld", "must screen that text itself"} {
				if !strings.Contains(p.Detail, want) {
					t.Errorf("%s detail %q lacks %q", name, p.Detail, want)
				}
			}
		}
	})
	for _, show := range []bool{true, false} {
		t.Run(fmt.Sprintf("noticeboard/ShowAdapterText=%v", show), func(t *testing.T) {
			board := buildAdapter(t, "./internal/daemontest/noticeboard")
			trackChildren(t)
			rep := run(t, Config{Command: board, Action: "post", ActionArgs: json.RawMessage(`{"text":"wifi password: hunter2"}`), ShowAdapterText: show})
			wantAllPass(t, rep, conformanceProbes...)
			if p, _ := rep.Probe(ProbeObserve); strings.HasPrefix(p.Detail, "warning") {
				t.Errorf("observe of an empty board warns: %q", p.Detail)
			}
			// The result's text is quoted for the author only: the daemon shows its reports
			// of proposals to the proposing session, and an adapter's result must not reach
			// a caller that way.
			result := `URL or sensitive key:value in "wifi password: hunter2"`
			if !show {
				result = "URL or sensitive key:value in (a text of 22 characters, not shown)"
			}
			for _, name := range []string{ProbeInvoke, ProbeScreens} {
				p, _ := rep.Probe(name)
				for _, want := range []string{"warning: ", "invoke notice_board.post", "result_withheld: it fails the sensitive_text screen", result} {
					if !strings.Contains(p.Detail, want) {
						t.Errorf("%s detail %q lacks %q", name, p.Detail, want)
					}
				}
			}
		})
	}
}
