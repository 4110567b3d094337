package roomhost

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/room"
)

// TestProviderFloorsInTheStore: B provides the lamp to A. While B's state database cannot be
// written, A's call is refused unavailable and the lamp never runs; after B starts again on
// the same state directory, A's call runs, and its floor lease is in B's database, past the
// call's signing time.
func TestProviderFloorsInTheStore(t *testing.T) {
	a, b := twoHosts(t, 0)
	bg := ctx(t)
	if _, err := b.svc.Publish(bg, Publish{Room: "home", Capability: "lamp", Actions: []string{"set_color"}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "A to see B's lamp", func() bool { caps, _ := a.svc.Capabilities(bg, "home"); return len(caps) == 1 })
	invoke := func() error {
		_, err := a.svc.Invoke(bg, "home", string(b.svc.HostID()), "lamp", "set_color", json.RawMessage(`{"color":"#111111"}`))
		return err
	}

	b.st.Close()
	codeIs(t, invoke(), room.CodeUnavailable)
	if n := b.caps.count(); n != 0 {
		t.Fatalf("the lamp ran %d times without a durable floor", n)
	}

	b.stop()
	b = startHost(t, a.svc, b.dir, 0)
	before := time.Now()
	if err := invoke(); err != nil {
		t.Fatalf("after B's restart: %v", err)
	}
	if n := b.caps.count(); n != 1 {
		t.Fatalf("the lamp ran %d times, want 1", n)
	}
	leases, err := b.st.CallFloors(time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if l, ok := leases[string(a.svc.HostID())]; len(leases) != 1 || !ok || l.Before(before.Add(room.FloorStep).Truncate(time.Millisecond)) {
		t.Fatalf("B's stored floors %v, want A's past %v", leases, before.Add(room.FloorStep))
	}
}
