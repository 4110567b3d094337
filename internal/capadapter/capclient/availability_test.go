package capclient

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/capadapter"
)

func summaryOf(t *testing.T, s *Supervisor, id string) CapabilitySummary {
	t.Helper()
	for _, c := range s.List() {
		if c.CapabilityID == id {
			return c
		}
	}
	t.Fatalf("no capability %s", id)
	return CapabilitySummary{}
}

// TestAvailabilityFollowsCalls: UnavailableAfter consecutive calls answered unavailable show
// the capability unavailable (calls_unavailable) in List, Status and UnavailableReason, while
// its sibling stays available; other errors neither count nor reset; calls still reach the
// adapter, and the first result makes the capability available again.
func TestAvailabilityFollowsCalls(t *testing.T) {
	noLeaks(t)
	s := newSupervisor(t, Options{})
	register(t, s, helperRegistration(t, "light", "normal"))
	ctx := context.Background()
	pid := statusOf(t, s, "light").PID
	fail := func(code string) {
		t.Helper()
		_, err := s.Invoke(ctx, "test_light", "fail_with", json.RawMessage(`{"code":"`+code+`"}`))
		if e := wantCode(t, err, code); !e.FromAdapter {
			t.Fatalf("%s did not come from the adapter", code)
		}
	}
	available := func(want bool, reason string) {
		t.Helper()
		c := summaryOf(t, s, "test_light")
		st := statusOf(t, s, "light")
		failing := slices.Contains(st.UnavailableCapabilities, "test_light")
		if c.Available != want || c.UnavailableReason != reason || s.UnavailableReason("test_light") != reason || failing == want {
			t.Fatalf("test_light: %+v, status unavailable %v, UnavailableReason %q; want available %v (%q)",
				c, st.UnavailableCapabilities, s.UnavailableReason("test_light"), want, reason)
		}
		if sw := summaryOf(t, s, "test_switch"); !sw.Available || sw.UnavailableReason != "" {
			t.Fatalf("the sibling capability changed: %+v", sw)
		}
	}
	for range UnavailableAfter - 1 {
		fail(capadapter.CodeUnavailable)
	}
	available(true, "")
	fail(capadapter.CodeInvalidArgs) // an answer about the call: neither counts nor resets
	fail(capadapter.CodeUnavailable)
	available(false, UnavailableCalls)
	fail(capadapter.CodeUnavailable) // still reaches the adapter, still unavailable
	available(false, UnavailableCalls)
	if !s.Ready("test_light") || statusOf(t, s, "light").State != StateReady {
		t.Fatal("the adapter is no longer ready")
	}
	// The other capability's calls do not touch this one's run.
	if _, err := s.Invoke(ctx, "test_switch", "flip", json.RawMessage(`{}`)); err != nil {
		t.Fatal(err)
	}
	available(false, UnavailableCalls)
	// Calls are not refused: the next one reaches the child, and its result ends the run.
	if _, err := s.Observe(ctx, "test_light"); err != nil {
		t.Fatalf("observe of a capability shown unavailable: %v", err)
	}
	available(true, "")
	if statusOf(t, s, "light").PID != pid {
		t.Fatal("the child was replaced")
	}
	// A registration of the same name starts with a clean slate.
	for range UnavailableAfter {
		fail(capadapter.CodeUnavailable)
	}
	available(false, UnavailableCalls)
	register(t, s, helperRegistration(t, "light", "normal"))
	available(true, "")
	if s.UnavailableReason("no_such_capability") != UnavailableNotReady {
		t.Fatal("an unknown capability is shown available")
	}
}

// TestAvailabilityCountsTimeoutsNotCancellations: a call that fails the child (a timeout) is
// unavailable to its client and counts; a call its caller cancelled does not. While the child
// restarts the reason is adapter_not_ready.
func TestAvailabilityCountsTimeoutsNotCancellations(t *testing.T) {
	noLeaks(t)
	s := newSupervisor(t, Options{CallTimeout: 200 * time.Millisecond, BackoffMin: time.Millisecond, BackoffMax: 2 * time.Millisecond})
	register(t, s, helperRegistration(t, "hang", "hang-observe"))
	// restarted waits until a child other than the one that served the last call is ready.
	pid := statusOf(t, s, "hang").PID
	restarted := func() {
		t.Helper()
		eventually(t, 20*time.Second, "adapter not restarted", func() bool {
			st := statusOf(t, s, "hang")
			return st.State == StateReady && st.PID != pid
		})
		pid = statusOf(t, s, "hang").PID
	}
	// A cancelled call kills the child (its late answer could pair with the next request)
	// but says nothing of the capability.
	cctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	s.StartObserve(cctx, "test_light", func(_ json.RawMessage, err error) { done <- err })
	cancel()
	wantCode(t, <-done, capadapter.CodeUnavailable)
	restarted()
	for i := range UnavailableAfter {
		_, err := s.Observe(context.Background(), "test_light")
		wantCode(t, err, capadapter.CodeTimeout)
		if i < UnavailableAfter-1 {
			restarted()
			if c := summaryOf(t, s, "test_light"); !c.Available {
				t.Fatalf("after %d timeouts (and a cancellation): %+v", i+1, c)
			}
		}
	}
	restarted()
	if c := summaryOf(t, s, "test_light"); c.Available || c.UnavailableReason != UnavailableCalls {
		t.Fatalf("after %d timeouts: %+v", UnavailableAfter, c)
	}
}

// TestAvailabilityWithheldResultEndsTheRun: a result withheld by a screen is a well-formed
// answer of the adapter, so it ends a run of unavailable calls like a result does.
func TestAvailabilityWithheldResultEndsTheRun(t *testing.T) {
	noLeaks(t)
	s := newSupervisor(t, Options{})
	register(t, s, helperRegistration(t, "light", "url-result"))
	ctx := context.Background()
	fail := func() {
		t.Helper()
		_, err := s.Invoke(ctx, "test_light", "fail_with", json.RawMessage(`{"code":"unavailable"}`))
		wantCode(t, err, capadapter.CodeUnavailable)
	}
	for range UnavailableAfter - 1 {
		fail()
	}
	_, err := s.Observe(ctx, "test_light")
	wantCode(t, err, capadapter.CodeResultWithheld)
	for range UnavailableAfter - 1 {
		fail()
	}
	if c := summaryOf(t, s, "test_light"); !c.Available {
		t.Fatalf("the withheld result did not end the run: %+v", c)
	}
	fail()
	if c := summaryOf(t, s, "test_light"); c.Available || c.UnavailableReason != UnavailableCalls {
		t.Fatalf("after %d unavailable calls: %+v", UnavailableAfter, c)
	}
}
