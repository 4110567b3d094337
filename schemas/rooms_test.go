package schemas_test

import (
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/daemon"
	"github.com/airlockhq/airlock/internal/protocol"
	"github.com/airlockhq/airlock/schemas"
)

// TestServerOutputRooms drives the room operations of one in-process daemon with a room
// service (its own embedded bus) and validates every line it sends: a room, an invite, a
// publication of go-lamp, calls to itself, and the refusals a client can provoke alone.
func TestServerOutputRooms(t *testing.T) {
	v := newValidator(t)
	dir, err := os.MkdirTemp("/tmp", "al-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	socket := filepath.Join(dir, "s.sock")
	d, err := daemon.Start(daemon.Config{SocketPath: socket, StateDir: filepath.Join(dir, "state"),
		Rooms: &daemon.RoomsConfig{ApprovalWait: 500 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		d.Shutdown(ctx)
	})
	checked := 0
	b := v.dial(t, socket, "b", "2.0", &checked)
	a := v.dial(t, socket, "a", "1.0", &checked)
	deadline := time.Now().Add(20 * time.Second)
	for b.call("roomStatus", "", `{}`)["ok"] != true {
		if time.Now().After(deadline) {
			t.Fatal("the room service did not start")
		}
		time.Sleep(20 * time.Millisecond)
	}
	st := b.ok(b.call("roomStatus", "", `{}`), "roomStatusResult")
	self := st["hostId"].(string)
	a.fail(a.call("roomStatus", "", `{}`), "unknown_operation")
	if fs := b.ok(b.call("fabricStatus", "", `{}`), "fabricStatusResult"); fs["mode"] != "local" {
		t.Fatalf("fabricStatus without a fabric: %v", fs)
	}
	a.fail(a.call("fabricStatus", "", `{}`), "unknown_operation")

	lamp := buildLamp(t)
	b.ok(b.call("registerAdapter", "", `{"name":"lamp","command":`+jsonString(lamp)+`}`), "registerResult")
	b.ok(b.call("createRoom", "", `{"room":"home","title":"Home"}`), "roomResult")
	b.fail(b.call("createRoom", "", `{"room":"home"}`), "room_exists")
	b.ok(b.call("listRooms", "", `{}`), "roomList")
	b.ok(b.call("inviteRoom", "", `{"room":"home","name":"bob"}`), "inviteResult")
	b.fail(b.call("inviteRoom", "", `{"room":"nowhere"}`), "unknown_room")
	b.fail(b.call("joinRoom", "", `{"code":"not-a-code"}`), "invalid_join_code")
	b.ok(b.call("publishCapability", "", `{"room":"home","capabilityId":"desk_lamp","actions":["set_power"],"observe":true}`), "publishResult")
	b.fail(b.call("publishCapability", "", `{"room":"home","capabilityId":"no_such_cap"}`), "unknown_capability")
	b.fail(b.call("publishCapability", "", `{"room":"home","capabilityId":"desk_lamp","actions":["explode"]}`), "invalid_request")
	b.ok(b.call("listRoomCapabilities", "", `{"room":"home"}`), "roomCapabilityList")
	b.ok(b.call("showRoom", "", `{"room":"home"}`), "roomDetail")
	call := `{"room":"home","provider":"` + self + `","capabilityId":"desk_lamp"`
	b.ok(b.call("observeRoomCapability", "", call+`}`), "roomCallResult")
	b.ok(b.call("invokeRoomCapability", "", call+`,"action":"set_power","args":{"on":true}}`), "roomCallResult")
	b.fail(b.call("invokeRoomCapability", "", call+`,"action":"set_brightness","args":{"level":3}}`), "unauthorized")
	b.ok(b.call("listApprovals", "", `{}`), "approvalList")
	b.fail(b.call("decideApproval", "", `{"approvalId":"0123456789abcdef01234567","approve":true}`), "unknown_approval")
	b.fail(b.call("decideApproval", "", `{"approvalId":"0123456789abcdef01234567","approve":true,"remember":true,"pattern":"src/**"}`), "unknown_approval")
	b.ok(b.call("listRememberedApprovals", "", `{}`), "rememberedList")
	b.fail(b.call("forgetApproval", "", `{"memoryId":"0123456789abcdef01234567"}`), "unknown_approval")
	b.ok(b.call("unpublishCapability", "", `{"room":"home","capabilityId":"desk_lamp"}`), "unpublishResult")
	b.fail(b.call("roomUILogin", "", `{}`), "ui_disabled")
	b.ok(b.call("closeRoom", "", `{"room":"home"}`), "roomClosed")
	b.fail(b.call("showRoom", "", `{"room":"home"}`), "unknown_room")
	if checked < 20 {
		t.Errorf("only %d lines checked", checked)
	}
}

// TestRoomUnavailableReasons holds the schema's unavailableReason to the reasons package
// protocol defines.
func TestRoomUnavailableReasons(t *testing.T) {
	data, err := fs.ReadFile(schemas.FS(), schemas.Protocol(2))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Defs map[string]struct {
			Properties map[string]json.RawMessage `json:"properties"`
		} `json:"$defs"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	var reason struct {
		Enum []string `json:"enum"`
	}
	if err := json.Unmarshal(doc.Defs["roomCapability"].Properties["unavailableReason"], &reason); err != nil {
		t.Fatal(err)
	}
	got := reason.Enum
	want := []string{protocol.RoomUnavailableBusDisconnected, protocol.RoomUnavailableProviderAbsent,
		protocol.RoomUnavailableAdapterNotReady, protocol.RoomUnavailableCallsUnavailable}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("roomCapability.unavailableReason is %v, package protocol's reasons %v", got, want)
	}
}
