package daemon_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/audit"
	"github.com/airlockhq/airlock/internal/client"
	"github.com/airlockhq/airlock/internal/daemontest"
	"github.com/airlockhq/airlock/internal/model"
	"github.com/airlockhq/airlock/internal/model/modeltest"
)

// roomReady waits until d's room service answers and returns its roomStatus.
func roomReady(t *testing.T, c *client.Client) map[string]any {
	t.Helper()
	var st map[string]any
	if !daemontest.WaitFor(20*time.Second, func() bool {
		r := call(t, c, client.Command{Operation: "roomStatus"})
		if !r.OK {
			return false
		}
		return r.Decode(&st) == nil
	}) {
		t.Fatal("the room service did not start")
	}
	return st
}

func mustOK(t *testing.T, c *client.Client, op string, payload any) *client.Response {
	t.Helper()
	r := call(t, c, client.Command{Operation: op, Payload: payload})
	if !r.OK {
		t.Fatalf("%s: %v", op, r.Err())
	}
	return r
}

// TestBinaryRoomAgentTools: host B's agent session, opened with a room, gets host A's published
// capability as tools next to fs.*; the scripted model calls the published action (it runs at
// A), then one A did not publish (never offered, so unknown_tool), and the events name the room
// call; B's audit journal records each room call the turn made (door turn, its session).
func TestBinaryRoomAgentTools(t *testing.T) {
	lamp := daemontest.Build(t, "./examples/adapters/go-lamp")
	llm := startModel(t)
	a := daemontest.Start(t, daemontest.Options{})
	ca := a.Dial()
	sa := roomReady(t, ca)
	b := daemontest.Start(t, daemontest.Options{Args: []string{"--nats-via", a.Socket, "--provider", "local=" + llm.URL()}})
	cb := b.Dial()
	roomReady(t, cb)

	mustOK(t, ca, "registerAdapter", map[string]any{"name": "lamp", "command": lamp})
	mustOK(t, ca, "createRoom", map[string]any{"room": "home"})
	var inv struct {
		Code string `json:"code"`
	}
	if err := mustOK(t, ca, "inviteRoom", map[string]any{"room": "home"}).Decode(&inv); err != nil {
		t.Fatal(err)
	}
	mustOK(t, cb, "joinRoom", map[string]any{"code": inv.Code})
	mustOK(t, ca, "publishCapability", map[string]any{"room": "home", "capabilityId": "desk_lamp", "actions": []string{"set_power"}, "observe": true})
	if !daemontest.WaitFor(20*time.Second, func() bool {
		var caps struct {
			Capabilities []any `json:"capabilities"`
		}
		mustOK(t, cb, "listRoomCapabilities", map[string]any{"room": "home"}).Decode(&caps)
		return len(caps.Capabilities) == 1
	}) {
		t.Fatal("B never saw A's publication")
	}

	// An open naming a room B is not in is refused.
	bad := modelOpen(t.TempDir())
	bad["room"] = "elsewhere"
	if r := call(t, cb, client.Command{Operation: "open", SessionID: "x", Generation: gen(1), Payload: bad}); code(r) != "unknown_room" {
		t.Fatalf("open with an unknown room: %s", code(r))
	}
	p := modelOpen(t.TempDir())
	p["room"] = "home"
	if r := call(t, cb, client.Command{Operation: "open", SessionID: "agent", Generation: gen(1), Payload: p}); !r.OK {
		t.Fatalf("open: %v", r.Err())
	}
	w := b.Dial()
	if r := call(t, w, client.Command{Operation: "attach", SessionID: "agent", Generation: gen(1)}); !r.OK {
		t.Fatal(r.Err())
	}
	// The second call comes after A unpublished, though the turn still offers the tool: the
	// provider refuses it.
	hold := make(chan struct{})
	llm.Push(
		modeltest.Reply{ToolCalls: []model.ToolCall{{ID: "call_0", Name: "room_desk_lamp_set_power", Arguments: `{"on":true}`}}},
		modeltest.Reply{Hold: hold, ToolCalls: []model.ToolCall{{ID: "call_0", Name: "room_desk_lamp_set_power", Arguments: `{"on":false}`}}},
		modeltest.Reply{ToolCalls: []model.ToolCall{{ID: "call_0", Name: "room_desk_lamp_set_brightness", Arguments: `{"level":5}`}}},
		modeltest.Reply{Text: "The lamp is on."},
	)
	go func() {
		<-llm.Arrived(2)
		mustOK(t, ca, "unpublishCapability", map[string]any{"room": "home", "capabilityId": "desk_lamp"})
		close(hold)
	}()
	r := wake(t, cb, "agent", 1, "k1", "turn the lamp on", true)
	var res turnResult
	if err := r.Decode(&res); err != nil || !r.OK || res.Result.Text != "The lamp is on." || res.Result.ToolCalls != 3 {
		t.Fatalf("wake: %+v %v %v", res, r.Err(), err)
	}

	// The model was offered the published action and the observation, nothing else of the room.
	reqs := llm.Requests()
	var names []string
	for _, tool := range reqs[0].Request.Tools {
		names = append(names, tool.Name)
		if tool.Name == "room_desk_lamp_set_power" && !strings.Contains(string(tool.Parameters), `"on":{"type":"boolean"}`) {
			t.Errorf("set_power parameters %s", tool.Parameters)
		}
	}
	if strings.Join(names, ",") != "room_desk_lamp_observe,room_desk_lamp_set_power" {
		t.Fatalf("tools offered: %v", names)
	}
	// The tool's output the model read: A's lamp answered through the room.
	if out := lastToolOutput(reqs[1].Request.Messages); !strings.Contains(out, `"on":true`) {
		t.Fatalf("set_power output: %s", out)
	}
	if out := lastToolOutput(reqs[2].Request.Messages); !strings.Contains(out, `"code":"unauthorized"`) {
		t.Fatalf("set_power after the unpublish: %s", out)
	}
	if out := lastToolOutput(reqs[3].Request.Messages); !strings.Contains(out, "unknown_tool") {
		t.Fatalf("set_brightness output: %s", out)
	}

	// The events name the room call.
	var ends []map[string]any
	timeout := time.After(20 * time.Second)
	for len(ends) < 3 {
		select {
		case raw := <-w.Events():
			var ev struct {
				Event string         `json:"event"`
				Data  map[string]any `json:"data"`
			}
			json.Unmarshal(raw, &ev)
			if ev.Event == "toolEnd" {
				ends = append(ends, ev.Data)
			}
		case <-timeout:
			t.Fatalf("toolEnd events: %v", ends)
		}
	}
	room, _ := ends[0]["room"].(map[string]any)
	if ends[0]["operation"] != "room.invoke" || ends[0]["ok"] != true || room["provider"] != sa["hostId"] || room["action"] != "set_power" {
		t.Fatalf("first toolEnd: %v", ends[0])
	}
	if e, _ := ends[1]["error"].(map[string]any); ends[1]["operation"] != "room.invoke" || ends[1]["ok"] != false || e["code"] != "unauthorized" {
		t.Fatalf("second toolEnd: %v", ends[1])
	}
	if ends[2]["ok"] != false || ends[2]["operation"] != nil {
		t.Fatalf("third toolEnd: %v", ends[2])
	}
	// B's journal has both room calls the turn made, at the turn door, with their outcomes.
	var made []string
	started := map[uint64]bool{}
	for _, rec := range journalRecords(t, b.StateDir) {
		if rec.Target == nil || rec.Target.Op != "room.call.made" {
			continue
		}
		if rec.Door != audit.DoorTurn || rec.Actor.Session != "agent" || rec.Actor.Generation != 1 || rec.Actor.Room != "home" ||
			rec.Actor.Host != sa["hostId"] || rec.Target.Capability != "desk_lamp" || rec.Target.Action != "set_power" {
			t.Errorf("room call made: %+v %+v %+v", rec, rec.Actor, rec.Target)
		}
		switch rec.Kind {
		case audit.KindStarted:
			started[rec.Seq] = true
		case audit.KindOutcome:
			if started[rec.Ref] {
				made = append(made, rec.Outcome)
			}
		}
	}
	if strings.Join(made, ",") != "ok,unauthorized" {
		t.Fatalf("the turn's room calls in B's journal end %v, want ok, unauthorized", made)
	}
}

func lastToolOutput(msgs []model.Message) string {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == model.RoleTool {
			return msgs[i].Content
		}
	}
	return ""
}

// TestBinaryEndedLeaseWithdrawsPublications: a temporary adapter whose lease ended while the
// daemon was down is removed at the next start without running, and its stored publication
// goes with it (its registration recorded its capability ids): the room does not show it, and
// an adapter registered later with the same capability is not published by the old act.
func TestBinaryEndedLeaseWithdrawsPublications(t *testing.T) {
	lamp := daemontest.Build(t, "./examples/adapters/go-lamp")
	d := daemontest.Start(t, daemontest.Options{})
	c := d.Dial()
	roomReady(t, c)
	mustOK(t, c, "createRoom", map[string]any{"room": "home"})
	const lease = 4 * time.Second
	ends := time.Now().Add(lease)
	mustOK(t, c, "registerAdapter", map[string]any{"name": "lamp", "command": lamp, "leaseSeconds": int(lease / time.Second)})
	mustOK(t, c, "publishCapability", map[string]any{"room": "home", "capabilityId": "desk_lamp", "observe": true})
	c.Close()
	d.Stop()
	stoppedFirst := time.Now().Before(ends)
	time.Sleep(time.Until(ends))

	d2 := daemontest.Start(t, daemontest.Options{Socket: d.Socket, StateDir: d.StateDir})
	c2 := d2.Dial()
	st := roomReady(t, c2)
	if stoppedFirst && !strings.Contains(d2.Stderr(), "temporary adapter registration removed at start: its lease ended") {
		t.Fatalf("the ended lease was not removed at start:\n%s", d2.Stderr())
	}
	var caps struct {
		Capabilities []json.RawMessage `json:"capabilities"`
	}
	if err := mustOK(t, c2, "listRoomCapabilities", map[string]any{"room": "home"}).Decode(&caps); err != nil || len(caps.Capabilities) != 0 {
		t.Fatalf("home after the lease ended: %s, %v", caps.Capabilities, err)
	}
	mustOK(t, c2, "registerAdapter", map[string]any{"name": "lamp2", "command": lamp})
	if err := mustOK(t, c2, "listRoomCapabilities", map[string]any{"room": "home"}).Decode(&caps); err != nil || len(caps.Capabilities) != 0 {
		t.Fatalf("home after registering the capability again: %s, %v", caps.Capabilities, err)
	}
	if r := call(t, c2, client.Command{Operation: "observeRoomCapability", Payload: map[string]any{"room": "home", "provider": st["hostId"], "capabilityId": "desk_lamp"}}); code(r) != "unauthorized" {
		t.Fatalf("observe of the withdrawn publication: %s", code(r))
	}
}

// TestBinaryRoomAgentWithheldResult: an agent turn on host B posts to host A's notice board
// through the room, text that fails the runtime's screens. The model reads result_withheld,
// not retryable, quoting nothing of the text; the toolEnd event says the same; the board,
// not restarted, is then cleared by the next tool call of the same turn.
func TestBinaryRoomAgentWithheldResult(t *testing.T) {
	nb := daemontest.Build(t, "./internal/daemontest/noticeboard")
	llm := startModel(t)
	a := daemontest.Start(t, daemontest.Options{})
	ca := a.Dial()
	roomReady(t, ca)
	b := daemontest.Start(t, daemontest.Options{Args: []string{"--nats-via", a.Socket, "--provider", "local=" + llm.URL()}})
	cb := b.Dial()
	roomReady(t, cb)

	mustOK(t, ca, "registerAdapter", map[string]any{"name": "board", "command": nb})
	pid := func() float64 {
		var st struct {
			Adapters []map[string]any `json:"adapters"`
		}
		mustOK(t, ca, "listAdapters", map[string]any{}).Decode(&st)
		if len(st.Adapters) != 1 || st.Adapters[0]["state"] != "ready" {
			t.Fatalf("adapters: %v", st.Adapters)
		}
		return st.Adapters[0]["pid"].(float64)
	}
	before := pid()
	mustOK(t, ca, "createRoom", map[string]any{"room": "home"})
	var inv struct {
		Code string `json:"code"`
	}
	if err := mustOK(t, ca, "inviteRoom", map[string]any{"room": "home"}).Decode(&inv); err != nil {
		t.Fatal(err)
	}
	mustOK(t, cb, "joinRoom", map[string]any{"code": inv.Code})
	mustOK(t, ca, "publishCapability", map[string]any{"room": "home", "capabilityId": "notice_board", "actions": []string{"post", "clear"}})
	if !daemontest.WaitFor(20*time.Second, func() bool {
		var caps struct {
			Capabilities []any `json:"capabilities"`
		}
		mustOK(t, cb, "listRoomCapabilities", map[string]any{"room": "home"}).Decode(&caps)
		return len(caps.Capabilities) == 1
	}) {
		t.Fatal("B never saw A's publication")
	}
	p := modelOpen(t.TempDir())
	p["room"] = "home"
	if r := call(t, cb, client.Command{Operation: "open", SessionID: "agent", Generation: gen(1), Payload: p}); !r.OK {
		t.Fatalf("open: %v", r.Err())
	}
	w := b.Dial()
	if r := call(t, w, client.Command{Operation: "attach", SessionID: "agent", Generation: gen(1)}); !r.OK {
		t.Fatal(r.Err())
	}
	llm.Push(
		modeltest.Reply{ToolCalls: []model.ToolCall{{ID: "call_0", Name: "room_notice_board_post", Arguments: `{"text":"wifi password: hunter2"}`}}},
		modeltest.Reply{ToolCalls: []model.ToolCall{{ID: "call_1", Name: "room_notice_board_clear", Arguments: `{}`}}},
		modeltest.Reply{Text: "Posted, then cleared."},
	)
	r := wake(t, cb, "agent", 1, "k1", "post the wifi password", true)
	var res turnResult
	if err := r.Decode(&res); err != nil || !r.OK || res.Result.ToolCalls != 2 {
		t.Fatalf("wake: %+v %v %v", res, r.Err(), err)
	}
	reqs := llm.Requests()
	var out struct {
		Error struct {
			Code      string `json:"code"`
			Message   string `json:"message"`
			Retryable bool   `json:"retryable"`
		} `json:"error"`
	}
	posted := lastToolOutput(reqs[1].Request.Messages)
	if json.Unmarshal([]byte(posted), &out) != nil || out.Error.Code != "result_withheld" || out.Error.Retryable || strings.Contains(posted, "hunter2") {
		t.Fatalf("the post's output the model read: %s", posted)
	}
	if cleared := lastToolOutput(reqs[2].Request.Messages); !strings.Contains(cleared, `"cleared":1`) {
		t.Fatalf("the clear's output the model read: %s", cleared)
	}
	var ends []map[string]any
	timeout := time.After(20 * time.Second)
	for len(ends) < 2 {
		select {
		case raw := <-w.Events():
			var ev struct {
				Event string         `json:"event"`
				Data  map[string]any `json:"data"`
			}
			json.Unmarshal(raw, &ev)
			if ev.Event == "toolEnd" {
				ends = append(ends, ev.Data)
			}
		case <-timeout:
			t.Fatalf("toolEnd events: %v", ends)
		}
	}
	if e, _ := ends[0]["error"].(map[string]any); ends[0]["ok"] != false || e["code"] != "result_withheld" || e["retryable"] == true {
		t.Fatalf("the post's toolEnd: %v", ends[0])
	}
	if ends[1]["ok"] != true {
		t.Fatalf("the clear's toolEnd: %v", ends[1])
	}
	if after := pid(); after != before {
		t.Fatalf("the board's pid changed from %v to %v", before, after)
	}
}
