package mcp_test

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock/internal/client"
	"github.com/airlockhq/airlock/internal/daemontest"
	"github.com/airlockhq/airlock/internal/mcp"
)

// roomData runs a room operation that must succeed and decodes its data into v.
func roomData(t *testing.T, c *client.Client, op string, payload, v any) {
	t.Helper()
	r := call(t, c, client.Command{Operation: op, Payload: payload})
	if !r.OK {
		t.Fatalf("%s: %v", op, r.Err())
	}
	if v != nil {
		if err := json.Unmarshal(r.Data, v); err != nil {
			t.Fatalf("%s: %v", op, err)
		}
	}
}

// waitRooms waits for e's room service, which starts after recovery and the adapters'
// restore.
func waitRooms(t *testing.T, e *env) {
	t.Helper()
	waitFor(t, "the room service", func() bool {
		return call(t, e.c, client.Command{Operation: "roomStatus", Payload: map[string]any{}}).OK
	})
}

// notified returns how many tools/list_changed notifications the client has had.
func (cn *conn) notified() int {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	return cn.changed
}

// TestRoomPublicationsAreTools: a session opened with a room gets, through airlock mcp, the
// actions and observations published into it, named as its model would see them; each call is
// a room call that the provider authorizes, so an action A withdrew is refused before the
// tool list catches up, and then disappears with list_changed.
func TestRoomPublicationsAreTools(t *testing.T) {
	a := startEnv(t)
	a.registerLamp(t)
	var st struct {
		HostID  string `json:"hostId"`
		NATSURL string `json:"natsUrl"`
	}
	waitRooms(t, a)
	roomData(t, a.c, "roomStatus", map[string]any{}, &st)
	b := startEnvWith(t, daemontest.Options{Args: []string{"--nats-via", a.d.Socket}})
	waitRooms(t, b)

	roomData(t, a.c, "createRoom", map[string]any{"room": "home"}, nil)
	var inv struct {
		Code string `json:"code"`
	}
	roomData(t, a.c, "inviteRoom", map[string]any{"room": "home"}, &inv)
	roomData(t, b.c, "joinRoom", map[string]any{"code": inv.Code}, nil)
	roomData(t, a.c, "publishCapability", map[string]any{"room": "home", "capabilityId": "desk_lamp",
		"actions": []string{"set_power"}, "observe": true}, nil)

	if r := call(t, b.c, client.Command{Operation: "open", SessionID: "agent", Generation: gen(1),
		Payload: map[string]any{"cwd": b.root, "session": map[string]any{"mode": "memory"}, "room": "home"}}); !r.OK {
		t.Fatalf("open with a room: %v", r.Err())
	}
	cn := b.connect(t, mcp.Config{SessionID: "agent", Generation: 1})
	want := []string{"room_desk_lamp_observe", "room_desk_lamp_set_power"}
	var tools map[string]*sdk.Tool
	waitFor(t, "B's bridge to list A's publication", func() bool {
		if err := cn.b.Refresh(context.Background()); err != nil {
			t.Fatal(err)
		}
		tools = cn.tools(t)
		return len(tools) == len(want)
	})
	for _, n := range want {
		if tools[n] == nil {
			t.Fatalf("tools/list = %v, want %v", cn.b.Tools(), want)
		}
	}
	if in, _ := json.Marshal(tools["room_desk_lamp_set_power"].InputSchema); string(in) != `{"additionalProperties":false,"properties":{"on":{"type":"boolean"}},"required":["on"],"type":"object"}` {
		t.Fatalf("set_power's input schema: %s", in)
	}

	r := cn.call(t, "room_desk_lamp_set_power", map[string]any{"on": true})
	checkOutput(t, tools["room_desk_lamp_set_power"], r)
	if s := structured(t, r); s["on"] != true {
		t.Fatalf("set_power through the room: %v", s)
	}
	if s := structured(t, cn.call(t, "room_desk_lamp_observe", nil)); s["on"] != true {
		t.Fatalf("observe through the room: %v", s)
	}
	if c := errorCode(t, cn.call(t, "room_desk_lamp_observe", map[string]any{"bogus": 1})); c != "invalid_args" {
		t.Fatalf("observe through the room with an argument: %s", c)
	}
	// What A did not publish is no tool, and not callable by name.
	if _, err := cn.cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "room_desk_lamp_set_brightness",
		Arguments: map[string]any{"level": 5}}); err == nil {
		t.Fatal("an unpublished action was callable by name")
	}
	// A bad argument is the adapter's invalid_args, relayed by the provider.
	if c := errorCode(t, cn.call(t, "room_desk_lamp_set_power", map[string]any{"on": "yes"})); c != "invalid_args" {
		t.Fatalf("set_power with a string: %s", c)
	}

	// A withdraws the action: the provider refuses it at once, whatever B's list says...
	before := cn.notified()
	roomData(t, a.c, "unpublishCapability", map[string]any{"room": "home", "capabilityId": "desk_lamp"}, nil)
	if c := errorCode(t, cn.call(t, "room_desk_lamp_set_power", map[string]any{"on": false})); c != "unauthorized" {
		t.Fatalf("set_power after the unpublish: %q", c)
	}
	// ...and the tools go with list_changed once B's host has seen the withdrawal.
	waitFor(t, "the room tools to go", func() bool {
		if err := cn.b.Refresh(context.Background()); err != nil {
			t.Fatal(err)
		}
		return len(cn.b.Tools()) == 0
	})
	waitFor(t, "tools/list_changed after the unpublish", func() bool { return cn.notified() > before })
	if tl := cn.tools(t); len(tl) != 0 {
		t.Fatalf("after the unpublish: %v", slices.Collect(maps.Keys(tl)))
	}
}
