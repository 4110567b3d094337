package metrics

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/audit"
	"github.com/airlockhq/airlock/internal/gate"
	"github.com/airlockhq/airlock/internal/policy"
)

// TestHookCountsEveryCallAtTheGate: a real gate with the metrics hook counts each call once,
// at its After: a call that ran (with the adapter's code), a refusal of the policy, a refusal
// of the door's own checks, at every door; a capability that does not exist is no label
// value, whether the adapter or the gate's knowledge says so.
func TestHookCountsEveryCallAtTheGate(t *testing.T) {
	host, err := policy.Parse([]byte(`{"default":"allow","rules":[{"capability":"*","actions":["off"],"decision":"deny"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	m := New(nil)
	base := serve(t, m)
	known := func(capability, action string) (bool, bool) {
		return capability == "desk_lamp", capability == "desk_lamp" && (action == "on" || action == "off")
	}
	g := gate.New(gate.Config{Host: host, Hooks: []gate.Hook{m.Hook(known)}})
	ctx := context.Background()
	run := func(c *gate.Call, code string) {
		t.Helper()
		if e := g.Check(ctx, c, nil); e != nil {
			t.Fatalf("%s refused: %v", c.Target(), e)
		}
		g.Done(c, code)
	}
	refused := func(c *gate.Call, want string) {
		t.Helper()
		if e := g.Check(ctx, c, nil); e == nil || e.Code != want {
			t.Fatalf("%s: %v, want %s", c.Target(), e, want)
		}
	}
	run(&gate.Call{Actor: gate.Actor{Door: gate.DoorTurn}, Kind: gate.KindTool, Operation: "fs.write"}, "")
	run(&gate.Call{Actor: gate.Actor{Door: gate.DoorMCP}, Kind: gate.KindTool, Operation: "fs.read"}, "not_found")
	run(&gate.Call{Actor: gate.Actor{Door: gate.DoorRoom}, Kind: gate.KindInvoke, Capability: "desk_lamp", Action: "on"}, "")
	run(&gate.Call{Actor: gate.Actor{Door: gate.DoorRoom}, Kind: gate.KindObserve, Capability: "desk_lamp"}, "")
	run(&gate.Call{Actor: gate.Actor{Door: gate.DoorSocket}, Kind: gate.KindInvoke, Capability: "made_up_1", Action: "on"}, "unknown_capability")
	run(&gate.Call{Actor: gate.Actor{Door: gate.DoorSocket}, Kind: gate.KindInvoke, Capability: "desk_lamp", Action: "made_up_2"}, "unsupported_action")
	refused(&gate.Call{Actor: gate.Actor{Door: gate.DoorMCP}, Kind: gate.KindInvoke, Capability: "desk_lamp", Action: "off"}, gate.CodePolicyDenied)
	// A policy refusal of a capability no adapter serves: the gate cannot tell, known can.
	refused(&gate.Call{Actor: gate.Actor{Door: gate.DoorSocket}, Kind: gate.KindInvoke, Capability: "made_up_3", Action: "off"}, gate.CodePolicyDenied)
	g.Refuse(&gate.Call{Actor: gate.Actor{Door: gate.DoorTurn}, Kind: gate.KindTool, Operation: "fs.read"}, "path_outside_cwd")

	body := scrape(t, base)
	mustContain(t, body,
		`airlock_calls_total{action="",capability="",code="ok",door="turn",operation="fs.write"} 1`,
		`airlock_calls_total{action="",capability="",code="not_found",door="mcp",operation="fs.read"} 1`,
		`airlock_calls_total{action="on",capability="desk_lamp",code="ok",door="room",operation="invoke"} 1`,
		`airlock_calls_total{action="",capability="desk_lamp",code="ok",door="room",operation="observe"} 1`,
		`airlock_calls_total{action="",capability="",code="unknown_capability",door="socket",operation="invoke"} 1`,
		`airlock_calls_total{action="",capability="desk_lamp",code="unsupported_action",door="socket",operation="invoke"} 1`,
		`airlock_calls_total{action="off",capability="desk_lamp",code="policy_denied",door="mcp",operation="invoke"} 1`,
		`airlock_calls_total{action="",capability="",code="policy_denied",door="socket",operation="invoke"} 1`,
		`airlock_calls_total{action="",capability="",code="path_outside_cwd",door="turn",operation="fs.read"} 1`,
		`airlock_call_duration_seconds_count{action="",capability="",door="turn",operation="fs.write",outcome="ok"} 1`,
	)
	if strings.Contains(body, "made_up") {
		t.Errorf("a name no adapter serves became a label value:\n%s", body)
	}
	if n := strings.Count(body, "\nairlock_calls_total{"); n != 9 {
		t.Errorf("%d call series, want 9", n)
	}
	// Without known, a refused call's names are dropped rather than trusted.
	m2 := New(nil)
	base2 := serve(t, m2)
	g2 := gate.New(gate.Config{Host: host, Hooks: []gate.Hook{m2.Hook(nil)}})
	if e := g2.Check(ctx, &gate.Call{Actor: gate.Actor{Door: gate.DoorSocket}, Kind: gate.KindInvoke, Capability: "desk_lamp", Action: "off"}, nil); e == nil {
		t.Fatal("deny rule did not refuse")
	}
	mustContain(t, scrape(t, base2), `airlock_calls_total{action="",capability="",code="policy_denied",door="socket",operation="invoke"} 1`)
}

func TestObserveRoomCall(t *testing.T) {
	m := New(nil)
	base := serve(t, m)
	m.ObserveRoomCall(RoomCall{Door: DoorWeb, Operation: "invoke"}, 20*time.Millisecond)
	m.ObserveRoomCall(RoomCall{Door: DoorTurn, Operation: "observe", Code: "not_member"}, time.Millisecond)
	m.ObserveRoomCall(RoomCall{Door: "room-123", Operation: "fs.write", Code: CodeOK}, time.Millisecond)
	mustContain(t, scrape(t, base),
		`airlock_room_calls_total{code="ok",door="web",operation="invoke"} 1`,
		`airlock_room_calls_total{code="not_member",door="turn",operation="observe"} 1`,
		`airlock_room_calls_total{code="ok",door="other",operation="other"} 1`,
		`airlock_room_call_duration_seconds_bucket{door="web",operation="invoke",outcome="ok",le="0.01"} 0`,
		`airlock_room_call_duration_seconds_bucket{door="web",operation="invoke",outcome="ok",le="0.025"} 1`,
		`airlock_room_call_duration_seconds_count{door="turn",operation="observe",outcome="error"} 1`,
	)
}

// TestAuditJournalFeedsAuditMetrics: ObserveAuditAppend is the audit journal's OnSync; what
// the metrics count is what the journal says it wrote and synced.
func TestAuditJournalFeedsAuditMetrics(t *testing.T) {
	m := New(nil)
	base := serve(t, m)
	dir := filepath.Join(t.TempDir(), "audit")
	j, _, err := audit.Open(dir, audit.Options{OnSync: m.ObserveAuditAppend})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, err := j.Append(audit.Entry{Kind: audit.KindEvent, Door: audit.DoorOwner, Actor: audit.Actor{Session: fmt.Sprint("s-", i)},
			Target: audit.Target{Op: "session.open"}, Outcome: "ok"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	st := j.Stats()
	if st.Records < 5 || st.Fsyncs == 0 {
		t.Fatalf("journal stats %+v", st)
	}
	mustContain(t, scrape(t, base),
		fmt.Sprintf(`airlock_audit_records_total %d`, st.Records),
		fmt.Sprintf(`airlock_audit_bytes_total %d`, st.Bytes),
		fmt.Sprintf(`airlock_audit_fsync_duration_seconds_count %d`, st.Fsyncs),
	)
}
