package roomhost

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/airlockhq/airlock/internal/busport"
	"github.com/airlockhq/airlock/internal/protocol"
	"github.com/airlockhq/airlock/internal/room"
	"github.com/airlockhq/airlock/internal/store"
)

// Room is one room this host is in, as a list shows it.
type Room struct {
	ID      string      `json:"id"`
	Title   string      `json:"title"`
	Owner   room.HostID `json:"owner"`
	Members int         `json:"members"`
	// Self says this host owns the room.
	Self bool `json:"self"`
}

// Member is one host of a room's roster.
type Member struct {
	HostID  room.HostID `json:"hostId"`
	Name    string      `json:"name,omitempty"`
	Self    bool        `json:"self"`
	Present bool        `json:"present"`
}

// RoomDetail is a room with its members and the capabilities visible in it: this host's own
// publications and those of the other providers published to this host.
type RoomDetail struct {
	Room
	Members      []Member     `json:"members"`
	Capabilities []Capability `json:"capabilities"`
}

// Capability is one published capability of one provider in a room.
type Capability struct {
	Provider     room.HostID `json:"provider"`
	ProviderSelf bool        `json:"providerSelf"`
	CapabilityID string      `json:"capabilityId"`
	Title        string      `json:"title"`
	Observe      bool        `json:"observe"`
	Actions      []Action    `json:"actions"`
	// Members are the hosts the publication is limited to; empty means every member. Shown
	// for this host's own publications only.
	Members []room.HostID `json:"members,omitempty"`
	// Available says whether a call to the capability can reach it now: for another
	// provider's, this host's bus connection is up and the provider's presence in the room is
	// live; for this host's own, its adapter is ready and its last calls did not all end
	// unavailable. UnavailableReason says why not.
	Available         bool   `json:"available"`
	UnavailableReason string `json:"unavailableReason,omitempty"`
}

// Why a capability in a room is unavailable (Capability.UnavailableReason).
const (
	// ReasonBusDisconnected: this host's bus connection is down (it lost its server and
	// tries to reconnect), so no other provider is reachable.
	ReasonBusDisconnected = protocol.RoomUnavailableBusDisconnected
	// ReasonProviderAbsent: the provider's presence in the room is not live: it left, or its
	// record expired (it lost the bus or stopped), or none has reached this host.
	ReasonProviderAbsent = protocol.RoomUnavailableProviderAbsent
	// ReasonAdapterNotReady: this host's adapter that serves the capability is not ready
	// (starting, restarting after a crash, or gone).
	ReasonAdapterNotReady = protocol.RoomUnavailableAdapterNotReady
	// ReasonCallsUnavailable: this host's adapter is ready, but the capability's last calls
	// all ended unavailable (capclient.UnavailableAfter); calls are still made.
	ReasonCallsUnavailable = protocol.RoomUnavailableCallsUnavailable
)

// Action is one published action of a capability.
type Action struct {
	Name  string `json:"name"`
	Title string `json:"title"`
	// Input is the JSON Schema of the action's args, from the descriptor.
	Input       json.RawMessage `json:"input"`
	ApproveEach bool            `json:"approveEach"`
}

// Create makes a room owned by this host, with this host its only member.
func (s *Service) Create(ctx context.Context, id, title string) (Room, error) {
	if !room.ValidRoomID(id) {
		return Room{}, errorf(room.CodeInvalidRequest, "a room id is 1 to 64 of [a-z0-9_-], starting with a letter or digit")
	}
	if len(title) > room.MaxTitleBytes || !utf8.ValidString(title) || strings.ContainsFunc(title, isControl) {
		return Room{}, errorf(room.CodeInvalidRequest, "a title is at most %d bytes of UTF-8 without control characters", room.MaxTitleBytes)
	}
	if title == "" {
		title = id
	}
	ctx, cancel := context.WithTimeout(ctx, busTimeout)
	defer cancel()
	s.mu.Lock()
	_, exists := s.joined[id]
	s.mu.Unlock()
	if exists {
		return Room{}, errorf(CodeRoomExists, "this host is already in that room")
	}
	// Room ids are one namespace on the bus: a roster there that this host did not sign
	// belongs to another owner's room. On a fabric node this host may read the room's keys
	// once its user has the room.
	if err := s.users.permit(id, true); err != nil {
		return Room{}, asError(err)
	}
	version := uint64(1)
	if e, err := s.rooms.Get(ctx, id+".roster"); err == nil {
		old, oerr := room.OpenRoster(e.Value, s.key.ID())
		if oerr != nil {
			s.unpermit(id)
			return Room{}, errorf(CodeRoomExists, "another host's room has that id")
		}
		version = old.Version + 1
	} else if !errors.Is(err, busport.ErrNotFound) {
		s.unpermit(id)
		return Room{}, errorf(room.CodeUnavailable, "the bus did not answer")
	}
	rec := store.RoomRecord{ID: id, Title: title, Owner: string(s.key.ID()), Version: version,
		Members: []store.RoomMember{{Host: string(s.key.ID())}}}
	if err := s.cfg.Store.PutRoom(rec); err != nil {
		s.unpermit(id)
		return Room{}, err
	}
	if err := s.rejoin(ctx, rec); err != nil {
		s.forget(ctx, id)
		return Room{}, asError(err)
	}
	s.log.Info("room created", "room", id)
	return s.summary(rec), nil
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) }

// forget drops room id from this host: presence withdrawn, calls refused, publications and
// the stored record gone.
func (s *Service) forget(ctx context.Context, id string) {
	s.mu.Lock()
	delete(s.joined, id)
	delete(s.version, id)
	s.mu.Unlock()
	for _, p := range s.pubs.InRoom(id) {
		s.pubs.Unpublish(id, p.Capability)
	}
	if err := s.sync.Leave(ctx, id); err != nil {
		s.log.Warn("room presence not withdrawn", "room", id, "err", err)
	}
	if err := s.provider.StopRoom(id); err != nil {
		s.log.Warn("room calls not stopped", "room", id, "err", err)
	}
	s.unpermit(id)
	s.dir.Forget(id)
	if _, err := s.cfg.Store.DeleteRoom(id); err != nil {
		s.log.Error("room record not deleted", "room", id, "err", err)
	}
}

// Rooms lists the rooms this host is in, by id.
func (s *Service) Rooms(ctx context.Context) ([]Room, error) {
	s.mu.Lock()
	recs := make([]store.RoomRecord, 0, len(s.joined))
	for _, r := range s.joined {
		recs = append(recs, r)
	}
	s.mu.Unlock()
	slices.SortFunc(recs, func(a, b store.RoomRecord) int { return strings.Compare(a.ID, b.ID) })
	out := make([]Room, 0, len(recs))
	for _, r := range recs {
		out = append(out, s.summary(r))
	}
	return out, nil
}

func (s *Service) summary(r store.RoomRecord) Room {
	out := Room{ID: r.ID, Title: r.Title, Owner: room.HostID(r.Owner), Self: room.HostID(r.Owner) == s.key.ID()}
	if ros, ok := s.dir.Roster(r.ID); ok {
		out.Title, out.Members = ros.Title, len(ros.Members)
	}
	return out
}

func (s *Service) record(id string) (store.RoomRecord, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.joined[id]
	if !ok {
		return store.RoomRecord{}, errorf(CodeUnknownRoom, "this host is not in that room")
	}
	return r, nil
}

// Room shows one room: its members with their presence, and the capabilities visible in it.
func (s *Service) Room(ctx context.Context, id string) (RoomDetail, error) {
	r, err := s.record(id)
	if err != nil {
		return RoomDetail{}, err
	}
	d := RoomDetail{Room: s.summary(r), Members: []Member{}}
	if ros, ok := s.dir.Roster(id); ok {
		for _, m := range ros.Members {
			d.Members = append(d.Members, Member{HostID: m.Host, Name: m.Name, Self: m.Host == s.key.ID(),
				Present: s.dir.Present(id, m.Host)})
		}
	}
	caps, err := s.Capabilities(ctx, id)
	if err != nil {
		return RoomDetail{}, err
	}
	d.Capabilities = caps
	return d, nil
}

// CloseRoom closes a room this host owns — the last roster it signs has no member but itself, so
// every other host's calls into the room are refused from then on — or, for a room of
// another owner, leaves it. Either way this host's publications into the room are withdrawn
// and its record forgotten. Then Config.RoomClosed is told, outside the service's locks, so
// that what is tied to the room (temporary adapters) ends with it.
func (s *Service) CloseRoom(ctx context.Context, id string) error {
	rec, err := s.record(id)
	if err != nil {
		return err
	}
	if err := s.closeRoom(ctx, id); err != nil {
		return err
	}
	if room.HostID(rec.Owner) != s.key.ID() {
		s.tellOwnerLeft(ctx, rec)
	}
	if s.cfg.RoomClosed != nil {
		s.cfg.RoomClosed(ctx, id)
	}
	return nil
}

func (s *Service) closeRoom(ctx context.Context, id string) error {
	s.rosterMu.Lock()
	defer s.rosterMu.Unlock()
	r, err := s.record(id)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, busTimeout)
	defer cancel()
	for _, p := range s.pubs.InRoom(id) {
		s.pubs.Unpublish(id, p.Capability)
	}
	// Projections are discovery: an empty one tells members at once.
	if err := s.project(ctx, id); err != nil {
		s.log.Warn("room projection not withdrawn", "room", id, "err", err)
	}
	if room.HostID(r.Owner) == s.key.ID() {
		r.Version++
		r.Members = []store.RoomMember{{Host: r.Owner}}
		if err := s.sync.PublishRoster(ctx, rosterOf(r)); err != nil {
			return asError(err)
		}
	}
	s.forget(ctx, id)
	s.log.Info("room closed", "room", id, "owner", room.HostID(r.Owner) == s.key.ID())
	return nil
}

// dropped is the sync's Dropped hook: the owner's roster of room id no longer lists this
// host. It hands off to a goroutine of the service, which forgets the room as a leave
// would and then tells Config.RoomClosed.
func (s *Service) dropped(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || !s.live {
		return
	}
	s.wg.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), busTimeout)
		defer cancel()
		if s.forgetDropped(ctx, id) && s.cfg.RoomClosed != nil {
			s.cfg.RoomClosed(ctx, id)
		}
	})
}

// forgetDropped forgets room id, withdrawing this host's publications there, when this host
// is in it, does not own it and the owner's current roster no longer lists it. It reports
// whether it did.
func (s *Service) forgetDropped(ctx context.Context, id string) bool {
	s.rosterMu.Lock()
	defer s.rosterMu.Unlock()
	r, err := s.record(id)
	if err != nil || room.HostID(r.Owner) == s.key.ID() {
		return false
	}
	if ros, ok := s.dir.Roster(id); !ok || ros.Has(s.key.ID()) {
		return false
	}
	for _, p := range s.pubs.InRoom(id) {
		s.pubs.Unpublish(id, p.Capability)
	}
	if err := s.project(ctx, id); err != nil {
		s.log.Warn("room projection not withdrawn", "room", id, "err", err)
	}
	s.forget(ctx, id)
	s.log.Info("room closed by its owner", "room", id)
	return true
}

func rosterOf(r store.RoomRecord) room.Roster {
	ros := room.Roster{Room: r.ID, Title: r.Title, Owner: room.HostID(r.Owner), Version: r.Version}
	for _, m := range r.Members {
		ros.Members = append(ros.Members, room.Member{Host: room.HostID(m.Host), Name: m.Name})
	}
	return ros
}
