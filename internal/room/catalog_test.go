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

func TestPrepareApprovalWait(t *testing.T) {
	k := mustKey(t)
	c := NewCaller(k, nil)
	now := time.UnixMilli(1_800_000_000_000)
	req := Request{Room: "home", Provider: mustKey(t).ID(), Capability: "lamp", Operation: Invoke, Action: "set", Args: json.RawMessage(`{}`)}
	for _, tc := range []struct {
		wait, want time.Duration
	}{
		{2 * time.Second, InvokeTimeout + 2*time.Second},
		{0, InvokeTimeout + ApprovalTimeout},
		{time.Hour, InvokeTimeout + ApprovalTimeout},
	} {
		p, err := c.PrepareApprovalWait(req, tc.wait, now)
		if err != nil {
			t.Fatal(err)
		}
		if p.call.Timeout != tc.want || VerifyCall(p.call, now) != nil {
			t.Errorf("wait %v: timeout %v, want %v", tc.wait, p.call.Timeout, tc.want)
		}
		if _, err := DecodeCall(p.data); err != nil {
			t.Errorf("wait %v: the prepared call does not decode: %v", tc.wait, err)
		}
	}
}
