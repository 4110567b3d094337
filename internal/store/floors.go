package store

import (
	"fmt"
	"strconv"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/airlockhq/airlock/internal/protocol"
)

// Call floor bounds. A provider keeps one lease per caller host that called it recently, and
// callers are members of its rooms: at most MaxRooms rooms of room.MaxMembers (64) members.
const (
	// MaxCallFloors is the most call floor leases the store holds.
	MaxCallFloors = MaxRooms * 64
	// maxCallerKeyBytes bounds a caller host id used as a key (a room host id is 64 hex
	// digits).
	maxCallerKeyBytes = 128
	// maxLeaseDigits bounds a lease's decimal milliseconds (2^50 ms is 35,000 years).
	maxLeaseDigits = 16
)

func validCallerKey(s string) bool {
	if s == "" || len(s) > maxCallerKeyBytes {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

// parseLease parses a stored lease: decimal milliseconds since 1970, without sign or leading
// zero, as formatLease writes it.
func parseLease(v []byte) (time.Time, bool) {
	if len(v) == 0 || len(v) > maxLeaseDigits || (v[0] == '0' && len(v) > 1) {
		return time.Time{}, false
	}
	for _, c := range v {
		if c < '0' || c > '9' {
			return time.Time{}, false
		}
	}
	ms, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil || ms <= 0 {
		return time.Time{}, false
	}
	return time.UnixMilli(ms), true
}

// formatLease writes t in milliseconds, rounded up: a stored lease never covers less than the
// one raised.
func formatLease(t time.Time) []byte {
	ms := t.UnixMilli()
	if t.After(time.UnixMilli(ms)) {
		ms++
	}
	return strconv.AppendInt(nil, ms, 10)
}

// CallFloors returns the call floor leases stored after since, by caller host id (see
// RaiseCallFloor). A key or lease that does not parse, and a bucket over MaxCallFloors
// entries, fail the whole call with corrupt_state.
func (s *Store) CallFloors(since time.Time) (map[string]time.Time, error) {
	out := make(map[string]time.Time)
	err := s.db.View(func(tx *bolt.Tx) error {
		b, err := s.bucket(tx, bucketCallFloors)
		if err != nil {
			return err
		}
		n := 0
		c := b.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if n++; n > MaxCallFloors {
				return corrupt("%s: the callFloors bucket holds more than %d entries", s.path, MaxCallFloors)
			}
			lease, ok := parseLease(v)
			if !validCallerKey(string(k)) || !ok {
				return corrupt("%s: a call floor lease does not parse", s.path)
			}
			if lease.After(since) {
				out[string(k)] = lease
			}
		}
		return nil
	})
	if err != nil {
		return nil, s.readErr("read call floors", err)
	}
	return out, nil
}

// RaiseCallFloor makes caller's call floor lease at least lease (it never lowers one) and
// forgets every lease, of any caller, that is not after since. It returns once that is
// durable: concurrent raises share one transaction, and so one fsync (groupcommit.go). It
// fails with catalog_update_failed for an invalid caller id or lease, or a full bucket, having
// written nothing; with durability_failed when the commit failed.
//
// A provider raises a caller's lease before it runs a call signed after it, so that a call
// captured before a restart cannot run again after it (package room, Floors).
func (s *Store) RaiseCallFloor(caller string, lease, since time.Time) error {
	if !validCallerKey(caller) || lease.UnixMilli() <= 0 || len(formatLease(lease)) > maxLeaseDigits {
		return protocol.Errorf(protocol.CodeCatalogUpdate, "call floor lease has an invalid caller or time")
	}
	key := []byte(caller)
	return s.commit("cannot raise a call floor lease", func(tx *bolt.Tx) error {
		b, err := s.bucket(tx, bucketCallFloors)
		if err != nil {
			return err
		}
		var stale [][]byte
		n := 0
		c := b.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			n++
			if old, ok := parseLease(v); ok && !old.After(since) && string(k) != caller {
				stale = append(stale, append([]byte(nil), k...))
			}
		}
		old, ok := parseLease(b.Get(key))
		raise := !ok || lease.After(old) // never lower a lease
		if raise && b.Get(key) == nil && n-len(stale) >= MaxCallFloors {
			return protocol.Errorf(protocol.CodeCatalogUpdate, "the store already holds %d call floor leases", MaxCallFloors)
		}
		for _, k := range stale {
			if err := b.Delete(k); err != nil {
				return fmt.Errorf("forget call floor lease: %w", err)
			}
		}
		if !raise {
			return nil
		}
		return b.Put(key, formatLease(lease))
	})
}
