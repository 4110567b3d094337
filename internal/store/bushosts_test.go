package store

import (
	"errors"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/airlockhq/airlock/internal/protocol"
)

func TestBusHostsRoundTripAndRestart(t *testing.T) {
	dir := newDir(t)
	s := openT(t, dir)
	a := BusHostRecord{Host: strings.Repeat("a", 64), Nkey: "U" + strings.Repeat("A", 55), AdmittedAt: time.Unix(1, 0).UTC()}
	b := BusHostRecord{Host: strings.Repeat("b", 64), Nkey: "U" + strings.Repeat("B", 55), AdmittedAt: time.Unix(2, 0).UTC()}
	for _, r := range []BusHostRecord{b, a} {
		if err := s.PutBusHost(r); err != nil {
			t.Fatal(err)
		}
	}
	catalogUpdate := &protocol.Error{Code: protocol.CodeCatalogUpdate}
	for _, bad := range []BusHostRecord{
		{Host: "aa", Nkey: a.Nkey},
		{Host: strings.Repeat("c", 64), Nkey: "N" + strings.Repeat("A", 55)},
		{Host: strings.Repeat("c", 64), Nkey: "U" + strings.Repeat("a", 55)},
		{Host: strings.Repeat("c", 64), Nkey: a.Nkey}, // another host's nkey
	} {
		if err := s.PutBusHost(bad); !errors.Is(err, catalogUpdate) {
			t.Errorf("PutBusHost(%+v) = %v, want catalog_update_failed", bad, err)
		}
	}
	a.Nkey = "U" + strings.Repeat("C", 55) // a new key replaces the old
	if err := s.PutBusHost(a); err != nil {
		t.Fatal(err)
	}
	s.Close()

	s = openT(t, dir)
	got, err := s.BusHosts()
	if err != nil || len(got) != 2 || got[0] != a || got[1] != b {
		t.Fatalf("BusHosts = %+v, %v", got, err)
	}
	if existed, err := s.DeleteBusHost(b.Host); !existed || err != nil {
		t.Fatalf("DeleteBusHost = %v, %v", existed, err)
	}
	if existed, err := s.DeleteBusHost(b.Host); existed || err != nil {
		t.Fatalf("DeleteBusHost again = %v, %v", existed, err)
	}
	if got, _ := s.BusHosts(); len(got) != 1 {
		t.Fatalf("BusHosts after delete = %+v", got)
	}
	s.Close()

	rawUpdate(t, s.Path(), func(tx *bolt.Tx) error {
		return tx.Bucket(bucketBusHosts).Put([]byte(b.Host), []byte(`{"host":"`+a.Host+`","nkey":"`+a.Nkey+`","admittedAt":"2026-01-01T00:00:00Z"}`))
	})
	s = openT(t, dir)
	defer s.Close()
	if _, err := s.BusHosts(); !errors.Is(err, &protocol.Error{Code: protocol.CodeCorruptState}) {
		t.Errorf("BusHosts with a record under another key = %v", err)
	}
}
