package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	bolt "go.etcd.io/bbolt"

	"github.com/airlockhq/airlock/internal/ndjson"
	"github.com/airlockhq/airlock/internal/protocol"
)

// Room bounds: the store's own limits, loose enough for anything the room layer accepts
// (which checks its stricter rules first) and tight enough that a damaged file cannot make
// the daemon read without bound.
const (
	// MaxRooms is the most rooms the store holds.
	MaxRooms = 256
	// MaxRoomBytes bounds the JSON of one room record (a roster of 64 members fits easily).
	MaxRoomBytes = 32 << 10
	// MaxPublications is the most publications the store holds, over all rooms.
	MaxPublications = 4096
	// MaxPublicationBytes bounds the JSON of one publication record.
	MaxPublicationBytes = 8 << 10
	// maxRoomKeyBytes bounds a room id or a capability id used in a key.
	maxRoomKeyBytes = 64
)

// RoomRecord is a room this host created or joined: what it must remember to rejoin it after
// a restart. Owner is the host id whose rosters it trusts, learnt when it created or joined
// the room. The room's owner also keeps the roster itself (Version and Members), since it
// alone signs it; a member keeps none and reads the roster from the bus.
type RoomRecord struct {
	ID      string       `json:"id"`
	Title   string       `json:"title"`
	Owner   string       `json:"owner"`
	Version uint64       `json:"version,omitempty"`
	Members []RoomMember `json:"members,omitempty"`
}

// RoomMember is one host of a room's roster.
type RoomMember struct {
	Host string `json:"host"`
	Name string `json:"name,omitempty"`
}

// PublicationRecord is this host's publication of one capability into one room: the
// operator's explicit act, kept until it is withdrawn.
type PublicationRecord struct {
	Room        string   `json:"room"`
	Capability  string   `json:"capability"`
	Actions     []string `json:"actions,omitempty"`
	Observe     bool     `json:"observe"`
	Members     []string `json:"members,omitempty"`
	ApproveEach bool     `json:"approveEach,omitempty"`
}

func validRoomKey(s string) bool {
	return s != "" && len(s) <= maxRoomKeyBytes && !strings.ContainsAny(s, "/\x00")
}

func publicationKey(room, capability string) []byte {
	return []byte(room + "/" + capability)
}

// PutRoom stores r under r.ID, replacing any record of that room. It fails with
// catalog_update_failed for an invalid id or owner, JSON over MaxRoomBytes, a full store
// (MaxRooms other rooms) or a failed write.
func (s *Store) PutRoom(r RoomRecord) error {
	if !validRoomKey(r.ID) || r.Owner == "" {
		return protocol.Errorf(protocol.CodeCatalogUpdate, "room record has an invalid id or no owner")
	}
	data, err := json.Marshal(&r)
	if err != nil {
		return protocol.Wrap(protocol.Errorf(protocol.CodeCatalogUpdate, "room %q is not serializable", r.ID), err)
	}
	if len(data) > MaxRoomBytes {
		return protocol.Errorf(protocol.CodeCatalogUpdate, "room %q is %d bytes, over the limit of %d", r.ID, len(data), MaxRoomBytes)
	}
	err = s.db.Update(func(tx *bolt.Tx) error {
		b, err := s.bucket(tx, bucketRooms)
		if err != nil {
			return err
		}
		if b.Get([]byte(r.ID)) == nil && b.Stats().KeyN >= MaxRooms {
			return protocol.Errorf(protocol.CodeCatalogUpdate, "the store already holds %d rooms", MaxRooms)
		}
		return b.Put([]byte(r.ID), data)
	})
	if err != nil {
		return s.writeErr(fmt.Sprintf("cannot save room %q", r.ID), err)
	}
	return nil
}

// DeleteRoom removes room id and every publication into it, in one transaction, and reports
// whether the room was stored.
func (s *Store) DeleteRoom(id string) (existed bool, err error) {
	err = s.db.Update(func(tx *bolt.Tx) error {
		rooms, err := s.bucket(tx, bucketRooms)
		if err != nil {
			return err
		}
		pubs, err := s.bucket(tx, bucketPublications)
		if err != nil {
			return err
		}
		prefix := []byte(id + "/")
		var keys [][]byte
		c := pubs.Cursor()
		for k, _ := c.Seek(prefix); k != nil && strings.HasPrefix(string(k), string(prefix)); k, _ = c.Next() {
			keys = append(keys, append([]byte(nil), k...))
		}
		existed = rooms.Get([]byte(id)) != nil
		if !existed && len(keys) == 0 {
			return errNoChange
		}
		for _, k := range keys {
			if err := pubs.Delete(k); err != nil {
				return err
			}
		}
		return rooms.Delete([]byte(id))
	})
	if err != nil && !errors.Is(err, errNoChange) {
		return false, s.writeErr(fmt.Sprintf("cannot delete room %q", id), err)
	}
	return existed, nil
}

// Rooms returns every stored room in id order. A record that does not decode strictly, is
// stored under another id or has no owner, and a bucket over MaxRooms entries, fail the whole
// call with corrupt_state.
func (s *Store) Rooms() ([]RoomRecord, error) {
	var out []RoomRecord
	err := s.db.View(func(tx *bolt.Tx) error {
		b, err := s.bucket(tx, bucketRooms)
		if err != nil {
			return err
		}
		c := b.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if len(out) == MaxRooms {
				return corrupt("%s: the rooms bucket holds more than %d entries", s.path, MaxRooms)
			}
			if len(v) > MaxRoomBytes {
				return corrupt("%s: room %q is larger than %d bytes", s.path, k, MaxRoomBytes)
			}
			var r RoomRecord
			if err := ndjson.Decode(v, &r, ndjson.Closed); err != nil {
				return protocol.Wrap(corrupt("%s: room %q does not decode", s.path, k), decodeCause(err))
			}
			if r.ID != string(k) || r.Owner == "" {
				return corrupt("%s: room record stored under %q names another room or no owner", s.path, k)
			}
			out = append(out, r)
		}
		return nil
	})
	if err != nil {
		return nil, s.readErr("read rooms", err)
	}
	return out, nil
}

// PutPublication stores p, replacing the publication of the same capability into the same
// room. The room must be stored. It fails with catalog_update_failed for invalid ids, a room
// that is not stored, JSON over MaxPublicationBytes, a full store or a failed write.
func (s *Store) PutPublication(p PublicationRecord) error {
	if !validRoomKey(p.Room) || !validRoomKey(p.Capability) {
		return protocol.Errorf(protocol.CodeCatalogUpdate, "publication has an invalid room or capability id")
	}
	data, err := json.Marshal(&p)
	if err != nil {
		return protocol.Wrap(protocol.Errorf(protocol.CodeCatalogUpdate, "publication is not serializable"), err)
	}
	if len(data) > MaxPublicationBytes {
		return protocol.Errorf(protocol.CodeCatalogUpdate, "publication is %d bytes, over the limit of %d", len(data), MaxPublicationBytes)
	}
	key := publicationKey(p.Room, p.Capability)
	err = s.db.Update(func(tx *bolt.Tx) error {
		rooms, err := s.bucket(tx, bucketRooms)
		if err != nil {
			return err
		}
		if rooms.Get([]byte(p.Room)) == nil {
			return protocol.Errorf(protocol.CodeCatalogUpdate, "publication into room %q, which is not stored", p.Room)
		}
		b, err := s.bucket(tx, bucketPublications)
		if err != nil {
			return err
		}
		if b.Get(key) == nil && b.Stats().KeyN >= MaxPublications {
			return protocol.Errorf(protocol.CodeCatalogUpdate, "the store already holds %d publications", MaxPublications)
		}
		return b.Put(key, data)
	})
	if err != nil {
		return s.writeErr(fmt.Sprintf("cannot save publication of %q into %q", p.Capability, p.Room), err)
	}
	return nil
}

// DeletePublications removes the publications of capability: into room only, or into every
// room when room is empty. It returns the rooms it was removed from, in order.
func (s *Store) DeletePublications(room, capability string) (rooms []string, err error) {
	err = s.db.Update(func(tx *bolt.Tx) error {
		b, err := s.bucket(tx, bucketPublications)
		if err != nil {
			return err
		}
		var keys [][]byte
		c := b.Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			r, cp, ok := strings.Cut(string(k), "/")
			if ok && cp == capability && (room == "" || r == room) {
				keys = append(keys, append([]byte(nil), k...))
				rooms = append(rooms, r)
			}
		}
		if len(keys) == 0 {
			return errNoChange
		}
		for _, k := range keys {
			if err := b.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, errNoChange) {
		return nil, s.writeErr(fmt.Sprintf("cannot delete publications of %q", capability), err)
	}
	return rooms, nil
}

// Publications returns every stored publication in (room, capability) order. A record that
// does not decode strictly or is stored under another key, and a bucket over MaxPublications
// entries, fail the whole call with corrupt_state.
func (s *Store) Publications() ([]PublicationRecord, error) {
	var out []PublicationRecord
	err := s.db.View(func(tx *bolt.Tx) error {
		b, err := s.bucket(tx, bucketPublications)
		if err != nil {
			return err
		}
		c := b.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if len(out) == MaxPublications {
				return corrupt("%s: the publications bucket holds more than %d entries", s.path, MaxPublications)
			}
			if len(v) > MaxPublicationBytes {
				return corrupt("%s: publication %q is larger than %d bytes", s.path, k, MaxPublicationBytes)
			}
			var p PublicationRecord
			if err := ndjson.Decode(v, &p, ndjson.Closed); err != nil {
				return protocol.Wrap(corrupt("%s: publication %q does not decode", s.path, k), decodeCause(err))
			}
			if string(publicationKey(p.Room, p.Capability)) != string(k) {
				return corrupt("%s: publication stored under %q names another room or capability", s.path, k)
			}
			out = append(out, p)
		}
		return nil
	})
	if err != nil {
		return nil, s.readErr("read publications", err)
	}
	return out, nil
}
