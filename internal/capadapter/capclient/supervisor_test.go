package capclient

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/capadapter"
)

func newSupervisor(t *testing.T, opts Options) *Supervisor {
	t.Helper()
	if opts.StartTimeout == 0 {
		opts.StartTimeout = testStartTimeout
	}
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

func register(t *testing.T, s *Supervisor, reg Registration) Registration {
	t.Helper()
	got, err := s.Register(context.Background(), reg)
	if err != nil {
		logs, _ := s.Logs(reg.Name)
		t.Fatalf("Register(%s): %v\nlogs: %q", reg.Name, err, logs)
	}
	return got
}

func statusOf(t *testing.T, s *Supervisor, name string) AdapterStatus {
	t.Helper()
	for _, st := range s.Status() {
		if st.Name == name {
			return st
		}
	}
	t.Fatalf("no status for %s", name)
	return AdapterStatus{}
}

func TestSupervisorOperations(t *testing.T) {
	noLeaks(t)
	s := newSupervisor(t, Options{})
	ctx := context.Background()
	reg := helperRegistration(t, "light", "normal")
	got := register(t, s, reg)
	if got.Command != reg.Command || !slices.Equal(got.Args, reg.Args) {
		t.Fatalf("normalized = %+v", got)
	}
	list := s.List()
	if len(list) != 2 || list[0].CapabilityID != "test_light" || !list[0].Available || list[0].Adapter != "light" ||
		!slices.Equal(list[0].Actions, []string{"turn_on", "set_level", "fail_with"}) || list[1].Observe {
		t.Fatalf("List = %+v", list)
	}
	d, err := s.Describe("test_light")
	if err != nil || d.Title != "Test light" {
		t.Fatalf("Describe = %+v, %v", d, err)
	}
	if !s.Ready("test_light") || s.Ready("no_such_capability") {
		t.Fatalf("Ready(test_light) = %v, Ready(no_such_capability) = %v", s.Ready("test_light"), s.Ready("no_such_capability"))
	}
	st := statusOf(t, s, "light")
	if st.State != StateReady || st.PID <= 0 || st.Restarts != 0 || !slices.Equal(st.Capabilities, []string{"test_light", "test_switch"}) {
		t.Fatalf("Status = %+v", st)
	}
	obs, err := s.Observe(ctx, "test_light")
	if err != nil || !strings.Contains(string(obs), `"source":"normal"`) {
		t.Fatalf("Observe = %s, %v", obs, err)
	}
	res, err := s.Invoke(ctx, "test_light", "set_level", json.RawMessage(`{"level":3}`))
	if err != nil || string(res) != `{"level":3}` {
		t.Fatalf("Invoke = %s, %v", res, err)
	}
	if res, err := s.Invoke(ctx, "test_switch", "flip", json.RawMessage(`{}`)); err != nil || string(res) != "true" {
		t.Fatalf("Invoke flip = %s, %v", res, err)
	}
	// Local refusals, before the child is called.
	_, err = s.Observe(ctx, "nope")
	wantCode(t, err, capadapter.CodeUnknownCapability)
	_, err = s.Describe("nope")
	wantCode(t, err, capadapter.CodeUnknownCapability)
	_, err = s.Invoke(ctx, "nope", "flip", nil)
	wantCode(t, err, capadapter.CodeUnknownCapability)
	_, err = s.Observe(ctx, "test_switch")
	wantCode(t, err, capadapter.CodeUnsupportedMethod)
	_, err = s.Invoke(ctx, "test_light", "explode", json.RawMessage(`{}`))
	wantCode(t, err, capadapter.CodeUnsupportedAction)
	for _, args := range []string{`{}`, `null`, `[]`, `{"on":"yes"}`, `{"on":true,"extra":1}`, ``} {
		_, err = s.Invoke(ctx, "test_light", "turn_on", json.RawMessage(args))
		if e := wantCode(t, err, capadapter.CodeInvalidArgs); e.FromAdapter {
			t.Fatalf("args %s reached the adapter", args)
		}
	}
	_, err = s.Invoke(ctx, "test_light", "turn_on", json.RawMessage(`{"on":true,"pad":"`+strings.Repeat("x", 2000)+`"}`))
	wantCode(t, err, capadapter.CodeTooLarge)
	if statusOf(t, s, "light").PID != st.PID {
		t.Fatal("local refusals disturbed the child")
	}

	if err := s.Remove(ctx, "light"); err != nil {
		t.Fatal(err)
	}
	if !reaped(st.PID) {
		t.Fatalf("pid %d not reaped after Remove", st.PID)
	}
	if len(s.List()) != 0 || len(s.Status()) != 0 {
		t.Fatalf("after Remove: %+v %+v", s.List(), s.Status())
	}
	wantCode(t, s.Remove(ctx, "light"), capadapter.CodeUnknownAdapter)
	_, err = s.Logs("light")
	wantCode(t, err, capadapter.CodeUnknownAdapter)
	_, err = s.Observe(ctx, "test_light")
	wantCode(t, err, capadapter.CodeUnknownCapability)
}

func TestSupervisorConflictAndReplacement(t *testing.T) {
	noLeaks(t)
	s := newSupervisor(t, Options{})
	ctx := context.Background()
	register(t, s, helperRegistration(t, "a", "normal"))
	register(t, s, helperRegistration(t, "b", "normal", "b_"))
	if n := len(s.List()); n != 4 {
		t.Fatalf("List has %d capabilities, want 4", n)
	}
	// Another adapter listing a's ids is refused and its child reaped.
	_, err := s.Register(ctx, helperRegistration(t, "c", "normal"))
	wantCode(t, err, capadapter.CodeCapabilityConflict)
	if len(s.Status()) != 2 {
		t.Fatalf("refused registration installed: %+v", s.Status())
	}
	eventually(t, 5*time.Second, "refused child left running", func() bool { return len(children(t)) == 2 })

	// Replacing a registration swaps atomically and reaps the old child before returning.
	old := statusOf(t, s, "a").PID
	register(t, s, helperRegistration(t, "a", "env"))
	if !reaped(old) {
		t.Fatalf("old child %d not reaped when Register returned", old)
	}
	st := statusOf(t, s, "a")
	if st.PID == old || st.State != StateReady || !slices.Contains(st.Args, "env") {
		t.Fatalf("replacement status = %+v", st)
	}
	obs, err := s.Observe(ctx, "test_light")
	if err != nil || !strings.Contains(string(obs), `"names"`) {
		t.Fatalf("observe after replacement = %s, %v", obs, err)
	}
	// A replacement may keep its ids; a failed replacement leaves the old one serving.
	_, err = s.Register(ctx, helperRegistration(t, "a", "zero"))
	wantCode(t, err, capadapter.CodeCapabilityCount)
	if statusOf(t, s, "a").PID != st.PID {
		t.Fatal("failed replacement disturbed the registered child")
	}
	// A refused registration's stderr stays readable for its operator.
	if _, err := s.Register(ctx, helperRegistration(t, "d", "exit-list")); capadapter.CodeOf(err) != capadapter.CodeUnavailable {
		t.Fatalf("exit-list registration: %v", err)
	}
	if logs, err := s.Logs("d"); err != nil || len(logs) == 0 {
		t.Fatalf("Logs(d) = %q, %v", logs, err)
	}
}

func TestSupervisorRestartsCrashedAdapter(t *testing.T) {
	noLeaks(t)
	s := newSupervisor(t, Options{BackoffMin: 20 * time.Millisecond, BackoffMax: 40 * time.Millisecond})
	register(t, s, helperRegistration(t, "crashy", "crash-observe"))
	first := statusOf(t, s, "crashy").PID
	_, err := s.Observe(context.Background(), "test_light")
	wantCode(t, err, capadapter.CodeUnavailable)
	eventually(t, 10*time.Second, "crashed child not reaped", func() bool { return reaped(first) })
	eventually(t, 20*time.Second, "adapter not restarted", func() bool {
		st := statusOf(t, s, "crashy")
		return st.State == StateReady && st.Restarts >= 1 && st.PID != first
	})
	st := statusOf(t, s, "crashy")
	if st.LastFailure != capadapter.CodeUnavailable {
		t.Fatalf("status after restart = %+v", st)
	}
	if res, err := s.Invoke(context.Background(), "test_light", "turn_on", json.RawMessage(`{"on":true}`)); err != nil {
		t.Fatalf("invoke on the restarted child: %s, %v", res, err)
	}
	logs, _ := s.Logs("crashy")
	if !slices.ContainsFunc(logs, func(l string) bool { return strings.Contains(l, "adapter failed (unavailable)") }) {
		t.Fatalf("logs = %q", logs)
	}
}

func TestSupervisorSecretsStayInLogs(t *testing.T) {
	noLeaks(t)
	s := newSupervisor(t, Options{})
	register(t, s, helperRegistration(t, "chatty", "stderr-secret"))
	obs, err := s.Observe(context.Background(), "test_light")
	if err != nil {
		t.Fatal(err)
	}
	_, ierr := s.Invoke(context.Background(), "test_light", "fail_with", json.RawMessage(`{"code":"internal"}`))
	d, _ := s.Describe("test_light")
	projected := fmt.Sprint(string(obs), ierr, s.List(), s.Status(), d)
	eventually(t, 5*time.Second, "sentinel never reached the log ring", func() bool {
		logs, _ := s.Logs("chatty")
		return slices.ContainsFunc(logs, func(l string) bool { return strings.Contains(l, secretSentinel) })
	})
	if strings.Contains(projected, secretSentinel) {
		t.Fatal("stderr content leaked into an operation's output")
	}
	s.Close(context.Background())
}

func TestSupervisorCloseReapsEverything(t *testing.T) {
	noLeaks(t)
	s := newSupervisor(t, Options{})
	register(t, s, helperRegistration(t, "a", "normal"))
	register(t, s, helperRegistration(t, "g", "grandchild", "g_"))
	obs, err := s.Observe(context.Background(), "g_test_light")
	if err != nil {
		t.Fatal(err)
	}
	var o struct{ Grandchild int }
	json.Unmarshal(obs, &o)
	pids := []int{statusOf(t, s, "a").PID, statusOf(t, s, "g").PID}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		if !reaped(pid) {
			t.Errorf("pid %d not reaped by Close", pid)
		}
	}
	eventually(t, 5*time.Second, "grandchild survived Close", func() bool { return gone(o.Grandchild) })
	_, err = s.Observe(context.Background(), "test_light")
	wantCode(t, err, capadapter.CodeUnavailable)
	_, err = s.Register(context.Background(), helperRegistration(t, "a", "normal"))
	wantCode(t, err, capadapter.CodeUnavailable)
}

func TestNewRefusesOutOfBoundsOptions(t *testing.T) {
	for _, o := range []Options{
		{CallTimeout: time.Millisecond}, {CallTimeout: time.Hour}, {StartTimeout: time.Minute},
		{BackoffMin: time.Microsecond}, {BackoffMin: time.Second, BackoffMax: time.Millisecond * 500},
		{BackoffMax: time.Hour}, {HealthyAfter: -1}, {MaxRestartFailures: -1},
	} {
		if _, err := New(o); err == nil {
			t.Errorf("New(%+v) accepted", o)
		}
	}
}

// A result that fails a screen is withheld from its caller, for that call only: the child is
// neither killed nor restarted, other calls keep working, and the operator finds the
// capability, the call and the screen in the adapter's log and status, never the result.
func TestSupervisorWithheldResultKeepsTheChild(t *testing.T) {
	noLeaks(t)
	s := newSupervisor(t, Options{})
	ctx := context.Background()
	register(t, s, helperRegistration(t, "light", "url-result"))
	pid := statusOf(t, s, "light").PID
	for range 2 {
		_, err := s.Observe(ctx, "test_light")
		if e := wantCode(t, err, capadapter.CodeResultWithheld); e.Screen != capadapter.ScreenURL {
			t.Fatalf("screen %q", e.Screen)
		}
	}
	if res, err := s.Invoke(ctx, "test_light", "set_level", json.RawMessage(`{"level":3}`)); err != nil || string(res) != `{"level":3}` {
		t.Fatalf("Invoke after withheld observes = %s, %v", res, err)
	}
	st := statusOf(t, s, "light")
	if st.State != StateReady || st.PID != pid || st.Restarts != 0 || st.LastFailure != "" || !s.Ready("test_light") {
		t.Fatalf("Status after withheld observes = %+v (pid was %d)", st, pid)
	}
	if w := st.LastWithheld; st.Withheld != 2 || w == nil || w.CapabilityID != "test_light" || w.Method != "observe" ||
		w.Action != "" || w.Screen != capadapter.ScreenURL || w.At.IsZero() {
		t.Fatalf("Status's withheld record: %d %+v", st.Withheld, w)
	}
	logs, _ := s.Logs("light")
	var noted int
	for _, l := range logs {
		if strings.Contains(l, "example.com") || strings.Contains(l, "https:") {
			t.Fatalf("a log line quotes the withheld result: %q", l)
		}
		if l == "[airlock] result withheld: capability test_light, observe: the result failed the url screen; the adapter keeps running" {
			noted++
		}
	}
	if noted != 2 {
		t.Fatalf("%d withheld lines in %q, want 2", noted, logs)
	}
}
