package schemas_test

import (
	"encoding/json"
	"io/fs"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/model"
	"github.com/airlockhq/airlock/internal/model/modeltest"
	"github.com/airlockhq/airlock/internal/protocol"
	"github.com/airlockhq/airlock/internal/transcript"
	"github.com/airlockhq/airlock/schemas"
)

// eventData names the definition each turn event's data must satisfy; "" means no data.
var eventData = map[string]string{
	"promptAccepted": "promptAcceptedData",
	"turnStart":      "",
	"messageStart":   "messageStartData",
	"messageUpdate":  "messageUpdateData",
	"messageEnd":     "messageEndData",
	"toolStart":      "toolStartData",
	"toolEnd":        "toolEndData",
	"turnEnd":        "turnEndData",
	"sessionIdle":    "",
	"requestFailed":  "requestFailedData",
}

// untilIdle takes p's events up to and including the next sessionIdle, checks each turn event's
// data against its own definition (in the major of the event's version, which is the session's)
// and that every event but sessionIdle carries the wake's requestId. It returns the event names.
func untilIdle(t *testing.T, p *peer, requestID string) []map[string]any {
	t.Helper()
	var got []map[string]any
	for {
		ev := p.event()
		name, _ := ev["event"].(string)
		def, known := eventData[name]
		if !known {
			t.Fatalf("%s: unexpected event %v", p.name, ev)
		}
		major, _ := strconv.Atoi(strings.SplitN(ev["protocolVersion"].(string), ".", 2)[0])
		switch {
		case def == "" && ev["data"] != nil:
			t.Errorf("%s: %s with data: %v", p.name, name, ev)
		case def != "":
			if err := p.v.def(t, major, def).Validate(ev["data"]); err != nil {
				t.Errorf("%s: %s data is not a %s: %v", p.name, name, def, err)
			}
		}
		if name == "sessionIdle" {
			if ev["requestId"] != nil {
				t.Errorf("%s: sessionIdle with a requestId: %v", p.name, ev)
			}
			return append(got, ev)
		}
		if ev["requestId"] != requestID {
			t.Errorf("%s: %s has requestId %v, want %s", p.name, name, ev["requestId"], requestID)
		}
		got = append(got, ev)
	}
}

// names lists the event names of evs, space-separated, runs of messageUpdate folded into one.
func names(evs []map[string]any) string {
	var out []string
	for _, ev := range evs {
		n := ev["event"].(string)
		if n == "messageUpdate" && len(out) > 0 && out[len(out)-1] == n {
			continue
		}
		out = append(out, n)
	}
	return strings.Join(out, " ")
}

// pollTicket asks for a ticket until its state is want.
func pollTicket(t *testing.T, p *peer, ticketID, want string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		tk := p.ok(p.call("ticket", "", `{"ticketId":"`+ticketID+`"}`), "ticketResult")["ticket"].(map[string]any)
		if tk["state"] == want {
			return tk
		}
		if time.Now().After(deadline) {
			t.Fatalf("ticket %s is %v after 10s, want %s", ticketID, tk["state"], want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// driveTurns runs agent turns on s1 (opened by a with protocol 1.0 and a model; a and b are
// attached) and refusals on s2 (opened by b with 2.0 and no model; c is attached), validating
// every response and event. It leaves s1 failed by a model error, and no other session behind.
func driveTurns(t *testing.T, llm *modeltest.Server, a, b, c *peer, cwd string) {
	t.Helper()
	const s1 = `"sessionId":"s1","generation":1`
	wake := func(key string) string { return s1 + `,"idempotencyKey":"` + key + `"` }

	// Nothing runs yet.
	if r := a.ok(a.call("abort", s1, `{}`), "abortResult"); r["aborted"] != false {
		t.Errorf("abort without a turn: %v", r)
	}
	a.fail(a.call("steer", wake("st-0"), `{"message":"faster"}`), "session_not_running")
	b.fail(b.call("followUp", wake("fu-0"), `{"message":"and then"}`), "session_not_running")
	c.fail(c.call("wake", `"sessionId":"s2","generation":4,"idempotencyKey":"w0"`, `{"prompt":"hi"}`), "session_precondition_failed")
	a.fail(a.call("wake", wake("w0"), `{"prompt":""}`), "invalid_field")

	// A turn that waits for its end (the default): the result, and every event on both
	// attached connections, in the session's version (1.0).
	llm.Push(modeltest.Reply{Text: "pong, pong", Chunk: 3, Usage: model.Usage{PromptTokens: 12, CompletionTokens: 4, TotalTokens: 16}})
	resp := a.call("wake", wake("w1"), `{"prompt":"ping","source":"schemas-test"}`)
	rid := resp["requestId"].(string)
	res := a.ok(resp, "wakeResult")
	if r := res["result"].(map[string]any); r["text"] != "pong, pong" || r["requestId"] != rid || num(r["modelCalls"]) != 1 {
		t.Errorf("wake result: %v", res)
	}
	const plain = "promptAccepted turnStart messageStart messageUpdate messageEnd turnEnd sessionIdle"
	for _, p := range []*peer{a, b} {
		if got := names(untilIdle(t, p, rid)); got != plain {
			t.Errorf("%s: events %s, want %s", p.name, got, plain)
		}
	}

	// The same wake again: the recorded outcome, as a result or as a ticket; the same key with
	// another prompt conflicts.
	if again := a.ok(a.call("wake", wake("w1"), `{"prompt":"ping","source":"schemas-test"}`), "wakeResult"); again["result"].(map[string]any)["requestId"] != rid {
		t.Errorf("repeated wake: %v", again)
	}
	tk := a.ok(a.call("wake", wake("w1"), `{"prompt":"ping","source":"schemas-test","waitForTerminal":false}`), "ticketResult")["ticket"].(map[string]any)
	if tk["state"] != "succeeded" || tk["result"] == nil {
		t.Errorf("ticket of a finished wake: %v", tk)
	}
	a.fail(a.call("wake", wake("w1"), `{"prompt":"pong"}`), "idempotency_conflict")

	// A 1.x session has no tools: a tool call of the model is answered unknown_tool, and the
	// turn goes on.
	llm.Push(modeltest.Reply{ToolCalls: []model.ToolCall{{ID: "call_0", Name: "fs_read", Arguments: `{"path":"a.txt"}`}}},
		modeltest.Reply{Text: "I cannot read files here."})
	resp = a.call("wake", wake("w2"), `{"prompt":"read a.txt"}`)
	rid = resp["requestId"].(string)
	if r := a.ok(resp, "wakeResult")["result"].(map[string]any); num(r["toolCalls"]) != 1 || num(r["modelCalls"]) != 2 {
		t.Errorf("wake with a tool call: %v", r)
	}
	const tooled = "promptAccepted turnStart messageStart messageEnd toolStart toolEnd messageStart messageUpdate messageEnd turnEnd sessionIdle"
	for _, p := range []*peer{a, b} {
		evs := untilIdle(t, p, rid)
		if got := names(evs); got != tooled {
			t.Errorf("%s: events %s, want %s", p.name, got, tooled)
		}
		for _, ev := range evs {
			if ev["event"] == "toolEnd" {
				if e, _ := ev["data"].(map[string]any)["error"].(map[string]any); e == nil || e["code"] != "unknown_tool" {
					t.Errorf("%s: toolEnd %v", p.name, ev)
				}
			}
		}
	}

	// A ticket (2.x): the wake answers once journaled, the ticket follows it to its end, and a
	// ticket that is not indeterminate cannot be reconciled.
	llm.Push(modeltest.Reply{Text: "later"})
	resp = b.call("wake", wake("w3"), `{"prompt":"when you can","waitForTerminal":false}`)
	rid = resp["requestId"].(string)
	id := b.ok(resp, "ticketResult")["ticket"].(map[string]any)["ticketId"].(string)
	if tk := pollTicket(t, b, id, "succeeded"); tk["result"].(map[string]any)["text"] != "later" || tk["requestId"] != rid {
		t.Errorf("succeeded ticket: %v", tk)
	}
	b.fail(b.call("reconcile", "", `{"ticketId":"`+id+`","outcome":"succeeded"}`), "ticket_not_indeterminate")
	for _, p := range []*peer{a, b} {
		if got := names(untilIdle(t, p, rid)); got != plain {
			t.Errorf("%s: events %s, want %s", p.name, got, plain)
		}
	}

	// A running turn takes steer and followUp (each key once), shows in the snapshot, and
	// ends aborted.
	hold := make(chan struct{})
	defer close(hold)
	n := llm.Count()
	llm.Push(modeltest.Reply{Hold: hold})
	resp = b.call("wake", wake("w4"), `{"prompt":"take your time","waitForTerminal":false}`)
	rid = resp["requestId"].(string)
	id = b.ok(resp, "ticketResult")["ticket"].(map[string]any)["ticketId"].(string)
	select {
	case <-llm.Arrived(n + 1):
	case <-time.After(10 * time.Second):
		t.Fatal("the held model call did not arrive")
	}
	if snap := a.ok(a.call("status", s1, `{}`), "sessionSnapshot"); snap["state"] != "running" || snap["activeRequestId"] != rid {
		t.Errorf("running snapshot: %v", snap)
	}
	pollTicket(t, b, id, "running")
	a.ok(a.call("steer", wake("st-1"), `{"message":"faster"}`), "queuedResult")
	a.ok(a.call("steer", wake("st-1"), `{"message":"faster"}`), "queuedResult")
	a.fail(a.call("steer", wake("st-1"), `{"message":"slower"}`), "idempotency_conflict")
	b.ok(b.call("followUp", wake("fu-1"), `{"message":"and then stop"}`), "queuedResult")
	if r := b.ok(b.call("abort", s1, `{}`), "abortResult"); r["aborted"] != true {
		t.Errorf("abort of a running turn: %v", r)
	}
	const aborted = "promptAccepted turnStart messageStart requestFailed sessionIdle"
	for _, p := range []*peer{a, b} {
		if got := names(untilIdle(t, p, rid)); got != aborted {
			t.Errorf("%s: events %s, want %s", p.name, got, aborted)
		}
	}
	if tk := pollTicket(t, b, id, "failed"); tk["error"].(map[string]any)["code"] != "aborted" {
		t.Errorf("aborted ticket: %v", tk)
	}

	// A model failure fails the wake and the generation: later wakes are refused.
	llm.Push(modeltest.Reply{Status: 401})
	resp = a.call("wake", wake("w5"), `{"prompt":"who am I"}`)
	rid = resp["requestId"].(string)
	a.fail(resp, "model_auth_failed")
	for _, p := range []*peer{a, b} {
		if got := names(untilIdle(t, p, rid)); got != aborted {
			t.Errorf("%s: events %s, want %s", p.name, got, aborted)
		}
	}
	a.fail(a.call("wake", wake("w6"), `{"prompt":"again"}`), "session_failed")
	if snap := b.ok(b.call("status", s1, `{}`), "sessionSnapshot"); snap["state"] != "failed" || snap["lastErrorCode"] != "model_auth_failed" {
		t.Errorf("failed snapshot: %v", snap)
	}

	// A memory session journals nothing: no ticket, but a wake that waits runs.
	const s6 = `"sessionId":"s6","generation":1`
	memory := `{"cwd":"` + cwd + `","session":{"mode":"memory"},"model":{"provider":"openai","id":"gpt-x"},"resources":` + resources("") + `}`
	b.ok(b.call("open", s6, memory), "openResult")
	b.fail(b.call("wake", s6+`,"idempotencyKey":"m1"`, `{"prompt":"hi","waitForTerminal":false}`), "durable_admission_unavailable")
	llm.Push(modeltest.Reply{Text: "hello"})
	b.ok(b.call("wake", s6+`,"idempotencyKey":"m1"`, `{"prompt":"hi"}`), "wakeResult")
	b.ok(b.call("close", s6, `{"retainSession":false}`), "closeResult")

	// A provider this host does not configure.
	e := b.fail(b.call("open", `"sessionId":"s7","generation":1`, strings.Replace(memory, "openai", "nope", 1)), "open_failed")
	if det := e["details"].(map[string]any); det["provider"] != "nope" || det["field"] != "payload.model.provider" {
		t.Errorf("open_failed details: %v", e)
	}
}

// TestTurnWireNames checks the agent-turn wire names of the Go packages against the schemas:
// the operation enum is the handshake list, every event name is an eventName, and every code a
// turn, the wake journal, the model client or the transcript can answer is an errorCode. The
// recovery codes that only name failures in host.recovery.failureCodes are not, and
// unsupported_operation, which no operation answers any more, is not either.
func TestTurnWireNames(t *testing.T) {
	onWire := []string{
		protocol.CodeSessionQueueFull, protocol.CodeSessionNotRunning, protocol.CodeSessionFailed,
		protocol.CodeSessionPrecondition, protocol.CodeIdempotencyConflict, protocol.CodeRequestIndeterminate,
		protocol.CodeDurableAdmission, protocol.CodeTurnFailed, protocol.CodeAborted,
		protocol.CodeReprovisionRequired, protocol.CodeCredentialsRequired, protocol.CodeRestoreWakeFailed,
		protocol.CodeConversationMissing,
		protocol.CodeDurabilityFailed, protocol.CodeDurabilityCompletion, protocol.CodeCorruptJournal,
		protocol.CodeInvalidJournalTransition, protocol.CodeJournalEntryMissing, protocol.CodeJournalRecordTooLarge,
		protocol.CodeInsecureStatePath,
		model.CodeUnavailable, model.CodeAuthFailed, model.CodeRateLimited, model.CodeNotFound,
		model.CodeRequestRejected, model.CodeResponseInvalid, model.CodeTimeout, model.CodeCanceled,
		transcript.CodeConversationIdentityMissing, transcript.CodeCorruptTranscript,
		transcript.CodeTranscriptEntryTooLarge, transcript.CodeTranscriptFull, transcript.CodeInvalidEntry,
	}
	v2Only := []string{protocol.CodeTicketNotFound, protocol.CodeTicketNotIndeterminate}
	offWire := []string{protocol.CodeRecoveryOpenTimeout, protocol.CodeRecoveryDeadline, protocol.CodeRestoreOpenFailed,
		protocol.CodeManifestGenerationDiffer, protocol.CodeUnsupportedOperation}
	for _, major := range []int{1, 2} {
		raw, err := fs.ReadFile(schemas.FS(), schemas.Protocol(major))
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Defs map[string]struct {
				Enum []string `json:"enum"`
			} `json:"$defs"`
		}
		if err := json.Unmarshal(raw, &doc); err != nil {
			t.Fatal(err)
		}
		if got := doc.Defs["operation"].Enum; !slices.Equal(got, protocol.Operations(major)) {
			t.Errorf("v%d operation enum %v, want %v", major, got, protocol.Operations(major))
		}
		for _, ev := range turnEvents {
			if !slices.Contains(doc.Defs["eventName"].Enum, ev) {
				t.Errorf("v%d: event %s is not an eventName", major, ev)
			}
		}
		codes := doc.Defs["errorCode"].Enum
		for _, c := range onWire {
			if !slices.Contains(codes, c) {
				t.Errorf("v%d: %s is not an errorCode", major, c)
			}
		}
		for _, c := range v2Only {
			if slices.Contains(codes, c) != (major == 2) {
				t.Errorf("v%d: errorCode %s listed=%v", major, c, slices.Contains(codes, c))
			}
		}
		for _, c := range offWire {
			if slices.Contains(codes, c) {
				t.Errorf("v%d: %s is an errorCode, but no response carries it", major, c)
			}
		}
	}
}
