package store

import (
	"errors"
	"slices"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/airlockhq/airlock/internal/protocol"
)

func TestRoomsRoundTripAndRestart(t *testing.T) {
	dir := newDir(t)
	s := openT(t, dir)
	owner := RoomRecord{ID: "kitchen", Title: "Kitchen", Owner: "aa", Version: 2,
		Members: []RoomMember{{Host: "aa"}, {Host: "bb", Name: "bob"}}}
	member := RoomRecord{ID: "garage", Title: "Garage", Owner: "cc"}
	for _, r := range []RoomRecord{owner, member} {
		if err := s.PutRoom(r); err != nil {
			t.Fatal(err)
		}
	}
	pub := PublicationRecord{Room: "kitchen", Capability: "living_room_light", Actions: []string{"set_color"}, Observe: true, ApproveEach: true}
	if err := s.PutPublication(pub); err != nil {
		t.Fatal(err)
	}
	if err := s.PutPublication(PublicationRecord{Room: "garage", Capability: "living_room_light"}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutPublication(PublicationRecord{Room: "garage", Capability: "printer"}); err != nil {
		t.Fatal(err)
	}
	s.Close()

	s = openT(t, dir)
	defer s.Close()
	rooms, err := s.Rooms()
	if err != nil || len(rooms) != 2 || rooms[0].ID != "garage" || rooms[1].Version != 2 || len(rooms[1].Members) != 2 {
		t.Fatalf("Rooms = %+v, %v", rooms, err)
	}
	pubs, err := s.Publications()
	if err != nil || len(pubs) != 3 || !slices.Equal(pubs[2].Actions, []string{"set_color"}) || !pubs[2].ApproveEach {
		t.Fatalf("Publications = %+v, %v", pubs, err)
	}
	got, err := s.DeletePublications("", "living_room_light")
	if err != nil || !slices.Equal(got, []string{"garage", "kitchen"}) {
		t.Fatalf("DeletePublications = %v, %v", got, err)
	}
	if got, err := s.DeletePublications("", "living_room_light"); err != nil || len(got) != 0 {
		t.Fatalf("second DeletePublications = %v, %v", got, err)
	}
	existed, err := s.DeleteRoom("garage")
	if err != nil || !existed {
		t.Fatalf("DeleteRoom = %v, %v", existed, err)
	}
	if pubs, _ := s.Publications(); len(pubs) != 0 {
		t.Fatalf("publications of a deleted room kept: %+v", pubs)
	}
	if existed, err := s.DeleteRoom("garage"); err != nil || existed {
		t.Fatalf("DeleteRoom again = %v, %v", existed, err)
	}
}

func TestRoomsRefused(t *testing.T) {
	s := openT(t, newDir(t))
	defer s.Close()
	for _, r := range []RoomRecord{{ID: "", Owner: "aa"}, {ID: "a/b", Owner: "aa"}, {ID: "x"}} {
		if err := s.PutRoom(r); !errors.Is(err, &protocol.Error{Code: protocol.CodeCatalogUpdate}) {
			t.Errorf("PutRoom(%+v) = %v", r, err)
		}
	}
	if err := s.PutPublication(PublicationRecord{Room: "nowhere", Capability: "c"}); !errors.Is(err, &protocol.Error{Code: protocol.CodeCatalogUpdate}) {
		t.Errorf("publication into an unstored room = %v", err)
	}
}

func TestRoomsCorrupt(t *testing.T) {
	dir := newDir(t)
	s := openT(t, dir)
	if err := s.PutRoom(RoomRecord{ID: "r", Owner: "aa"}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	rawUpdate(t, s.Path(), func(tx *bolt.Tx) error {
		if err := tx.Bucket(bucketRooms).Put([]byte("r"), []byte(`{"id":"r","owner":"aa","extra":1}`)); err != nil {
			return err
		}
		return tx.Bucket(bucketPublications).Put([]byte("r/x"), []byte(`{"room":"r","capability":"y","observe":true}`))
	})
	s = openT(t, dir)
	defer s.Close()
	if _, err := s.Rooms(); !errors.Is(err, &protocol.Error{Code: protocol.CodeCorruptState}) {
		t.Errorf("Rooms with an unknown member = %v", err)
	}
	if _, err := s.Publications(); !errors.Is(err, &protocol.Error{Code: protocol.CodeCorruptState}) {
		t.Errorf("Publications under another key = %v", err)
	}
}
