package room

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/busport"
)

// Buckets and timings of room state on the bus.
const (
	// RoomsBucket holds each room's roster (key "<room>.roster", signed by the owner), each
	// provider's projection (key "<room>.projection.<host>", signed by the provider) and each
	// member's key record (key "<room>.key.<host>", signed by the member).
	RoomsBucket = "airlock_rooms"
	// PresenceBucket holds presence records (key "<room>.<host>", signed by the host); its
	// entries expire after PresenceTTL unless rewritten.
	PresenceBucket = "airlock_presence"
	// PresenceTTL is how long a presence record lives: within the call deadline, so a host
	// that lost the bus is seen gone before a call to it would time out.
	PresenceTTL = 10 * time.Second
	// PresenceRefresh is how often a host rewrites its presence records: three chances per
	// TTL.
	PresenceRefresh = PresenceTTL / 3
	// syncTimeout bounds one bucket operation of the sync.
	syncTimeout = 5 * time.Second
)

// SyncConfig configures a Sync. Key, Conn and Directory are required.
type SyncConfig struct {
	Key       *HostKey
	Conn      busport.Conn
	Directory *Directory
	// PresenceTTL overrides the package's PresenceTTL (tests); the refresh is a third of it.
	PresenceTTL time.Duration
	// PresenceRefresh overrides how often presence is rewritten (tests: a refresh longer
	// than the TTL lets a test see that a reconnect rewrites it).
	PresenceRefresh time.Duration
	// Dropped, when set, is told that a verified roster of a joined room this host does not
	// own no longer lists this host: its owner closed the room or removed the host. It runs
	// on the watch's goroutine and must hand off without blocking (and must not call Leave
	// there). It may be told more than once for one room.
	Dropped func(room string)
}

// Sync keeps a Directory current from the bus for the rooms this host joined — rosters and
// presence — and the projections and catalogs of their providers, and keeps this host's own
// presence records alive. Nothing read from the bus is used before its signature is verified against
// the key it must come from. It is safe for concurrent use.
//
// After its connection comes back from a loss (Reconnected), it rewrites this host's
// presence records at once and restarts its watches, which deliver every live record again:
// a watch of a connection that was away may have lost its consumer on the server, and with it
// the changes made meanwhile.
type Sync struct {
	key      *HostKey
	conn     busport.Conn
	dir      *Directory
	rooms    busport.Bucket
	presence busport.Bucket
	catalog  busport.Bucket
	ttl      time.Duration
	every    time.Duration // the presence refresh
	dropped  func(room string)

	// mu guards the fields below. A room's watches in joined are nil while its Join runs,
	// and empty while the refresher restarts them.
	mu          sync.Mutex
	joined      map[string][]busport.Subscription
	projections map[string]map[HostID]Projection
	catalogs    map[string]map[HostID]Catalog
	closed      bool

	reconnected chan struct{} // 1-buffered: a reconnect the refresher has not handled
	// ctx is the refresher's: Close cancels it, ending the bus write or watch it is waiting
	// for, so that a stop never waits out syncTimeout behind a refresh.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// OpenSync opens the room buckets and starts the presence refresher.
func OpenSync(ctx context.Context, cfg SyncConfig) (*Sync, error) {
	if cfg.Key == nil || cfg.Conn == nil || cfg.Directory == nil {
		return nil, errors.New("room: sync: incomplete configuration")
	}
	ttl := cfg.PresenceTTL
	if ttl <= 0 {
		ttl = PresenceTTL
	}
	var buckets [3]busport.Bucket
	for i, bc := range bucketConfigs(ttl) {
		b, err := cfg.Conn.Bucket(ctx, bc)
		if err != nil {
			return nil, fmt.Errorf("room: sync: %w", err)
		}
		buckets[i] = b
	}
	rooms, presence, catalog := buckets[0], buckets[1], buckets[2]
	every := cfg.PresenceRefresh
	if every <= 0 {
		every = ttl / 3
	}
	s := &Sync{
		key: cfg.Key, conn: cfg.Conn, dir: cfg.Directory, rooms: rooms, presence: presence, catalog: catalog, ttl: ttl, every: every,
		dropped: cfg.Dropped, joined: make(map[string][]busport.Subscription),
		projections: make(map[string]map[HostID]Projection), catalogs: make(map[string]map[HostID]Catalog),
		reconnected: make(chan struct{}, 1),
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	cfg.Directory.setFetch(s.fetchKey)
	cfg.Directory.setPresenceTTL(ttl)
	s.wg.Go(s.refresh)
	return s, nil
}

// fetchKey reads host's key record in room from the bus, for a member whose record the watch
// has not delivered yet (it joined a moment ago).
func (s *Sync) fetchKey(ctx context.Context, room string, host HostID) ([]byte, error) {
	e, err := s.rooms.Get(ctx, room+".key."+string(host))
	if err != nil {
		return nil, err
	}
	return e.Value, nil
}

// Join starts following room, which the Directory must trust, writes this host's key record
// into it and announces its presence. When Join returns, the roster, presence, projections,
// catalogs and key records on the bus have been applied.
func (s *Sync) Join(ctx context.Context, room string) error {
	if _, ok := s.dir.Owner(room); !ok {
		return newError(CodeUnauthorized, "join: the room is not trusted")
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return newError(CodeUnavailable, "sync closed")
	}
	if _, ok := s.joined[room]; ok {
		s.mu.Unlock()
		return nil
	}
	s.joined[room] = nil
	s.mu.Unlock()

	subs, err := s.watch(ctx, room)
	undo := func(err error) error {
		for _, sub := range subs {
			_ = sub.Stop()
		}
		s.mu.Lock()
		delete(s.joined, room)
		s.mu.Unlock()
		return fmt.Errorf("room: join: %w", err)
	}
	if err != nil {
		return undo(err)
	}
	if err := s.writeKey(ctx, room); err != nil {
		return undo(err)
	}
	if err := s.announce(ctx, room); err != nil {
		return undo(err)
	}
	s.mu.Lock()
	s.joined[room] = subs
	s.mu.Unlock()
	return nil
}

// watch starts room's watches of the three buckets; when it returns, every live record of
// the room has been applied.
func (s *Sync) watch(ctx context.Context, room string) ([]busport.Subscription, error) {
	var subs []busport.Subscription
	for _, w := range []struct {
		bucket  busport.Bucket
		pattern string
		fn      func(string, busport.Entry)
	}{
		{s.rooms, room + ".>", s.roomEntry},
		{s.presence, room + ".*", s.presenceEntry},
		{s.catalog, room + ".*", s.catalogEntry},
	} {
		sub, err := w.bucket.Watch(ctx, w.pattern, func(e busport.Entry) { w.fn(room, e) })
		if err != nil {
			for _, sub := range subs {
				_ = sub.Stop()
			}
			return nil, err
		}
		subs = append(subs, sub)
	}
	return subs, nil
}

// Reconnected tells the sync that its connection is up again after a loss: the refresher
// rewrites this host's presence records and restarts the watches of every room at once. It
// does not block (the bus's reconnect callback calls it).
func (s *Sync) Reconnected() {
	select {
	case s.reconnected <- struct{}{}:
	default:
	}
}

// rewatch replaces room's watches with new ones and reports whether it has watches when it
// returns; false means the bus did not answer, and the refresher tries again.
func (s *Sync) rewatch(room string) bool {
	s.mu.Lock()
	old, ok := s.joined[room]
	if !ok || old == nil {
		// Left, or a Join in progress starts its own watches.
		s.mu.Unlock()
		return true
	}
	s.joined[room] = []busport.Subscription{}
	s.mu.Unlock()
	for _, sub := range old {
		_ = sub.Stop()
	}
	ctx, cancel := context.WithTimeout(s.ctx, syncTimeout)
	subs, err := s.watch(ctx, room)
	cancel()
	if err != nil {
		return false
	}
	s.mu.Lock()
	if cur, ok := s.joined[room]; ok && cur != nil && len(cur) == 0 {
		s.joined[room] = subs
		subs = nil
	}
	s.mu.Unlock()
	// Left meanwhile (or left and joined again, and that Join watches): not needed.
	for _, sub := range subs {
		_ = sub.Stop()
	}
	return true
}

// bucketConfigs are the room buckets' configurations under presence TTL ttl.
func bucketConfigs(ttl time.Duration) []busport.BucketConfig {
	return []busport.BucketConfig{
		{Name: RoomsBucket, MaxValueBytes: MaxRecordBytes},
		{Name: PresenceBucket, TTL: ttl, MaxValueBytes: MaxRecordBytes},
		{Name: CatalogBucket, MaxValueBytes: MaxRecordBytes},
	}
}

// Repair restores this host's part of the rooms after a room bucket disappeared from the bus
// (an operator deleted its stream): it opens the three buckets again, which creates the
// missing ones, then in every joined room rewrites this host's key record and presence and
// restarts the watches, which deliver every live record again. The other records are their
// writers' own to restore: a room's owner rewrites its roster, each provider its projection
// and catalog (package roomhost). It returns the first failure; the rest is still tried.
func (s *Sync) Repair(ctx context.Context) error {
	for _, cfg := range bucketConfigs(s.ttl) {
		if _, err := s.conn.Bucket(ctx, cfg); err != nil {
			return fmt.Errorf("room: repair: %w", err)
		}
	}
	s.mu.Lock()
	rooms := make([]string, 0, len(s.joined))
	for r, subs := range s.joined {
		if subs != nil {
			rooms = append(rooms, r)
		}
	}
	s.mu.Unlock()
	var first error
	for _, r := range rooms {
		err := s.writeKey(ctx, r)
		if err == nil {
			err = s.announce(ctx, r)
		}
		if err == nil && !s.rewatch(r) {
			err = newError(CodeUnavailable, "repair: the watches did not restart")
		}
		if err != nil && first == nil {
			first = fmt.Errorf("room: repair %s: %w", r, err)
		}
	}
	return first
}

// Leave stops following room and withdraws this host's presence in it.
func (s *Sync) Leave(ctx context.Context, room string) error {
	if !s.forget(room) {
		return nil
	}
	if err := s.presence.Delete(ctx, room+"."+string(s.key.ID())); err != nil {
		return fmt.Errorf("room: leave: %w", err)
	}
	return nil
}

// forget stops watching room and drops what this host holds of it, reporting whether it was
// joined; its presence entry stays on the bus.
func (s *Sync) forget(room string) bool {
	s.mu.Lock()
	subs, ok := s.joined[room]
	delete(s.joined, room)
	delete(s.projections, room)
	delete(s.catalogs, room)
	s.mu.Unlock()
	for _, sub := range subs {
		_ = sub.Stop()
	}
	return ok
}

// PublishRoster signs r with this host's key (the room's owner) and writes it.
func (s *Sync) PublishRoster(ctx context.Context, r Roster) error {
	data, err := SignRoster(s.key, r)
	if err != nil {
		return err
	}
	if _, err := s.rooms.Put(ctx, r.Room+".roster", data); err != nil {
		return fmt.Errorf("room: roster: %w", err)
	}
	_, err = s.dir.ApplyRoster(r.Room, data)
	return err
}

// PublishProjection signs and writes this host's projection of its publications into room.
func (s *Sync) PublishProjection(ctx context.Context, room string, version uint64, pubs []Publication) error {
	data, err := SignProjection(s.key, Projection{Room: room, Provider: s.key.ID(), Version: version, Publications: pubs})
	if err != nil {
		return err
	}
	if _, err := s.rooms.Put(ctx, room+".projection."+string(s.key.ID()), data); err != nil {
		return fmt.Errorf("room: projection: %w", err)
	}
	return nil
}

// PublishCatalog signs and writes this host's catalog c of its publications in c.Room; c's
// provider must be this host.
func (s *Sync) PublishCatalog(ctx context.Context, c Catalog) error {
	data, err := SignCatalog(s.key, c)
	if err != nil {
		return err
	}
	if _, err := s.catalog.Put(ctx, c.Room+"."+string(s.key.ID()), data); err != nil {
		return fmt.Errorf("room: catalog: %w", err)
	}
	return nil
}

// Catalog returns the verified catalog of provider in room, as the watch last delivered it;
// false when there is none (never written, deleted, unverifiable, or provider is not a member
// of the room's current roster). It reads no bus.
func (s *Sync) Catalog(room string, provider HostID) (Catalog, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.catalogs[room][provider]
	if !ok || !s.dir.IsMember(room, provider) {
		return Catalog{}, false
	}
	return c, true
}

// Projections returns the verified projections of room's providers that are members of its
// current roster.
func (s *Sync) Projections(room string) []Projection {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Projection
	for host, p := range s.projections[room] {
		if s.dir.IsMember(room, host) {
			out = append(out, p)
		}
	}
	return out
}

func (s *Sync) roomEntry(room string, e busport.Entry) {
	rest, ok := strings.CutPrefix(e.Key, room+".")
	if !ok {
		return
	}
	if rest == "roster" {
		if !e.Deleted {
			// A record that fails verification is ignored: the bus holds no authority.
			r, err := s.dir.ApplyRoster(room, e.Value)
			if err == nil && s.dropped != nil && r.Owner != s.key.ID() && !r.Has(s.key.ID()) {
				s.dropped(room)
			}
		}
		return
	}
	if host, ok := strings.CutPrefix(rest, "key."); ok {
		if !e.Deleted && HostID(host).Valid() {
			// A deletion revokes nothing (membership is the roster's), so it is ignored too.
			_ = s.dir.ApplyKeyRecord(room, HostID(host), e.Value)
		}
		return
	}
	host, ok := strings.CutPrefix(rest, "projection.")
	if !ok || !HostID(host).Valid() {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, joined := s.joined[room]; !joined {
		return
	}
	if e.Deleted {
		delete(s.projections[room], HostID(host))
		return
	}
	p, err := OpenProjection(e.Value, HostID(host))
	if err != nil || p.Room != room {
		return
	}
	if s.projections[room] == nil {
		s.projections[room] = make(map[HostID]Projection)
	}
	if old, ok := s.projections[room][p.Provider]; !ok || p.Version >= old.Version {
		s.projections[room][p.Provider] = p
	}
}

// catalogEntry applies a catalog record of room: a verified one replaces an older version of
// its provider's, and a deletion drops it. One that fails verification is ignored.
func (s *Sync) catalogEntry(room string, e busport.Entry) {
	host, ok := strings.CutPrefix(e.Key, room+".")
	if !ok || !HostID(host).Valid() {
		return
	}
	var c Catalog
	if !e.Deleted {
		var err error
		if c, err = OpenCatalog(e.Value, HostID(host)); err != nil || c.Room != room {
			return
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, joined := s.joined[room]; !joined {
		return
	}
	if e.Deleted {
		delete(s.catalogs[room], HostID(host))
		return
	}
	if s.catalogs[room] == nil {
		s.catalogs[room] = make(map[HostID]Catalog)
	}
	if old, ok := s.catalogs[room][c.Provider]; !ok || c.Version >= old.Version {
		s.catalogs[room][c.Provider] = c
	}
}

func (s *Sync) presenceEntry(room string, e busport.Entry) {
	host, ok := strings.CutPrefix(e.Key, room+".")
	if !ok || !HostID(host).Valid() {
		return
	}
	if e.Deleted {
		s.dir.SetPresence(room, HostID(host), false)
		return
	}
	if p, err := OpenPresence(e.Value, HostID(host)); err == nil && p.Room == room {
		s.dir.SetPresence(room, HostID(host), true)
	}
}

// writeKey writes this host's key record in room, and applies it to the directory at once,
// so that this host's calls to itself need not wait for the watch.
func (s *Sync) writeKey(ctx context.Context, room string) error {
	data, err := SignKeyRecord(s.key, room, time.Now())
	if err != nil {
		return err
	}
	if _, err := s.rooms.Put(ctx, room+".key."+string(s.key.ID()), data); err != nil {
		return fmt.Errorf("room: key record: %w", err)
	}
	return s.dir.ApplyKeyRecord(room, s.key.ID(), data)
}

// announce writes this host's presence record in room.
func (s *Sync) announce(ctx context.Context, room string) error {
	data, err := SignPresence(s.key, room, time.Now())
	if err != nil {
		return err
	}
	_, err = s.presence.Put(ctx, room+"."+string(s.key.ID()), data)
	return err
}

// refresh rewrites this host's presence records until Close: every refresh period, and at
// once after a reconnect, when it also restarts the rooms' watches.
func (s *Sync) refresh() {
	t := time.NewTicker(s.every)
	defer t.Stop()
	var retry map[string]bool // rooms whose watches a reconnect could not restart yet
	for {
		reconnected := false
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		case <-s.reconnected:
			reconnected = true
		}
		s.mu.Lock()
		rooms := make([]string, 0, len(s.joined))
		for r := range s.joined {
			rooms = append(rooms, r)
		}
		s.mu.Unlock()
		for _, r := range rooms {
			if !s.conn.Connected() {
				// Nothing to write to: the reconnect rewrites every record at once.
				break
			}
			ctx, cancel := context.WithTimeout(s.ctx, syncTimeout)
			// A failed write is retried at the next tick; presence expires if the bus
			// stays away, which is what presence is for.
			_ = s.announce(ctx, r)
			cancel()
		}
		again := make(map[string]bool)
		for _, r := range rooms {
			if (reconnected || retry[r]) && !s.rewatch(r) {
				again[r] = true
			}
		}
		retry = again
	}
}

// Close stops the refresher (ending the write it is waiting for) and leaves every room
// (withdrawing this host's presence), within syncTimeout for all of them. When the bus
// connection is down, or goes down meanwhile, it withdraws nothing more and returns at once:
// the presence entries expire by their TTL, as a host that crashed does, and a stop does not
// wait on a server that is not there. It is idempotent.
func (s *Sync) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	rooms := make([]string, 0, len(s.joined))
	for r := range s.joined {
		rooms = append(rooms, r)
	}
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), syncTimeout)
	defer cancel()
	lost := s.conn.Lost()
	go func() {
		select {
		case <-lost:
			// A withdrawal in flight went into the lost connection: its answer will
			// not come, and the next ones have nowhere to go.
			cancel()
		case <-ctx.Done():
		}
	}()
	var first error
	for _, r := range rooms {
		if ctx.Err() != nil {
			s.forget(r)
			continue
		}
		if err := s.Leave(ctx, r); err != nil && first == nil {
			first = err
		}
	}
	select {
	case <-lost:
		return nil // the records expire by their TTL
	default:
		return first
	}
}
