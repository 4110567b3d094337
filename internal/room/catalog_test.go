package room

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestCatalogRecord(t *testing.T) {
	k, other := mustKey(t), mustKey(t)
	c := Catalog{Room: "home", Provider: k.ID(), Version: 3, Descriptors: []json.RawMessage{json.RawMessage(`{"capabilityId":"lamp"}`)}}
	data, err := SignCatalog(k, c)
	if err != nil {
		t.Fatal(err)
	}
	got, err := OpenCatalog(data, k.ID())
	if err != nil || got.Version != 3 || len(got.Descriptors) != 1 || string(got.Descriptors[0]) != `{"capabilityId":"lamp"}` {
		t.Fatalf("OpenCatalog = %+v, %v", got, err)
	}
	// Read as another provider's, or altered, it fails.
	if _, err := OpenCatalog(data, other.ID()); !errors.Is(err, ErrInvalidRecord) {
		t.Fatalf("another provider's catalog: %v", err)
	}
	forged := []byte(strings.Replace(string(data), `"version":3`, `"version":4`, 1))
	if _, err := OpenCatalog(forged, k.ID()); !errors.Is(err, ErrInvalidRecord) {
		t.Fatalf("altered catalog: %v", err)
	}
	// A projection record is not a catalog.
	proj, err := SignProjection(k, Projection{Room: "home", Provider: k.ID(), Version: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := OpenCatalog(proj, k.ID()); !errors.Is(err, ErrInvalidRecord) {
		t.Fatalf("a projection read as a catalog: %v", err)
	}
	if _, err := SignCatalog(other, c); !errors.Is(err, ErrInvalidRecord) {
		t.Fatalf("signed by another host: %v", err)
	}
}

// A caller's approval wait sets the deadline to that wait plus InvokeTimeout, rounded up to a
// millisecond; none, or one beyond ApprovalTimeout, gives MaxCallTimeout; without
// AwaitApproval the wait is ignored.
func TestPrepareApprovalWait(t *testing.T) {
	f := newFixture(t)
	now := time.UnixMilli(1_800_000_000_000)
	for _, tc := range []struct {
		await      bool
		wait, want time.Duration
	}{
		{true, 2 * time.Second, InvokeTimeout + 2*time.Second},
		{true, 1500 * time.Microsecond, InvokeTimeout + 2*time.Millisecond},
		{true, 0, MaxCallTimeout},
		{true, time.Hour, MaxCallTimeout},
		{false, 2 * time.Second, CallTimeout},
	} {
		req := invoke("lamp", "set", `{}`)
		req.AwaitApproval, req.ApprovalWait = tc.await, tc.wait
		p := f.prepare(t, f.b, req, now)
		if p.call.Timeout != tc.want {
			t.Errorf("await %v wait %v: timeout %v, want %v", tc.await, tc.wait, p.call.Timeout, tc.want)
		}
		c, err := DecodeCall(p.data)
		if err != nil || c.Timeout != tc.want {
			t.Errorf("await %v wait %v: the prepared call decodes as %+v, %v", tc.await, tc.wait, c, err)
		}
	}
}
