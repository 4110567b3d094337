package room

import (
	"testing"
	"time"
)

// A presence record counts as live for the Sync's TTL after it arrived: a deletion or expiry
// this host missed cannot keep a host present. A newer record makes it present again, and a
// seen deletion counts as a departure at once.
func TestPresenceAgesOutWithoutNewerRecords(t *testing.T) {
	owner, other := mustKey(t).ID(), mustKey(t).ID()
	d := NewDirectory()
	if err := d.Trust("home", owner); err != nil {
		t.Fatal(err)
	}
	d.SetPresence("home", other, true)
	if !d.Present("home", other) {
		t.Fatal("not present without a TTL")
	}
	ttl := 200 * time.Millisecond
	d.setPresenceTTL(ttl)
	d.SetPresence("home", other, true)
	seen := time.Now()
	if !d.Present("home", other) {
		t.Fatal("not present after a live record")
	}
	for d.Present("home", other) {
		if time.Since(seen) > 5*time.Second {
			t.Fatal("presence never aged out")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if time.Since(seen) < ttl {
		t.Fatalf("presence aged out after %v, before the TTL", time.Since(seen))
	}
	if n, _ := d.departures("home", other); n != 0 {
		t.Fatalf("aging out counted %d departures", n)
	}
	d.SetPresence("home", other, true)
	if !d.Present("home", other) {
		t.Fatal("not present after a newer record")
	}
	d.SetPresence("home", other, false)
	if n, _ := d.departures("home", other); d.Present("home", other) || n != 1 {
		t.Fatalf("after a deletion: present %v, %d departures", d.Present("home", other), n)
	}
	if d.Present("elsewhere", other) {
		t.Fatal("present in a room the directory does not know")
	}
}
