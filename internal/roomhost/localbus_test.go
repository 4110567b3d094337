package roomhost

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/airlockhq/airlock/internal/bus"
	"github.com/airlockhq/airlock/internal/room"
)

// TestEmbeddedBusAdmitsItsHostsOnly: the embedded bus refuses a connection without
// credentials and one with the seed of a host it did not admit; it lists B with the room B
// is in, keeps B over its own restart, confines B (no stream deletion, no other host's
// provider subject), and closes B out once the operator removes it.
func TestEmbeddedBusAdmitsItsHostsOnly(t *testing.T) {
	a, b := twoHosts(t, 0)
	bg := ctx(t)
	url := a.svc.Status().NATSURL
	if nc, err := nats.Connect(url, nats.Timeout(5*time.Second)); err == nil {
		nc.Close()
		t.Fatal("an anonymous connection to the embedded bus was accepted")
	}
	stranger, _, err := bus.LoadOrCreateSeed(filepath.Join(t.TempDir(), "x.nk"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bus.Dial(bus.DialConfig{URL: url, Name: "stranger", Nkey: stranger}); err == nil {
		t.Fatal("a host that was not admitted connected")
	}
	fi, err := os.Stat(filepath.Join(a.dir, BusSeedFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("A's seed file: %v, %v", fi, err)
	}

	hosts, err := a.svc.BusHosts()
	if err != nil || len(hosts) != 1 || hosts[0].HostID != b.svc.HostID() || strings.Join(hosts[0].Rooms, ",") != "home" || len(hosts[0].Owns) != 0 {
		t.Fatalf("BusHosts = %+v, %v", hosts, err)
	}
	_, err = b.svc.BusHosts()
	codeIs(t, err, CodeNoEmbeddedBus)
	_, err = b.svc.AdmitBusHost(bg, AdmitRequest{Host: a.svc.HostID(), Nkey: hosts[0].Nkey})
	codeIs(t, err, CodeNoEmbeddedBus)
	_, err = a.svc.AdmitBusHost(bg, AdmitRequest{Host: a.svc.HostID(), Nkey: hosts[0].Nkey})
	codeIs(t, err, room.CodeInvalidRequest)
	_, err = a.svc.AdmitBusHost(bg, AdmitRequest{Host: b.svc.HostID(), Nkey: "not a key"})
	codeIs(t, err, room.CodeInvalidRequest)
	// Another host with B's nkey: a request of the caller's making, not a failed write.
	_, err = a.svc.AdmitBusHost(bg, AdmitRequest{Host: room.HostID(strings.Repeat("1", 64)), Nkey: hosts[0].Nkey})
	codeIs(t, err, room.CodeInvalidRequest)
	if again, err := a.svc.BusHosts(); err != nil || len(again) != 1 || again[0].HostID != b.svc.HostID() {
		t.Fatalf("BusHosts after a refused admission = %+v, %v", again, err)
	}

	// B cannot delete the rooms stream, nor serve A's provider subject.
	before := b.svc.conn.Refusals()
	dctx, cancel := context.WithTimeout(bg, time.Second)
	_, err = b.svc.conn.Request(dctx, "$JS.API.STREAM.DELETE.KV_"+room.RoomsBucket, nil)
	cancel()
	if err == nil {
		t.Fatal("B's stream deletion was answered")
	}
	sub, err := b.svc.conn.Serve(room.CallSubject("home", a.svc.HostID()), 1, (*joinHandler)(b.svc))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Stop()
	waitFor(t, "the broker's refusals", func() bool { return b.svc.conn.Refusals() >= before+2 })
	if _, err := a.svc.Rooms(bg); err != nil {
		t.Fatal(err)
	}
	// A room id another host owns cannot be claimed.
	_, err = b.svc.Create(bg, "home", "")
	codeIs(t, err, CodeRoomExists)

	// A's restart keeps B admitted, with its room from the roster.
	aDir := a.dir
	a.stop()
	a = startHostAt(t, nil, aDir, 0, strings.TrimPrefix(url, "nats://"))
	hosts, err = a.svc.BusHosts()
	if err != nil || len(hosts) != 1 || strings.Join(hosts[0].Rooms, ",") != "home" {
		t.Fatalf("BusHosts after A's restart = %+v, %v", hosts, err)
	}
	if _, err := a.svc.Publish(bg, Publish{Room: "home", Capability: "lamp", Observe: true}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "B sees A's lamp", func() bool {
		caps, _ := b.svc.Capabilities(bg, "home")
		return len(caps) == 1 && caps[0].Available
	})
	if _, err := b.svc.Observe(bg, "home", string(a.svc.HostID()), "lamp"); err != nil {
		t.Fatalf("B's observe after A's restart: %v", err)
	}

	// Removed, B is disconnected and cannot come back.
	err = a.svc.RemoveBusHost(room.HostID(strings.Repeat("0", 64)))
	codeIs(t, err, CodeUnknownBusHost)
	if err := a.svc.RemoveBusHost(b.svc.HostID()); err != nil {
		t.Fatal(err)
	}
	if hosts, err := a.svc.BusHosts(); err != nil || len(hosts) != 0 {
		t.Fatalf("BusHosts after the removal = %+v, %v", hosts, err)
	}
	waitFor(t, "B's connection to drop", func() bool { return !b.svc.conn.Connected() })
	bseed, _, err := bus.LoadOrCreateSeed(filepath.Join(b.dir, BusSeedFile))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bus.Dial(bus.DialConfig{URL: url, Name: "b", Nkey: bseed}); err == nil {
		t.Fatal("a removed host connected")
	}
}

// TestRoomsRepairedAfterTheBucketsAreDeleted: an operator deletes the room buckets (here with
// the warden); both hosts notice, the buckets come back, the owner rewrites its roster and
// every host its own records, so calls work again, a new room can be created and a member
// that restarts sees the room whole — without restarting the owner.
func TestRoomsRepairedAfterTheBucketsAreDeleted(t *testing.T) {
	a, b := twoHosts(t, 0)
	bg := ctx(t)
	if _, err := a.svc.Publish(bg, Publish{Room: "home", Capability: "lamp", Actions: []string{"set_color"}, Observe: true}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "B sees A's lamp", func() bool {
		caps, _ := b.svc.Capabilities(bg, "home")
		return len(caps) == 1 && caps[0].Title == "Lamp"
	})
	for _, bucket := range []string{room.RoomsBucket, room.PresenceBucket, room.CatalogBucket} {
		dctx, cancel := context.WithTimeout(bg, 5*time.Second)
		rep, err := a.svc.local.warden.Request(dctx, "$JS.API.STREAM.DELETE.KV_"+bucket, nil)
		cancel()
		if err != nil || !strings.Contains(string(rep), `"success":true`) {
			t.Fatalf("delete %s: %s %v", bucket, rep, err)
		}
	}
	waitFor(t, "the buckets to come back", func() bool {
		c, err := a.svc.conn.BucketsCreated(bg, roomBuckets...)
		return err == nil && !slices.Contains(c, time.Time{})
	})
	waitFor(t, "A's roster back on the bus", func() bool {
		_, err := a.svc.rooms.Get(bg, "home.roster")
		return err == nil
	})
	waitFor(t, "B's invoke", func() bool {
		res, err := b.svc.Invoke(bg, "home", string(a.svc.HostID()), "lamp", "set_color", json.RawMessage(`{"color":"#123456"}`))
		return err == nil && string(res) == `{"done":"set_color"}`
	})
	if _, err := a.svc.Create(bg, "attic", ""); err != nil {
		t.Fatalf("create after the repair: %v", err)
	}
	bDir := b.dir
	b.stop()
	b = startHost(t, a.svc, bDir, 0)
	waitFor(t, "the restarted B sees the room whole", func() bool {
		d, err := b.svc.Room(bg, "home")
		return err == nil && len(d.Members) == 2 && len(d.Capabilities) == 1 && d.Capabilities[0].Title == "Lamp" && d.Capabilities[0].Available
	})
}
