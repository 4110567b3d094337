package daemon_test

import (
	"bytes"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/client"
	"github.com/airlockhq/airlock/internal/daemontest"
	"github.com/airlockhq/airlock/internal/model"
	"github.com/airlockhq/airlock/internal/model/modeltest"
	"github.com/airlockhq/airlock/internal/protocol"
)

// restart starts airlockd again on the state and socket of d, without waiting for readiness.
func restart(t *testing.T, d *daemontest.Daemon, args ...string) *daemontest.Daemon {
	t.Helper()
	return daemontest.Start(t, daemontest.Options{Socket: d.Socket, StateDir: d.StateDir, Args: args, ListeningOnly: true})
}

// probe runs `airlock probe` against d and returns its exit code.
func probe(t *testing.T, d *daemontest.Daemon) int {
	t.Helper()
	cmd := exec.Command(daemontest.Binary(t, "airlock"), "--socket", d.Socket, "probe")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		t.Fatalf("probe: %v", err)
	}
	return 0
}

// recovery returns host.ready and host.recovery once recovery has finished.
func recovery(t *testing.T, c *client.Client) (bool, protocol.RecoveryHealth) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var h struct {
			Host struct {
				Ready    bool                    `json:"ready"`
				Recovery protocol.RecoveryHealth `json:"recovery"`
			} `json:"host"`
		}
		if err := call(t, c, client.Command{Operation: "handshake"}).Decode(&h); err != nil {
			t.Fatal(err)
		}
		if p := h.Host.Recovery.Phase; p != "not_started" && p != "recovering" {
			return h.Host.Ready, h.Host.Recovery
		}
		if time.Now().After(deadline) {
			t.Fatalf("recovery did not finish: %+v", h.Host.Recovery)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestBinaryCrashQueuedAndModelInFlight kills airlockd while one wake's model call is in
// flight and another waits queued behind the host's only turn slot. After the restart the
// queued wake is replayed, the accepted one is indeterminate and keeps the host degraded (probe
// exits 75) until it is reconciled, and the restored session continues exactly its transcript.
func TestBinaryCrashQueuedAndModelInFlight(t *testing.T) {
	llm := startModel(t)
	args := []string{"--provider", "local=" + llm.URL(), "--max-concurrent-turns", "1"}
	d := daemontest.Start(t, daemontest.Options{Args: args})
	c := d.Dial()
	cwd := t.TempDir()
	for _, id := range []string{"a", "b"} {
		if r := call(t, c, client.Command{Operation: "open", SessionID: id, Generation: gen(1), Payload: modelOpen(cwd)}); !r.OK {
			t.Fatal(r.Err())
		}
	}
	hold := make(chan struct{})
	defer close(hold)
	llm.Push(modeltest.Reply{Hold: hold})
	ta := ticketOf(t, wake(t, c, "a", 1, "a1", "first question", false)).Ticket.TicketID
	<-llm.Arrived(1)
	tb := ticketOf(t, wake(t, c, "b", 1, "b1", "queued question", false))
	if tb.Ticket.State != "queued" {
		t.Fatalf("b: %+v", tb.Ticket)
	}
	d.Kill9()

	llm.Push(modeltest.Reply{Text: "replayed answer"})
	d2 := restart(t, d, args...)
	c2 := d2.Dial()
	waitTicket(t, c2, tb.Ticket.TicketID, "succeeded")
	if got := llm.Requests()[1].LastUserText(); got != "queued question" {
		t.Fatalf("replayed prompt %q", got)
	}
	ready, rec := recovery(t, c2)
	if ready || rec.Phase != "degraded" || rec.IndeterminateRequests != 1 || rec.ReplayedRequests != 1 || rec.PendingReplays != 0 || rec.RestoredSessions != 2 {
		t.Fatalf("after restart: ready=%v %+v", ready, rec)
	}
	waitTicket(t, c2, ta, "indeterminate")
	if code := probe(t, d2); code != 75 {
		t.Fatalf("probe while degraded: exit %d", code)
	}
	if got := code(wake(t, c2, "a", 1, "a1", "first question", true)); got != "request_indeterminate" {
		t.Fatalf("duplicate of an indeterminate wake: %s", got)
	}

	// Reconciling the indeterminate wake returns the host to ready.
	var td ticketData
	if err := call(t, c2, client.Command{Operation: "reconcile", Payload: map[string]any{"ticketId": ta, "outcome": "failed"}}).Decode(&td); err != nil || td.Ticket.State != "failed" {
		t.Fatalf("reconcile: %v %+v", err, td)
	}
	if got := code(call(t, c2, client.Command{Operation: "reconcile", Payload: map[string]any{"ticketId": ta, "outcome": "failed"}})); got != "ticket_not_indeterminate" {
		t.Fatalf("second reconcile: %s", got)
	}
	if ready, rec := recovery(t, c2); !ready || rec.Phase != "ready" || rec.IndeterminateRequests != 0 {
		t.Fatalf("after reconcile: ready=%v %+v", ready, rec)
	}
	if code := probe(t, d2); code != 0 {
		t.Fatalf("probe after reconcile: exit %d", code)
	}

	// Session a was restored on its own transcript: the next turn's model request carries
	// the question recorded before the crash.
	llm.Push(modeltest.Reply{Text: "ok"})
	if r := wake(t, c2, "a", 1, "a2", "second question", true); !r.OK {
		t.Fatal(r.Err())
	}
	reqs := llm.Requests()
	var users []string
	for _, m := range reqs[len(reqs)-1].Request.Messages {
		if m.Role == model.RoleUser {
			users = append(users, m.Content)
		}
	}
	if strings.Join(users, "|") != "first question|second question" {
		t.Fatalf("history after restart: %v", users)
	}
}

// TestBinaryCrashDuringToolWork kills airlockd twice: once while a tool call is in flight at
// the adapter, once after a tool's effect while the model call that would end the turn is in
// flight. Each time the session comes back quarantined, the wake indeterminate and the queued
// wake failed; the adapter never sees a call twice; and every reprovisioning outcome holds.
func TestBinaryCrashDuringToolWork(t *testing.T) {
	for _, stage := range []string{"tool in flight", "after tool effect"} {
		t.Run(stage, func(t *testing.T) {
			adapter := startScriptedAdapter(t)
			block := make(chan struct{})
			t.Cleanup(func() { close(block) })
			if stage == "tool in flight" {
				adapter.block = block
			}
			llm := startModel(t)
			args := []string{"--provider", "local=" + llm.URL()}
			d := daemontest.Start(t, daemontest.Options{Args: args})
			c := d.Dial()
			cwd := t.TempDir()
			handle := newHandle(t)
			desc := descriptor(adapter.socket, hostID(t, c), "tooled", 1, handle, "fs.stat", "fs.read")
			if r := call(t, c, client.Command{Operation: "open", SessionID: "tooled", Generation: gen(1), Payload: withTools(modelOpen(cwd), desc)}); !r.OK {
				t.Fatal(r.Err())
			}
			call(t, c, client.Command{Operation: "open", SessionID: "plain", Generation: gen(1), Payload: modelOpen(cwd)})

			hold := make(chan struct{})
			defer close(hold)
			llm.Push(modeltest.Reply{ToolCalls: []model.ToolCall{{ID: "call_0", Name: "fs_stat", Arguments: `{"path":"."}`}}},
				modeltest.Reply{Hold: hold})
			t1 := ticketOf(t, wake(t, c, "tooled", 1, "w1", "stat it", false)).Ticket.TicketID
			t2 := ticketOf(t, wake(t, c, "tooled", 1, "w2", "queued behind", false)).Ticket.TicketID
			if stage == "tool in flight" {
				waitFor(t, func() bool { return invokes(adapter) == 1 })
			} else {
				<-llm.Arrived(2)
			}
			d.Kill9()

			d2 := restart(t, d, args...)
			c2 := d2.Dial()
			ready, rec := recovery(t, c2)
			if ready || rec.Phase != "degraded" || rec.IndeterminateRequests != 1 || len(rec.QuarantinedSessions) != 1 ||
				rec.QuarantinedSessions[0].SessionID != "tooled" || rec.QuarantinedSessions[0].Code != "tool_adapter_reprovision_required" {
				t.Fatalf("after restart: ready=%v %+v", ready, rec)
			}
			waitTicket(t, c2, t1, "indeterminate")
			if td := waitTicket(t, c2, t2, "failed"); td.Ticket.Error == nil || td.Ticket.Error.Code != "tool_adapter_reprovision_required" {
				t.Fatalf("queued wake of a quarantined session: %+v", td.Ticket)
			}
			if n := invokes(adapter); n != 1 {
				t.Fatalf("adapter saw %d invokes", n)
			}
			if code := probe(t, d2); code != 75 {
				t.Fatalf("probe: exit %d", code)
			}

			// Reprovisioning: only the same generation, with the retained policy, bound to
			// this incarnation.
			host2 := hostID(t, c2)
			open := func(g int64, p map[string]any) string {
				return code(call(t, c2, client.Command{Operation: "open", SessionID: "tooled", Generation: gen(g), Payload: p}))
			}
			if got := open(1, modelOpen(cwd)); got != "tool_adapter_reprovision_required" {
				t.Fatalf("no-tools reopen: %s", got)
			}
			if got := open(1, withTools(modelOpen(cwd), descriptor(adapter.socket, host2, "tooled", 1, newHandle(t), "fs.stat"))); got != "session_policy_conflict" {
				t.Fatalf("other policy: %s", got)
			}
			if got := open(0, withTools(modelOpen(cwd), descriptor(adapter.socket, host2, "tooled", 0, newHandle(t), "fs.stat", "fs.read"))); got != "stale_generation" {
				t.Fatalf("lower generation: %s", got)
			}
			if got := open(1, withTools(modelOpen(cwd), descriptor(adapter.socket, host2, "tooled", 1, newHandle(t), "fs.stat", "fs.read"))); got != "" {
				t.Fatalf("reprovision: %s", got)
			}
			if _, rec := recovery(t, c2); len(rec.QuarantinedSessions) != 0 {
				t.Fatalf("quarantine after reprovisioning: %+v", rec.QuarantinedSessions)
			}
			call(t, c2, client.Command{Operation: "reconcile", Payload: map[string]any{"ticketId": t1, "outcome": "succeeded"}})
			var again turnResult
			if err := wake(t, c2, "tooled", 1, "w1", "stat it", true).Decode(&again); err != nil || again.Result.StopReason != "reconciled" {
				t.Fatalf("duplicate of a reconciled wake: %v %+v", err, again)
			}
			if code := probe(t, d2); code != 0 {
				t.Fatalf("probe after reconcile: exit %d", code)
			}
			assertNotInFiles(t, d.StateDir, handle)
		})
	}
}

func invokes(a *scriptedAdapter) int {
	n := 0
	for _, k := range a.kinds() {
		if k == "invoke" {
			n++
		}
	}
	return n
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestBinaryQuarantineKeepsHostReady restarts airlockd without a provider's key and with a
// tool session idle: both sessions are quarantined, the host stays ready, and each comes back
// only on its own terms.
func TestBinaryQuarantineKeepsHostReady(t *testing.T) {
	adapter := startScriptedAdapter(t)
	llm := startModel(t)
	const key = "sk-test-4f1c9a7e2b"
	keyed := []string{"--provider", "local=" + llm.URL(), "--provider", "paid=" + llm.URL(), "--provider-key-env", "paid=AIRLOCK_TEST_PAID_KEY"}
	d := daemontest.Start(t, daemontest.Options{Args: keyed, Env: []string{"AIRLOCK_TEST_PAID_KEY=" + key}})
	c := d.Dial()
	cwd := t.TempDir()
	paid := modelOpen(cwd)
	paid["model"] = map[string]any{"provider": "paid", "id": "big"}
	if r := call(t, c, client.Command{Operation: "open", SessionID: "paid", Generation: gen(1), Payload: paid}); !r.OK {
		t.Fatal(r.Err())
	}
	llm.Push(modeltest.Reply{Text: "hi"})
	if r := wake(t, c, "paid", 1, "k", "hello", true); !r.OK {
		t.Fatal(r.Err())
	}
	if auth := llm.Requests()[0].Authorization; auth != "Bearer "+key {
		t.Fatalf("authorization %q", auth)
	}
	desc := descriptor(adapter.socket, hostID(t, c), "tooled", 1, newHandle(t), "fs.stat")
	call(t, c, client.Command{Operation: "open", SessionID: "tooled", Generation: gen(1), Payload: withTools(modelOpen(cwd), desc)})
	d.Stop()

	// Without the key: both quarantined, the host ready.
	d2 := restart(t, d, keyed...)
	c2 := d2.Dial()
	ready, rec := recovery(t, c2)
	if !ready || rec.Phase != "ready" || len(rec.QuarantinedSessions) != 2 ||
		rec.QuarantinedSessions[0].Code != "credentials_required" || rec.QuarantinedSessions[1].Code != "tool_adapter_reprovision_required" {
		t.Fatalf("quarantine only: ready=%v %+v", ready, rec)
	}
	if code := probe(t, d2); code != 0 {
		t.Fatalf("probe with quarantine only: exit %d", code)
	}
	// A wake or a tool call on a quarantined generation answers its recovery code, not
	// session_not_found.
	quarantined := func(r *client.Response, want string) {
		t.Helper()
		if r.OK || r.Error.Code != want || !r.Error.Retryable || r.Error.Details["sessionId"] != r.SessionID ||
			r.Error.Details["generation"] != float64(1) {
			t.Fatalf("want %s with the session and generation: %+v", want, r.Error)
		}
	}
	quarantined(wake(t, c2, "paid", 1, "k2", "hello again", true), "credentials_required")
	quarantined(call(t, c2, client.Command{Operation: "invokeTool", SessionID: "tooled", Generation: gen(1),
		Payload: map[string]any{"toolCallId": "c", "operation": "fs.stat", "arguments": map[string]any{"path": "."}}}), "tool_adapter_reprovision_required")
	quarantined(wake(t, c2, "tooled", 1, "k3", "hello", true), "tool_adapter_reprovision_required")
	if got := code(call(t, c2, client.Command{Operation: "invokeTool", SessionID: "tooled", Generation: gen(2),
		Payload: map[string]any{"toolCallId": "c", "operation": "fs.stat", "arguments": map[string]any{"path": "."}}})); got != "session_not_found" {
		t.Fatalf("tool call on another generation of a quarantined session: %s", got)
	}
	if got := code(call(t, c2, client.Command{Operation: "open", SessionID: "paid", Generation: gen(1), Payload: paid})); got != "credentials_required" {
		t.Fatalf("reopen without the key: %s", got)
	}
	// Unrelated sessions are admitted.
	if r := call(t, c2, client.Command{Operation: "open", SessionID: "fresh", Generation: gen(1), Payload: modelOpen(cwd)}); !r.OK {
		t.Fatal(r.Err())
	}
	d2.Stop()

	// With the key again: the quarantine persists until the session is reopened, which
	// clears it.
	d3 := daemontest.Start(t, daemontest.Options{Socket: d.Socket, StateDir: d.StateDir, Args: keyed,
		Env: []string{"AIRLOCK_TEST_PAID_KEY=" + key}})
	c3 := d3.Dial()
	if _, rec := recovery(t, c3); len(rec.QuarantinedSessions) != 2 {
		t.Fatalf("quarantine after a second restart: %+v", rec)
	}
	if r := call(t, c3, client.Command{Operation: "open", SessionID: "paid", Generation: gen(1), Payload: paid}); !r.OK {
		t.Fatalf("reopen with the key: %v", r.Err())
	}
	if _, rec := recovery(t, c3); len(rec.QuarantinedSessions) != 1 || rec.QuarantinedSessions[0].SessionID != "tooled" {
		t.Fatalf("after reopening: %+v", rec.QuarantinedSessions)
	}
	d3.Stop()
	for _, dd := range []*daemontest.Daemon{d, d2, d3} {
		if strings.Contains(dd.Stderr(), key) {
			t.Fatal("provider key in the daemon log")
		}
	}
	assertNotInFiles(t, d.StateDir, key)
}
