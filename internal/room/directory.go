package room

import (
	"context"
	"crypto/ecdh"
	"sync"
	"time"
)

// maxKeysPerRoom bounds the key records a directory keeps for one room. Key records may come
// before the roster that lists their host, so non-members' records are kept too, but only
// in the room left by the members': a full room drops a non-member's record first, so at
// most MaxMembers members can never be crowded out.
const maxKeysPerRoom = 2 * MaxMembers

// Directory is a host's view of the rooms it belongs to: for each room, the owner it trusts
// (learnt when it created or joined the room, never from the bus), the newest roster that
// owner signed, and the presence of members. A provider authorizes every call against it. It
// is safe for concurrent use.
type Directory struct {
	mu    sync.RWMutex
	rooms map[string]*roomView
	// fetch, when set (by Sync), reads a host's key record in a room from the bus, for a
	// member whose record has not arrived yet.
	fetch func(ctx context.Context, room string, host HostID) ([]byte, error)
	// presenceTTL, when set (by Sync), is how long a presence record counts as live after it
	// arrived, when no newer one came: a deletion or expiry this host missed (its watch was
	// down, or its node lost the rest of a fabric) cannot keep a host present for longer.
	presenceTTL time.Duration
}

type roomView struct {
	owner  HostID
	roster *Roster
	// present is whether a live presence record of a host was last seen, and seen when it
	// arrived; departures counts the records seen deleted or expired, so a call can tell
	// that its caller left while it ran.
	present    map[HostID]bool
	seen       map[HostID]time.Time
	departures map[HostID]uint64
	// keys are the verified X25519 keys of hosts, from their key records.
	keys map[HostID]peerKey
	// watches are the calls waiting on their callers' stay in the room (WhileThere).
	watches map[*stayWatch]struct{}
}

// stayWatch is one WhileThere: leave runs once host is no longer in the room.
type stayWatch struct {
	host  HostID
	leave func()
}

// fireLocked runs and drops the watches of v that match: every one when host is empty, else
// those of host. d.mu is held.
func (v *roomView) fireLocked(host HostID) {
	for w := range v.watches {
		if host == "" || w.host == host {
			delete(v.watches, w)
			w.leave()
		}
	}
}

// peerKey is a host's X25519 key as its newest verified key record gave it.
type peerKey struct {
	pub  *ecdh.PublicKey
	time int64
}

// NewDirectory returns an empty directory.
func NewDirectory() *Directory { return &Directory{rooms: make(map[string]*roomView)} }

// Trust records that room's rosters must be signed by owner. Trusting a room again with the
// same owner keeps its state; with another owner it is refused.
func (d *Directory) Trust(room string, owner HostID) error {
	if !ValidRoomID(room) || !owner.Valid() {
		return newError(CodeInvalidRecord, "trust: bad room or owner")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if v, ok := d.rooms[room]; ok {
		if v.owner != owner {
			return newError(CodeUnauthorized, "trust: the room already has another owner")
		}
		return nil
	}
	d.rooms[room] = &roomView{owner: owner, present: make(map[HostID]bool), seen: make(map[HostID]time.Time),
		departures: make(map[HostID]uint64), keys: make(map[HostID]peerKey), watches: make(map[*stayWatch]struct{})}
	return nil
}

// Forget drops room (the host left it or it was closed): its calls are refused from now on.
func (d *Directory) Forget(room string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if v, ok := d.rooms[room]; ok {
		v.fireLocked("")
	}
	delete(d.rooms, room)
}

// WhileThere runs leave, once, as soon as host is no longer in room: its presence is deleted
// or expires (a departure after the departed'th, which the caller read with departures), the
// owner's roster stops listing it, or this host forgets the room; at once when one of these
// has happened already. leave runs under the directory's lock: it must not block or call the
// directory (a context's cancel is what it is for). stop ends the watch.
func (d *Directory) WhileThere(room string, host HostID, departed uint64, leave func()) (stop func()) {
	d.mu.Lock()
	defer d.mu.Unlock()
	v, ok := d.rooms[room]
	if !ok || v.departures[host] != departed || v.roster == nil || !v.roster.Has(host) {
		leave()
		return func() {}
	}
	w := &stayWatch{host: host, leave: leave}
	v.watches[w] = struct{}{}
	return func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		delete(v.watches, w)
	}
}

// Owner returns the owner trusted for room.
func (d *Directory) Owner(room string) (HostID, bool) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	v, ok := d.rooms[room]
	if !ok {
		return "", false
	}
	return v.owner, true
}

// ApplyRoster verifies a roster record of room with the trusted owner and makes it current
// when its version is newer. It returns the roster now current.
func (d *Directory) ApplyRoster(room string, data []byte) (Roster, error) {
	owner, ok := d.Owner(room)
	if !ok {
		return Roster{}, newError(CodeUnauthorized, "roster of a room this host does not trust")
	}
	r, err := OpenRoster(data, owner)
	if err != nil {
		return Roster{}, err
	}
	if r.Room != room {
		return Roster{}, newError(CodeInvalidRecord, "roster of another room")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	v, ok := d.rooms[room]
	if !ok || v.owner != owner {
		return Roster{}, newError(CodeUnauthorized, "the room was forgotten")
	}
	if v.roster == nil || r.Version > v.roster.Version {
		v.roster = &r
		for w := range v.watches {
			if !r.Has(w.host) {
				delete(v.watches, w)
				w.leave()
			}
		}
	}
	return *v.roster, nil
}

// Roster returns room's current roster.
func (d *Directory) Roster(room string) (Roster, bool) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	v, ok := d.rooms[room]
	if !ok || v.roster == nil {
		return Roster{}, false
	}
	return *v.roster, true
}

// IsMember reports whether host is in room's current roster.
func (d *Directory) IsMember(room string, host HostID) bool {
	d.mu.RLock()
	defer d.mu.RUnlock()
	v, ok := d.rooms[room]
	return ok && v.roster != nil && v.roster.Has(host)
}

// SetPresence records that a live presence record of host in room was seen (present) or
// that it was deleted or expired.
func (d *Directory) SetPresence(room string, host HostID, present bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	v, ok := d.rooms[room]
	if !ok {
		return
	}
	if !present && v.present[host] {
		v.departures[host]++
		v.fireLocked(host)
	}
	v.present[host] = present
	if present {
		v.seen[host] = time.Now()
	}
}

// Present reports whether host's presence in room is live: its last record seen was live
// and, with a Sync, arrived within the presence TTL. A live host rewrites its record every
// third of the TTL, so only a host that stopped (or a watch that stopped bringing its
// records) ages out here.
func (d *Directory) Present(room string, host HostID) bool {
	d.mu.RLock()
	defer d.mu.RUnlock()
	v, ok := d.rooms[room]
	if !ok || !v.present[host] {
		return false
	}
	return d.presenceTTL <= 0 || time.Since(v.seen[host]) < d.presenceTTL
}

// departures returns how many departures of host from room were seen, and whether the room
// is known.
func (d *Directory) departures(room string, host HostID) (uint64, bool) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	v, ok := d.rooms[room]
	if !ok {
		return 0, false
	}
	return v.departures[host], true
}

// ApplyKeyRecord verifies a key record of host in room (signed by host) and keeps its key
// when it is newer than the one kept. A record that is not newer changes nothing and is not
// an error.
func (d *Directory) ApplyKeyRecord(room string, host HostID, data []byte) error {
	r, err := OpenKeyRecord(data, host)
	if err != nil {
		return err
	}
	if r.Room != room {
		return newError(CodeInvalidRecord, "key record of another room")
	}
	pub, _ := r.publicKey()
	d.mu.Lock()
	defer d.mu.Unlock()
	v, ok := d.rooms[room]
	if !ok {
		return newError(CodeUnauthorized, "key record of a room this host does not trust")
	}
	if old, ok := v.keys[host]; ok {
		if r.Time > old.time {
			v.keys[host] = peerKey{pub: pub, time: r.Time}
		}
		return nil
	}
	if len(v.keys) >= maxKeysPerRoom && !v.dropNonMemberKey() {
		return newError(CodeInvalidRecord, "too many key records in the room")
	}
	v.keys[host] = peerKey{pub: pub, time: r.Time}
	return nil
}

// dropNonMemberKey forgets the key of one host that is not in the roster, if there is one.
func (v *roomView) dropNonMemberKey() bool {
	for h := range v.keys {
		if v.roster == nil || !v.roster.Has(h) {
			delete(v.keys, h)
			return true
		}
	}
	return false
}

// memberKey returns the X25519 key of host in room, when host is in the room's current
// roster and its key record was verified. With fetch, a member's record not yet seen is read
// from the bus (when a Sync feeds the directory; within syncTimeout) and applied first.
func (d *Directory) memberKey(ctx context.Context, room string, host HostID, fetch bool) (*ecdh.PublicKey, bool) {
	d.mu.RLock()
	v, ok := d.rooms[room]
	member := ok && v.roster != nil && v.roster.Has(host)
	var k peerKey
	if member {
		k, ok = v.keys[host]
	}
	f := d.fetch
	d.mu.RUnlock()
	switch {
	case !member:
		return nil, false
	case ok:
		return k.pub, true
	case !fetch || f == nil:
		return nil, false
	}
	fctx, cancel := context.WithTimeout(ctx, syncTimeout)
	data, err := f(fctx, room, host)
	cancel()
	if err != nil || d.ApplyKeyRecord(room, host, data) != nil {
		return nil, false
	}
	return d.memberKey(ctx, room, host, false)
}

// setFetch installs the reader of key records from the bus.
func (d *Directory) setFetch(f func(ctx context.Context, room string, host HostID) ([]byte, error)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.fetch = f
}

// setPresenceTTL installs the presence TTL of the Sync that feeds the directory.
func (d *Directory) setPresenceTTL(ttl time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.presenceTTL = ttl
}
