package roomhost

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/bus"
	"github.com/airlockhq/airlock/internal/busport"
	"github.com/airlockhq/airlock/internal/room"
	"github.com/airlockhq/airlock/internal/store"
)

// BusSeedFile is the file in the state directory holding this host's nkey user seed (mode
// 0600), made at the first start: the credential of its connection to its own embedded bus,
// or to the bus of the daemon that admitted it (airlockd --nats-via).
const BusSeedFile = "bus.nk"

// Error codes of the embedded bus's admission.
const (
	// CodeNoEmbeddedBus: this host runs no local embedded bus to admit hosts to (it is a
	// fabric node, or itself on another daemon's bus).
	CodeNoEmbeddedBus = "no_embedded_bus"
	// CodeUnknownBusHost: no admitted host of that id.
	CodeUnknownBusHost = "unknown_bus_host"
)

// Admission admits this host to the embedded bus of another daemon of the same operator
// (airlockd --nats-via, through that daemon's owner socket): it tells that daemon this
// host's id, the public key of its nkey user and the rooms it is in, and learns the bus's
// URL. It is called at start with the stored rooms, and again with all of them at every
// change, as a fabric host tells its own node.
type Admission interface {
	AdmitBusHost(ctx context.Context, req AdmitRequest) (url string, err error)
}

// AdmitRequest is what a host tells the daemon whose bus it joins.
type AdmitRequest struct {
	Host  room.HostID
	Nkey  string
	Rooms []bus.Membership
}

// BusHost is a host admitted to this host's embedded bus, as the operator sees it.
type BusHost struct {
	HostID     room.HostID `json:"hostId"`
	Nkey       string      `json:"nkey"`
	AdmittedAt time.Time   `json:"admittedAt"`
	// Rooms and Owns are the rooms its broker user may use now, and those whose roster it
	// may write.
	Rooms []string `json:"rooms"`
	Owns  []string `json:"owns"`
}

// localBus keeps the users of this host's embedded local server (bus.ServerConfig.Host): this
// host with its rooms (brokerUsers), and every host admitted with AdmitBusHost with the rooms
// its daemon says it is in. A host may own (write the roster of) only a room whose verified
// roster, if any, names it the owner. Before an admitted host's first word since this daemon
// started, its rooms are those the verified rosters on the bus list it in; the warden, the
// server's in-process privileged connection, reads them.
type localBus struct {
	server  *bus.Server
	store   *store.Store
	self    string
	log     *slog.Logger
	warden  *bus.Conn
	rosters busport.Bucket
	watch   busport.Subscription

	mu        sync.Mutex // guards the fields below and serializes SetUsers
	selfPub   string
	selfRooms map[string]bool
	hosts     map[string]store.BusHostRecord
	claims    map[string]map[string]bool // host → room → owner, as its daemon last said
	owners    map[string]room.HostID     // room → the owner of the first verified roster seen
	members   map[string][]room.HostID   // room → the members of its latest verified roster
	versions  map[string]uint64          // room → the version of that roster
	applied   []bus.FabricUser           // the users the server has
}

// openLocalBus starts following the rosters as the warden and loads the admitted hosts.
func openLocalBus(ctx context.Context, srv *bus.Server, st *store.Store, self, selfPub string, log *slog.Logger) (*localBus, error) {
	recs, err := st.BusHosts()
	if err != nil {
		return nil, err
	}
	l := &localBus{server: srv, store: st, self: self, selfPub: selfPub, log: log,
		selfRooms: map[string]bool{}, hosts: map[string]store.BusHostRecord{}, claims: map[string]map[string]bool{},
		owners: map[string]room.HostID{}, members: map[string][]room.HostID{}, versions: map[string]uint64{}}
	for _, r := range recs {
		l.hosts[r.Host] = r
	}
	wcfg, _ := srv.WardenDialConfig()
	if l.warden, err = bus.Dial(wcfg); err != nil {
		return nil, err
	}
	if err := l.follow(ctx); err != nil {
		_ = l.warden.Close()
		return nil, err
	}
	return l, nil
}

// follow (re)opens the rooms bucket as the warden and watches every roster in it.
func (l *localBus) follow(ctx context.Context) error {
	b, err := l.warden.Bucket(ctx, busport.BucketConfig{Name: room.RoomsBucket, MaxValueBytes: room.MaxRecordBytes})
	if err != nil {
		return err
	}
	w, err := b.Watch(ctx, "*.roster", l.rosterEntry)
	if err != nil {
		return err
	}
	l.mu.Lock()
	old := l.watch
	l.rosters, l.watch = b, w
	l.mu.Unlock()
	if old != nil {
		_ = old.Stop()
	}
	return l.apply()
}

func (l *localBus) close() error {
	l.mu.Lock()
	w := l.watch
	l.watch = nil
	l.mu.Unlock()
	var errs []error
	if w != nil {
		errs = append(errs, w.Stop())
	}
	return errors.Join(append(errs, l.warden.Close())...)
}

// rosterEntry applies a roster from the bus: verified against the owner it names, and kept
// only if that owner is the first seen for the room and it is not older than the one kept.
func (l *localBus) rosterEntry(e busport.Entry) {
	if e.Deleted {
		return
	}
	changed := l.learn(e)
	if changed {
		if err := l.apply(); err != nil {
			l.log.Warn("embedded bus users not updated", "err", err)
		}
	}
}

// learn records a verified roster and reports whether it changed what is kept.
func (l *localBus) learn(e busport.Entry) bool {
	id, ok := strings.CutSuffix(e.Key, ".roster")
	if !ok {
		return false
	}
	ros, err := room.OpenAnyRoster(e.Value)
	if err != nil || ros.Room != id {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if o, ok := l.owners[id]; ok && o != ros.Owner {
		return false
	}
	if v, ok := l.versions[id]; ok && ros.Version < v {
		return false
	}
	members := make([]room.HostID, 0, len(ros.Members))
	for _, m := range ros.Members {
		members = append(members, m.Host)
	}
	if _, ok := l.owners[id]; ok && slices.Equal(l.members[id], members) {
		l.versions[id] = ros.Version
		return false
	}
	l.owners[id], l.members[id], l.versions[id] = ros.Owner, members, ros.Version
	return true
}

// setSelf is this host's brokerUsers push.
func (l *localBus) setSelf(rooms map[string]bool) error {
	l.mu.Lock()
	l.selfRooms = rooms
	l.mu.Unlock()
	return l.apply()
}

// roomsOf is host's rooms (room → owner); l.mu is held.
func (l *localBus) roomsOf(host string) map[string]bool {
	out := map[string]bool{}
	claims, said := l.claims[host]
	if !said {
		for id, members := range l.members {
			if slices.Contains(members, room.HostID(host)) {
				out[id] = l.owners[id] == room.HostID(host)
			}
		}
		return out
	}
	for id, owner := range claims {
		o, known := l.owners[id]
		out[id] = owner && (!known || o == room.HostID(host))
	}
	return out
}

// apply gives the server the users as they are now.
func (l *localBus) apply() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	all, owns := roomLists(l.selfRooms)
	users := []bus.FabricUser{{Host: l.self, Nkey: l.selfPub, Rooms: all, Owns: owns}}
	for _, h := range slices.Sorted(maps.Keys(l.hosts)) {
		all, owns := roomLists(l.roomsOf(h))
		users = append(users, bus.FabricUser{Host: h, Nkey: l.hosts[h].Nkey, Rooms: all, Owns: owns})
	}
	// A reload re-authenticates every client, which forgets the replies each may still send
	// (nats-server resets a client's response permissions): one without a change of users is
	// avoided.
	if l.applied != nil && slices.EqualFunc(users, l.applied, sameUser) {
		return nil
	}
	if err := l.server.SetUsers(users); err != nil {
		return err
	}
	l.applied = users
	return nil
}

func sameUser(a, b bus.FabricUser) bool {
	return a.Host == b.Host && a.Nkey == b.Nkey && slices.Equal(a.Rooms, b.Rooms) && slices.Equal(a.Owns, b.Owns)
}

// admit admits req's host with the rooms it says it is in. An owner's claim to a room whose
// verified roster names another owner is refused room_exists (a create of a taken id); the
// roster is read afresh when the one kept does not settle it.
func (l *localBus) admit(ctx context.Context, req AdmitRequest) error {
	host := string(req.Host)
	if !bus.ValidHostID(host) || !bus.ValidNkey(req.Nkey) || len(req.Rooms) > store.MaxRooms {
		return errorf(room.CodeInvalidRequest, "an admission names a host id, an nkey user public key and at most %d rooms", store.MaxRooms)
	}
	if host == l.self || req.Nkey == l.selfPub {
		return errorf(room.CodeInvalidRequest, "that is this host")
	}
	l.mu.Lock()
	taken := false
	for h, rec := range l.hosts {
		taken = taken || (h != host && rec.Nkey == req.Nkey)
	}
	l.mu.Unlock()
	if taken {
		// The store would refuse it too, but as a failed write (internal_error).
		return errorf(room.CodeInvalidRequest, "another admitted host has that nkey")
	}
	claims := make(map[string]bool, len(req.Rooms))
	for _, m := range req.Rooms {
		if !room.ValidRoomID(m.Room) {
			return errorf(room.CodeInvalidRequest, "a room id is 1 to 64 of [a-z0-9_-], starting with a letter or digit")
		}
		claims[m.Room] = claims[m.Room] || m.Owner
	}
	for id, owner := range claims {
		if !owner {
			continue
		}
		l.mu.Lock()
		o, known := l.owners[id]
		b := l.rosters
		l.mu.Unlock()
		if known && o == req.Host {
			continue
		}
		if e, err := b.Get(ctx, id+".roster"); err == nil {
			l.learn(e)
		} else if !errors.Is(err, busport.ErrNotFound) {
			return errorf(room.CodeUnavailable, "the bus did not answer")
		}
		l.mu.Lock()
		o, known = l.owners[id]
		l.mu.Unlock()
		if known && o != req.Host {
			return errorf(CodeRoomExists, "another host's room has that id")
		}
	}
	l.mu.Lock()
	rec, ok := l.hosts[host]
	l.mu.Unlock()
	if !ok || rec.Nkey != req.Nkey {
		rec = store.BusHostRecord{Host: host, Nkey: req.Nkey, AdmittedAt: time.Now().UTC().Truncate(time.Second)}
		if err := l.store.PutBusHost(rec); err != nil {
			return err
		}
	}
	l.mu.Lock()
	l.hosts[host] = rec
	l.claims[host] = claims
	l.mu.Unlock()
	if err := l.apply(); err != nil {
		return &Error{code: room.CodeInternal, msg: "the embedded bus did not take the new users", cause: err}
	}
	return nil
}

// list is the admitted hosts in host id order.
func (l *localBus) list() []BusHost {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]BusHost, 0, len(l.hosts))
	for _, h := range slices.Sorted(maps.Keys(l.hosts)) {
		all, owns := roomLists(l.roomsOf(h))
		out = append(out, BusHost{HostID: room.HostID(h), Nkey: l.hosts[h].Nkey, AdmittedAt: l.hosts[h].AdmittedAt,
			Rooms: append([]string{}, all...), Owns: append([]string{}, owns...)})
	}
	return out
}

// remove forgets an admitted host: its user goes from the server, which closes its
// connections, and from the store.
func (l *localBus) remove(host string) error {
	existed, err := l.store.DeleteBusHost(host)
	if err != nil {
		return err
	}
	l.mu.Lock()
	_, known := l.hosts[host]
	delete(l.hosts, host)
	delete(l.claims, host)
	l.mu.Unlock()
	if !existed && !known {
		return errorf(CodeUnknownBusHost, "no host of that id is admitted to this host's bus")
	}
	if err := l.apply(); err != nil {
		return &Error{code: room.CodeInternal, msg: "the embedded bus did not take the new users", cause: err}
	}
	return nil
}

// AdmitBusHost admits req's host to this host's embedded bus (or updates its nkey and rooms)
// and returns the bus's URL. This daemon's owner socket calls it for another daemon of the
// same user (airlockd --nats-via).
func (s *Service) AdmitBusHost(ctx context.Context, req AdmitRequest) (string, error) {
	if s.local == nil {
		return "", errorf(CodeNoEmbeddedBus, "this host does not run a local embedded bus (it is a fabric node or on another daemon's bus)")
	}
	if err := s.local.admit(ctx, req); err != nil {
		return "", asError(err)
	}
	return s.url, nil
}

// BusHosts lists the hosts admitted to this host's embedded bus.
func (s *Service) BusHosts() ([]BusHost, error) {
	if s.local == nil {
		return nil, errorf(CodeNoEmbeddedBus, "this host does not run a local embedded bus (it is a fabric node or on another daemon's bus)")
	}
	return s.local.list(), nil
}

// RemoveBusHost removes an admitted host from this host's embedded bus: its connections are
// closed and it cannot connect again until it is admitted again.
func (s *Service) RemoveBusHost(host room.HostID) error {
	if s.local == nil {
		return errorf(CodeNoEmbeddedBus, "this host does not run a local embedded bus (it is a fabric node or on another daemon's bus)")
	}
	if err := s.local.remove(string(host)); err != nil {
		return asError(err)
	}
	s.log.Info("bus host removed", "hostId", host)
	return nil
}

// startBus connects this host to a bus without a fabric, as its nkey user (BusSeedFile): its
// own embedded server, which admits nkey users only (localBus), or the bus of the daemon that
// admits it (Config.Via). It returns the configuration of the connection.
func (s *Service) startBus(ctx context.Context) (bus.DialConfig, error) {
	id := string(s.key.ID())
	seed, created, err := bus.LoadOrCreateSeed(filepath.Join(s.cfg.StateDir, BusSeedFile))
	if err != nil {
		return bus.DialConfig{}, err
	}
	pub, err := bus.NkeyPublic(seed)
	if err != nil {
		return bus.DialConfig{}, err
	}
	if created {
		s.log.Info("bus nkey created", "nkey", pub)
	}
	stored := storedRooms(s.cfg.Store, s.key.ID())
	if via := s.cfg.Via; via != nil {
		admit := func(ctx context.Context, rooms map[string]bool) (string, error) {
			req := AdmitRequest{Host: s.key.ID(), Nkey: pub}
			for _, r := range slices.Sorted(maps.Keys(rooms)) {
				req.Rooms = append(req.Rooms, bus.Membership{Room: r, Owner: rooms[r]})
			}
			return via.AdmitBusHost(ctx, req)
		}
		actx, cancel := context.WithTimeout(ctx, busTimeout)
		defer cancel()
		url, err := admit(actx, stored)
		if err != nil {
			return bus.DialConfig{}, err
		}
		s.url = url
		if s.cfg.viaURL != "" {
			url = s.cfg.viaURL
		}
		s.users = pushUsers(func(rooms map[string]bool) error {
			ctx, cancel := context.WithTimeout(context.Background(), busTimeout)
			defer cancel()
			_, err := admit(ctx, rooms)
			return err
		})
		s.users.rooms = stored
		return bus.DialConfig{URL: url, Name: id, InboxPrefix: bus.InboxPrefix(id), Nkey: seed}, nil
	}
	listen := s.cfg.Listen
	if listen == "" {
		listen = lastBusListen(s.cfg.StateDir)
	}
	s.server, err = bus.StartServer(bus.ServerConfig{StateDir: s.cfg.StateDir, Listen: listen, Host: &bus.LocalHost{ID: id, Key: seed}, Logger: s.log})
	if err != nil && listen != s.cfg.Listen {
		s.log.Warn("the embedded bus's port of the last start is taken: another port is chosen, and daemons on this bus (--nats-via) must be restarted to find it", "listen", listen, "err", err)
		s.server, err = bus.StartServer(bus.ServerConfig{StateDir: s.cfg.StateDir, Listen: s.cfg.Listen, Host: &bus.LocalHost{ID: id, Key: seed}, Logger: s.log})
	}
	if err != nil {
		return bus.DialConfig{}, err
	}
	s.url = s.server.ClientURL()
	if s.cfg.Listen == "" {
		keepBusListen(s.cfg.StateDir, s.url, s.log)
	}
	if s.local, err = openLocalBus(ctx, s.server, s.cfg.Store, id, pub, s.log); err != nil {
		return bus.DialConfig{}, err
	}
	s.users = pushUsers(s.local.setSelf)
	if err := s.users.set(stored); err != nil {
		return bus.DialConfig{}, err
	}
	return s.server.HostDialConfig(), nil
}

// BusPortFile is the file in the state directory holding the loopback port the embedded bus
// listened on at the last start without --nats-listen: the next start listens there again
// when it is free, so that the daemons joined to this bus (--nats-via), whose connections
// reconnect to the address they were given, find it after a restart.
const BusPortFile = "bus.port"

// lastBusListen is the address of the port BusPortFile records, or "" (a random port) when
// there is none or it is not a port.
func lastBusListen(stateDir string) string {
	b, err := os.ReadFile(filepath.Join(stateDir, BusPortFile))
	if err != nil || len(b) > 8 {
		return ""
	}
	port, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 16)
	if err != nil || port == 0 {
		return ""
	}
	return "127.0.0.1:" + strconv.FormatUint(port, 10)
}

// keepBusListen records the port of the bus at url in BusPortFile.
func keepBusListen(stateDir, url string, log *slog.Logger) {
	i := strings.LastIndexByte(url, ':')
	if i < 0 {
		return
	}
	port := url[i+1:]
	path := filepath.Join(stateDir, BusPortFile)
	if b, err := os.ReadFile(path); err == nil && strings.TrimSpace(string(b)) == port {
		return
	}
	if err := os.WriteFile(path, []byte(port+"\n"), 0o600); err != nil {
		log.Warn("the embedded bus's port is not recorded: the next start may choose another", "err", err)
	}
}

// roomBuckets are the buckets the keeper watches over.
var roomBuckets = []string{room.RoomsBucket, room.PresenceBucket, room.CatalogBucket}

// keep checks, every presence refresh, that the room buckets are still the ones this host
// wrote its records into — each exists, with the creation time it had — and repairs the rooms
// when one is gone or was made anew (deleted, and already re-created by another host), until
// Close.
func (s *Service) keep() {
	every := s.cfg.keepEvery
	if every <= 0 {
		every = room.PresenceRefresh
	}
	t := time.NewTicker(every)
	defer t.Stop()
	var known []time.Time
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(s.life, busTimeout)
		created, err := s.conn.BucketsCreated(ctx, roomBuckets...)
		switch {
		case err != nil:
		case known == nil && !slices.Contains(created, time.Time{}):
			known = created
		case !slices.Equal(created, known):
			s.log.Warn("room buckets deleted from the bus; repairing the rooms")
			if err := s.repair(ctx); err != nil {
				s.log.Warn("rooms not repaired yet; trying again", "err", err)
				break
			}
			if created, err = s.conn.BucketsCreated(ctx, roomBuckets...); err == nil && !slices.Contains(created, time.Time{}) {
				known = created
			}
			s.log.Info("rooms repaired")
		}
		cancel()
	}
}

// repair restores this host's part of every room after a room bucket disappeared: its
// broker permissions are given again (the daemon that admitted it may have restarted
// meanwhile), the buckets re-created, its key records, presence and watches restored
// (room.Sync.Repair), the rosters it owns rewritten from its store, and its projections and
// catalogs written again. Every other host does the same for its own records.
func (s *Service) repair(ctx context.Context) error {
	if s.users != nil {
		s.users.mu.Lock()
		err := s.users.apply()
		s.users.mu.Unlock()
		if err != nil {
			return err
		}
	}
	if s.local != nil {
		if err := s.local.follow(ctx); err != nil {
			return err
		}
	}
	if err := s.sync.Repair(ctx); err != nil {
		return err
	}
	s.rosterMu.Lock()
	defer s.rosterMu.Unlock()
	s.mu.Lock()
	recs := slices.Collect(maps.Values(s.joined))
	s.mu.Unlock()
	for _, r := range recs {
		if room.HostID(r.Owner) == s.key.ID() {
			if err := s.sync.PublishRoster(ctx, rosterOf(r)); err != nil {
				return err
			}
		}
		if err := s.project(ctx, r.ID); err != nil {
			return err
		}
	}
	return nil
}

// ErrorOf is an error of the service's form with code and message, for an answer of another
// daemon (an Admission's) that carries a room code.
func ErrorOf(code, msg string) error { return &Error{code: code, msg: msg} }
