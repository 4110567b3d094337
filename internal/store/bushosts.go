package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/airlockhq/airlock/internal/ndjson"
	"github.com/airlockhq/airlock/internal/protocol"
)

// Bus host bounds.
const (
	// MaxBusHosts is the most hosts the store admits to this host's embedded bus.
	MaxBusHosts = 64
	// maxBusHostBytes bounds the JSON of one bus host record.
	maxBusHostBytes = 1 << 10
)

// BusHostRecord is another host admitted to this host's embedded room bus (a second airlockd
// of the same operator, started with --nats-via): its host id and the public key of its nkey
// user. Its rooms, and so its permissions, are not stored: the bus's rosters say them.
type BusHostRecord struct {
	Host       string    `json:"host"`
	Nkey       string    `json:"nkey"`
	AdmittedAt time.Time `json:"admittedAt"`
}

// validBusHost checks the shapes the store relies on: a host id of 64 lowercase hex and an
// nkey user public key ("U" and 55 base32 characters); the bus checks the key itself.
func validBusHost(r BusHostRecord) bool {
	if len(r.Host) != 64 || len(r.Nkey) != 56 || r.Nkey[0] != 'U' {
		return false
	}
	for i := 0; i < len(r.Host); i++ {
		if c := r.Host[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	for i := 1; i < len(r.Nkey); i++ {
		if c := r.Nkey[i]; !('A' <= c && c <= 'Z' || '2' <= c && c <= '7') {
			return false
		}
	}
	return true
}

// PutBusHost stores r under r.Host, replacing the record of that host (a host that made a
// new nkey). It fails with catalog_update_failed for an invalid record, an nkey another host
// holds, a full store (MaxBusHosts other hosts) or a failed write.
func (s *Store) PutBusHost(r BusHostRecord) error {
	if !validBusHost(r) {
		return protocol.Errorf(protocol.CodeCatalogUpdate, "bus host record has an invalid host id or nkey")
	}
	data, err := json.Marshal(&r)
	if err != nil {
		return protocol.Wrap(protocol.Errorf(protocol.CodeCatalogUpdate, "bus host is not serializable"), err)
	}
	err = s.db.Update(func(tx *bolt.Tx) error {
		b, err := s.bucket(tx, bucketBusHosts)
		if err != nil {
			return err
		}
		c := b.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			var o BusHostRecord
			if json.Unmarshal(v, &o) == nil && o.Nkey == r.Nkey && string(k) != r.Host {
				return protocol.Errorf(protocol.CodeCatalogUpdate, "another bus host holds that nkey")
			}
		}
		if b.Get([]byte(r.Host)) == nil && b.Stats().KeyN >= MaxBusHosts {
			return protocol.Errorf(protocol.CodeCatalogUpdate, "the store already admits %d bus hosts", MaxBusHosts)
		}
		return b.Put([]byte(r.Host), data)
	})
	if err != nil {
		return s.writeErr("cannot save a bus host", err)
	}
	return nil
}

// DeleteBusHost removes host's record and reports whether it was stored.
func (s *Store) DeleteBusHost(host string) (existed bool, err error) {
	err = s.db.Update(func(tx *bolt.Tx) error {
		b, err := s.bucket(tx, bucketBusHosts)
		if err != nil {
			return err
		}
		if b.Get([]byte(host)) == nil {
			return errNoChange
		}
		existed = true
		return b.Delete([]byte(host))
	})
	if err != nil && !errors.Is(err, errNoChange) {
		return false, s.writeErr("cannot delete a bus host", err)
	}
	return existed, nil
}

// BusHosts returns every admitted bus host in host id order. A record that does not decode
// strictly, is invalid or is stored under another host, and a bucket over MaxBusHosts
// entries, fail the whole call with corrupt_state.
func (s *Store) BusHosts() ([]BusHostRecord, error) {
	var out []BusHostRecord
	err := s.db.View(func(tx *bolt.Tx) error {
		b, err := s.bucket(tx, bucketBusHosts)
		if err != nil {
			return err
		}
		c := b.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if len(out) == MaxBusHosts {
				return corrupt("%s: the bus_hosts bucket holds more than %d entries", s.path, MaxBusHosts)
			}
			if len(v) > maxBusHostBytes {
				return corrupt("%s: bus host %q is larger than %d bytes", s.path, k, maxBusHostBytes)
			}
			var r BusHostRecord
			if err := ndjson.Decode(v, &r, ndjson.Closed); err != nil {
				return protocol.Wrap(corrupt("%s: bus host %q does not decode", s.path, k), decodeCause(err))
			}
			if r.Host != string(k) || !validBusHost(r) {
				return corrupt("%s: bus host record stored under %q is invalid or names another host", s.path, k)
			}
			out = append(out, r)
		}
		return nil
	})
	if err != nil {
		return nil, s.readErr(fmt.Sprintf("read %s", bucketBusHosts), err)
	}
	return out, nil
}
