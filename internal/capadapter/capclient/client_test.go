package capclient

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/capadapter"
)

func TestClientValidOperationsOnOneLongLivedChild(t *testing.T) {
	noLeaks(t)
	c := startHelper(t, "normal", ClientOptions{})
	ctx := context.Background()
	descs := c.Descriptors()
	if len(descs) != 2 || descs[0].CapabilityID != "test_light" || descs[1].CapabilityID != "test_switch" {
		t.Fatalf("descriptors = %+v", descs)
	}
	obs, err := c.Observe(ctx, "test_light")
	if err != nil {
		t.Fatal(err)
	}
	var o struct {
		Source string `json:"source"`
		PID    int    `json:"pid"`
		On     bool   `json:"on"`
	}
	if err := json.Unmarshal(obs, &o); err != nil || o.Source != "normal" || o.PID != c.PID() || o.On {
		t.Fatalf("observe = %s (%v)", obs, err)
	}
	res, err := c.Invoke(ctx, "test_light", "turn_on", json.RawMessage(`{"on":true}`))
	if err != nil || string(res) != `{"ok":true,"on":true}` {
		t.Fatalf("invoke = %s, %v", res, err)
	}
	obs, _ = c.Observe(ctx, "test_light")
	if err := json.Unmarshal(obs, &o); err != nil || !o.On || o.PID != c.PID() {
		t.Fatalf("second observe = %s: state or pid changed", obs)
	}
	// The adapter's own unsupported_action leaves the child running.
	_, err = c.Invoke(ctx, "test_light", "explode", json.RawMessage(`{}`))
	if e := wantCode(t, err, capadapter.CodeUnsupportedAction); !e.FromAdapter {
		t.Fatalf("%v not marked as reported by the adapter", err)
	}
	if c.Failure() != nil {
		t.Fatalf("child failed after an error response: %v", c.Failure())
	}
	// Wrong protocolVersion on a request: the adapter refuses it, the runtime stays up.
	resp, err := c.Call(ctx, capadapter.Request{ProtocolVersion: 2, Method: capadapter.MethodList})
	if err != nil || resp.ErrorCode != capadapter.CodeInvalidRequest {
		t.Fatalf("wrong-version request: %+v, %v", resp, err)
	}
	pid := c.PID()
	if err := c.Close(ctx); err != nil {
		t.Fatalf("Close: %v (a clean exit on stdin close is expected)", err)
	}
	if !reaped(pid) {
		t.Fatalf("pid %d not reaped after Close", pid)
	}
	if _, err := c.Observe(ctx, "test_light"); !errorsIsCode(err, capadapter.CodeUnavailable) {
		t.Fatalf("observe after Close: %v", err)
	}
	if logs := c.Logs(); len(logs) == 0 || !strings.Contains(logs[0], "started pid") {
		t.Fatalf("logs = %q", logs)
	}
}

func errorsIsCode(err error, code string) bool { return capadapter.CodeOf(err) == code }

// Every code of the closed set an adapter may answer with passes through as the adapter's,
// without killing the child.
func TestClientAdapterErrorCodesPassThrough(t *testing.T) {
	noLeaks(t)
	c := startHelper(t, "normal", ClientOptions{})
	ctx := context.Background()
	for _, code := range []string{capadapter.CodeInvalidRequest, capadapter.CodeUnsupportedMethod, capadapter.CodeUnknownCapability,
		capadapter.CodeUnsupportedAction, capadapter.CodeInvalidArgs, capadapter.CodeUnavailable, capadapter.CodeTooLarge, capadapter.CodeInternal} {
		_, err := c.Invoke(ctx, "test_light", "fail_with", json.RawMessage(`{"code":"`+code+`"}`))
		if e := wantCode(t, err, code); !e.FromAdapter {
			t.Errorf("%s: not FromAdapter", code)
		}
	}
	if _, err := c.Observe(ctx, "test_light"); err != nil || c.Failure() != nil {
		t.Fatalf("child did not survive error responses: %v, %v", err, c.Failure())
	}
	// A code outside the closed set is a malformed response: the child is killed.
	_, err := c.Invoke(ctx, "test_light", "fail_with", json.RawMessage(`{"code":"bogus"}`))
	wantCode(t, err, capadapter.CodeMalformedResponse)
	waitDone(t, c)
	wantCode(t, c.Failure(), capadapter.CodeMalformedResponse)
}

func TestClientEnvironmentIsAllowlisted(t *testing.T) {
	noLeaks(t)
	t.Setenv("AIRLOCK_TEST_PROVIDER_SECRET", "sk-do-not-inherit")
	t.Setenv("LC_CTYPE", "C.UTF-8")
	c := startHelper(t, "env", ClientOptions{})
	obs, err := c.Observe(context.Background(), "test_light")
	if err != nil {
		t.Fatal(err)
	}
	var o struct{ Names []string }
	if err := json.Unmarshal(obs, &o); err != nil {
		t.Fatal(err)
	}
	for _, n := range o.Names {
		if !slices.Contains(envAllowlist, n) {
			t.Errorf("child sees %s, which is not allowlisted", n)
		}
	}
	if !slices.Contains(o.Names, "LC_CTYPE") {
		t.Errorf("allowlisted LC_CTYPE missing: %v", o.Names)
	}
	if strings.Contains(string(obs), "AIRLOCK_TEST_PROVIDER_SECRET") {
		t.Fatal("secret variable inherited")
	}
}

// Startup failures: each misbehaving adapter is refused with its code, and its child killed.
func TestClientHandshakeRejects(t *testing.T) {
	noLeaks(t)
	cases := []struct {
		mode, code string
		failure    string // the child's recorded failure, when it differs from code
		timeout    time.Duration
	}{
		{mode: "zero", code: capadapter.CodeCapabilityCount},
		{mode: "many", code: capadapter.CodeCapabilityCount},
		{mode: "malformed", code: capadapter.CodeMalformedResponse},
		{mode: "oversized", code: capadapter.CodeTooLarge},
		{mode: "wrong-version", code: capadapter.CodeMalformedResponse},
		{mode: "wrong-id", code: capadapter.CodeMalformedResponse},
		{mode: "exit-list", code: capadapter.CodeUnavailable},
		{mode: "sensitive", code: capadapter.CodeInvalidDescriptor},
		{mode: "describe-differs", code: capadapter.CodeInvalidDescriptor},
		{mode: "hang", code: capadapter.CodeTimeout, timeout: 300 * time.Millisecond},
	}
	for _, tc := range cases {
		t.Run(tc.mode, func(t *testing.T) {
			reg := helperRegistration(t, "h", tc.mode)
			c, err := Spawn(reg.Command, reg.Args, ClientOptions{})
			if err != nil {
				t.Fatal(err)
			}
			d := testStartTimeout
			if tc.timeout != 0 {
				d = tc.timeout
			}
			ctx, cancel := context.WithTimeout(context.Background(), d)
			defer cancel()
			start := time.Now()
			_, err = c.Handshake(ctx)
			wantCode(t, err, tc.code)
			if tc.timeout != 0 && time.Since(start) > tc.timeout+2*time.Second {
				t.Errorf("timeout took %v", time.Since(start))
			}
			waitDone(t, c)
			if !reaped(c.PID()) {
				t.Errorf("pid %d not reaped", c.PID())
			}
			wantCode(t, c.Failure(), tc.code)
			c.Close(context.Background())
		})
	}
}

// A duplicate response is refused however it races with the next request: the describe fails
// (malformed, or unavailable when the stale frame was caught first) and the child is killed
// as malformed.
func TestClientDuplicateResponseKillsChild(t *testing.T) {
	noLeaks(t)
	reg := helperRegistration(t, "h", "duplicate")
	c, err := Spawn(reg.Command, reg.Args, ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), testStartTimeout)
	defer cancel()
	_, err = c.Handshake(ctx)
	if code := capadapter.CodeOf(err); code != capadapter.CodeMalformedResponse && code != capadapter.CodeUnavailable {
		t.Fatalf("handshake = %v", err)
	}
	waitDone(t, c)
	wantCode(t, c.Failure(), capadapter.CodeMalformedResponse)

	// After startup: the first observe succeeds, its duplicate kills the child, and the next
	// call cannot be answered by the stale frame.
	c2 := startHelper(t, "dup-observe", ClientOptions{})
	if _, err := c2.Observe(context.Background(), "test_light"); err != nil {
		t.Fatal(err)
	}
	waitDone(t, c2)
	wantCode(t, c2.Failure(), capadapter.CodeMalformedResponse)
	_, err = c2.Observe(context.Background(), "test_light")
	wantCode(t, err, capadapter.CodeUnavailable)
}

// The handshake is bounded by Start's context, not call by call: an adapter slower to answer
// list than the call timeout (an interpreter starting on a loaded machine) starts, and its
// later calls have the call timeout again.
func TestStartHandshakeHasTheStartDeadline(t *testing.T) {
	noLeaks(t)
	c := startHelper(t, "slow-list", ClientOptions{CallTimeout: MinCallTimeout})
	if _, err := c.Observe(context.Background(), "test_light"); err != nil {
		t.Fatalf("observe after a slow list: %v", err)
	}
	// Without a start deadline, the list has the call timeout.
	reg := helperRegistration(t, "h", "slow-list")
	c2, err := Spawn(reg.Command, reg.Args, ClientOptions{CallTimeout: MinCallTimeout})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c2.Handshake(context.Background())
	wantCode(t, err, capadapter.CodeTimeout)
	waitDone(t, c2)
	c2.Close(context.Background())
}

// Failed calls after a good startup: each kills the process group and reaps the child.
func TestClientCallFailuresKillChild(t *testing.T) {
	noLeaks(t)
	cases := []struct {
		mode, code string
	}{
		{"hang-observe", capadapter.CodeTimeout},
		{"crash-observe", capadapter.CodeUnavailable},
		{"big-result", capadapter.CodeTooLarge},
	}
	for _, tc := range cases {
		t.Run(tc.mode, func(t *testing.T) {
			c := startHelper(t, tc.mode, ClientOptions{CallTimeout: 200 * time.Millisecond})
			start := time.Now()
			_, err := c.Observe(context.Background(), "test_light")
			wantCode(t, err, tc.code)
			if time.Since(start) > 5*time.Second {
				t.Errorf("failure took %v", time.Since(start))
			}
			waitDone(t, c)
			if !reaped(c.PID()) {
				t.Errorf("pid %d not reaped", c.PID())
			}
			_, err = c.Observe(context.Background(), "test_light")
			wantCode(t, err, capadapter.CodeUnavailable)
		})
	}
}

func TestClientCallerCancellationKillsChild(t *testing.T) {
	noLeaks(t)
	c := startHelper(t, "hang-observe", ClientOptions{CallTimeout: 10 * time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		time.Sleep(50 * time.Millisecond)
		cancel()
	}()
	_, err := c.Observe(ctx, "test_light")
	wantCode(t, err, capadapter.CodeUnavailable)
	waitDone(t, c)
}

func TestProcessGroupKillReapsGrandchild(t *testing.T) {
	noLeaks(t)
	for _, how := range []string{"close", "failed-call"} {
		t.Run(how, func(t *testing.T) {
			c := startHelper(t, "grandchild", ClientOptions{CallTimeout: 300 * time.Millisecond})
			obs, err := c.Observe(context.Background(), "test_light")
			if err != nil {
				t.Fatal(err)
			}
			var o struct{ Grandchild int }
			if err := json.Unmarshal(obs, &o); err != nil || o.Grandchild <= 0 {
				t.Fatalf("observe = %s", obs)
			}
			if gone(o.Grandchild) {
				t.Fatalf("grandchild %d not running", o.Grandchild)
			}
			if how == "close" {
				c.Close(context.Background())
			} else {
				// An invoke with an undeclared action is not checked by the Client; the helper
				// answers, so fail the child through a malformed code instead.
				_, err := c.Invoke(context.Background(), "test_light", "fail_with", json.RawMessage(`{"code":"bogus"}`))
				wantCode(t, err, capadapter.CodeMalformedResponse)
			}
			waitDone(t, c)
			eventually(t, 5*time.Second, "grandchild survived the group kill", func() bool { return gone(o.Grandchild) })
		})
	}
}

// An adapter that ignores stdin EOF and SIGTERM is killed, within the bounded stop.
func TestClientCloseEscalatesToKill(t *testing.T) {
	noLeaks(t)
	c := startHelper(t, "ignore-term", ClientOptions{})
	start := time.Now()
	err := c.Close(context.Background())
	if err == nil {
		t.Fatal("Close reported a clean exit for a killed child")
	}
	if el := time.Since(start); el < gracefulExitWait+termWait || el > gracefulExitWait+termWait+killWait+2*time.Second {
		t.Errorf("Close took %v", el)
	}
	if !reaped(c.PID()) {
		t.Fatal("not reaped")
	}
	// A done ctx skips the graceful steps.
	c2 := startHelper(t, "ignore-term", ClientOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start = time.Now()
	c2.Close(ctx)
	if el := time.Since(start); el > killWait {
		t.Errorf("Close with a done ctx took %v", el)
	}
	if !reaped(c2.PID()) {
		t.Fatal("not reaped")
	}
}

func TestStderrFloodIsBoundedAndDoesNotBlock(t *testing.T) {
	noLeaks(t)
	c := startHelper(t, "stderr-flood", ClientOptions{CallTimeout: 10 * time.Second})
	if _, err := c.Observe(context.Background(), "test_light"); err != nil {
		t.Fatal(err)
	}
	c.Close(context.Background())
	logs := c.Logs()
	total, truncated := 0, false
	for _, l := range logs {
		total += len(l)
		if len(l) > MaxLogLineBytes+len(" …[truncated]") {
			t.Fatalf("kept line of %d bytes", len(l))
		}
		truncated = truncated || strings.HasSuffix(l, "[truncated]")
	}
	if total > MaxLogBytes {
		t.Fatalf("kept %d bytes of stderr", total)
	}
	if !truncated {
		t.Error("the 200 KiB line was not truncated")
	}
	if !slices.Contains(logs, "last flood line") {
		t.Errorf("newest lines not kept: %q", logs[len(logs)-3:])
	}
}

func TestSpawnRefusesBadCommand(t *testing.T) {
	noLeaks(t)
	_, err := Spawn("/nonexistent/adapter", nil, ClientOptions{})
	wantCode(t, err, capadapter.CodeUnavailable)
	reg := helperRegistration(t, "h", "normal")
	for _, d := range []time.Duration{time.Millisecond, time.Hour} {
		if _, err := Spawn(reg.Command, reg.Args, ClientOptions{CallTimeout: d}); err == nil {
			t.Fatalf("call timeout %v accepted", d)
		}
	}
}
