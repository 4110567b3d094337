package roomhost

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/airlockhq/airlock/internal/capadapter"
	"github.com/airlockhq/airlock/internal/ndjson"
	"github.com/airlockhq/airlock/internal/room"
	"github.com/airlockhq/airlock/internal/store"
)

// Publish is the operator's act of showing one local capability to one room.
type Publish struct {
	Room       string `json:"room"`
	Capability string `json:"capabilityId"`
	// Actions names the actions that may be invoked; empty means all of them.
	Actions []string `json:"actions,omitempty"`
	// Observe allows observe calls (the capability must declare observe).
	Observe bool `json:"observe"`
	// Members limits the publication to those member hosts; empty means every member.
	Members []room.HostID `json:"members,omitempty"`
	// ApproveEach makes every invoke by another host wait for this host's operator.
	ApproveEach bool `json:"approveEach"`
}

func publicationOf(p store.PublicationRecord) room.Publication {
	out := room.Publication{Room: p.Room, Capability: p.Capability, Actions: p.Actions, Observe: p.Observe, ApproveEach: p.ApproveEach}
	for _, m := range p.Members {
		out.Members = append(out.Members, room.HostID(m))
	}
	return out
}

func recordOf(p room.Publication) store.PublicationRecord {
	out := store.PublicationRecord{Room: p.Room, Capability: p.Capability, Actions: p.Actions, Observe: p.Observe, ApproveEach: p.ApproveEach}
	for _, m := range p.Members {
		out.Members = append(out.Members, string(m))
	}
	return out
}

// Publish publishes a local capability into a room this host is in, replacing an earlier
// publication of it there. The capability must be registered; named actions must be
// declared by it, observe must be declared for observe, and named members must be in the
// room's roster. It returns the capability as the room sees it.
func (s *Service) Publish(ctx context.Context, p Publish) (Capability, error) {
	if _, err := s.record(p.Room); err != nil {
		return Capability{}, err
	}
	d, err := s.cfg.Capabilities.Describe(p.Capability)
	if err != nil {
		return Capability{}, errorf(CodeUnknownCapability, "no local capability of that id")
	}
	for _, a := range p.Actions {
		if !slices.ContainsFunc(d.Actions, func(x capadapter.Action) bool { return x.Name == a }) {
			return Capability{}, errorf(room.CodeInvalidRequest, "the capability declares no action %q", a)
		}
	}
	if p.Observe && !d.Observe {
		return Capability{}, errorf(room.CodeInvalidRequest, "the capability declares no observation")
	}
	for _, m := range p.Members {
		if !s.dir.IsMember(p.Room, m) {
			return Capability{}, errorf(room.CodeInvalidRequest, "a named member is not in the room")
		}
	}
	pub := room.Publication{Room: p.Room, Capability: p.Capability, Actions: p.Actions, Observe: p.Observe,
		Members: p.Members, ApproveEach: p.ApproveEach}
	if err := pub.Validate(); err != nil {
		return Capability{}, asError(err)
	}
	if err := s.cfg.Store.PutPublication(recordOf(pub)); err != nil {
		return Capability{}, err
	}
	if err := s.pubs.Publish(pub); err != nil {
		_, _ = s.cfg.Store.DeletePublications(p.Room, p.Capability)
		return Capability{}, asError(err)
	}
	ctx, cancel := context.WithTimeout(ctx, busTimeout)
	defer cancel()
	if err := s.project(ctx, p.Room); err != nil {
		// The publication holds (the provider's table is the authority); members see it at
		// the next projection.
		s.log.Warn("room projection not written", "room", p.Room, "err", err)
	}
	s.log.Info("capability published", "room", p.Room, "capability", p.Capability)
	return s.own(pub, d), nil
}

// Unpublish withdraws a capability from a room and reports whether it was published there.
func (s *Service) Unpublish(ctx context.Context, roomID, capability string) (bool, error) {
	if _, err := s.record(roomID); err != nil {
		return false, err
	}
	was := s.pubs.Unpublish(roomID, capability)
	if _, err := s.cfg.Store.DeletePublications(roomID, capability); err != nil {
		return was, err
	}
	if was {
		ctx, cancel := context.WithTimeout(ctx, busTimeout)
		defer cancel()
		if err := s.project(ctx, roomID); err != nil {
			s.log.Warn("room projection not written", "room", roomID, "err", err)
		}
		s.log.Info("capability unpublished", "room", roomID, "capability", capability)
	}
	return was, nil
}

// Withdraw withdraws capabilities from every room at once: their adapter was removed or
// replaced. The provider refuses calls to them from the moment Withdraw starts; the stored
// publications and the rooms' projections follow.
func (s *Service) Withdraw(capabilities []string) {
	var rooms []string
	for _, c := range capabilities {
		rooms = append(rooms, s.pubs.WithdrawCapability(c)...)
		if _, err := s.cfg.Store.DeletePublications("", c); err != nil {
			s.log.Error("withdrawn publications not deleted from the store", "capability", c, "err", err)
		}
	}
	slices.Sort(rooms)
	rooms = slices.Compact(rooms)
	ctx, cancel := context.WithTimeout(context.Background(), busTimeout)
	defer cancel()
	for _, r := range rooms {
		if err := s.project(ctx, r); err != nil {
			s.log.Warn("room projection not written", "room", r, "err", err)
		}
	}
	if len(rooms) > 0 {
		s.log.Info("capabilities withdrawn from rooms", "capabilities", capabilities, "rooms", rooms)
	}
}

// project writes this host's projection and catalog of room id: its publications there, and
// their descriptors cut to what is published.
func (s *Service) project(ctx context.Context, id string) error {
	pubs := s.pubs.InRoom(id)
	descs := make([]json.RawMessage, 0, len(pubs))
	for _, p := range pubs {
		d, err := s.cfg.Capabilities.Describe(p.Capability)
		if err != nil {
			continue
		}
		descs = append(descs, marshal(cut(d, p)))
	}
	s.mu.Lock()
	v := max(s.version[id]+1, uint64(time.Now().UnixNano()))
	s.version[id] = v
	s.mu.Unlock()
	// The catalog first: a member lists a publication from the projection and describes it
	// from the catalog, each followed by a watch of its own, so the description is on the
	// bus before the publication it describes.
	if err := s.sync.PublishCatalog(ctx, room.Catalog{Room: id, Provider: s.key.ID(), Version: v, Descriptors: descs}); err != nil {
		return err
	}
	return s.sync.PublishProjection(ctx, id, v, pubs)
}

// cut returns d with only the actions p publishes and observe only if p allows it.
func cut(d capadapter.Descriptor, p room.Publication) capadapter.Descriptor {
	out := d
	out.Observe = d.Observe && p.Observe
	out.Actions = nil
	for _, a := range d.Actions {
		if len(p.Actions) == 0 || slices.Contains(p.Actions, a.Name) {
			out.Actions = append(out.Actions, a)
		}
	}
	if out.Actions == nil {
		out.Actions = []capadapter.Action{}
	}
	return out
}

func capabilityOf(provider room.HostID, self bool, p room.Publication, d capadapter.Descriptor) Capability {
	c := Capability{Provider: provider, ProviderSelf: self, CapabilityID: p.Capability, Title: d.Title,
		Observe: d.Observe && p.Observe, Actions: []Action{}}
	if self {
		c.Members = p.Members
	}
	for _, a := range d.Actions {
		if len(p.Actions) == 0 || slices.Contains(p.Actions, a.Name) {
			c.Actions = append(c.Actions, Action{Name: a.Name, Title: a.Title, Input: marshal(a.Input), ApproveEach: p.ApproveEach})
		}
	}
	return c
}

// Capabilities lists what this host sees in room id: its own publications, and each other
// provider's publications that allow this host, described by the provider's catalog as the
// sync's watch last delivered it. It reads no bus, so it answers at once while the bus is
// slow or away.
func (s *Service) Capabilities(ctx context.Context, id string) ([]Capability, error) {
	if _, err := s.record(id); err != nil {
		return nil, err
	}
	out := []Capability{}
	for _, p := range s.pubs.InRoom(id) {
		d, err := s.cfg.Capabilities.Describe(p.Capability)
		if err != nil {
			d = capadapter.Descriptor{CapabilityID: p.Capability}
		}
		out = append(out, s.own(p, d))
	}
	projs := s.sync.Projections(id)
	slices.SortFunc(projs, func(a, b room.Projection) int { return strings.Compare(string(a.Provider), string(b.Provider)) })
	for _, proj := range projs {
		if proj.Provider == s.key.ID() {
			continue
		}
		descs := s.catalog(id, proj.Provider)
		reason := s.remoteReason(id, proj.Provider)
		for _, p := range proj.Publications {
			if len(p.Members) > 0 && !slices.Contains(p.Members, s.key.ID()) {
				continue
			}
			d, ok := descs[p.Capability]
			if !ok {
				d = capadapter.Descriptor{CapabilityID: p.Capability}
			}
			c := capabilityOf(proj.Provider, false, p, d)
			c.Available, c.UnavailableReason = reason == "", reason
			out = append(out, c)
		}
	}
	return out, nil
}

// own is this host's publication p of the capability d describes, available while its
// adapter is ready and its last calls did not all end unavailable.
func (s *Service) own(p room.Publication, d capadapter.Descriptor) Capability {
	c := capabilityOf(s.key.ID(), true, p, d)
	c.UnavailableReason = s.cfg.Capabilities.UnavailableReason(p.Capability)
	c.Available = c.UnavailableReason == ""
	return c
}

// remoteReason says why provider's capabilities in room id cannot be reached now, or ""
// when they can: this host's bus connection must be up and the provider's presence live.
func (s *Service) remoteReason(id string, provider room.HostID) string {
	switch {
	case !s.conn.Connected():
		return ReasonBusDisconnected
	case !s.dir.Present(id, provider):
		return ReasonProviderAbsent
	}
	return ""
}

// catalog returns the descriptors of provider's catalog of room id, by capability id. A
// missing or unverifiable catalog, or descriptor, is left out: its capabilities show by id
// alone.
func (s *Service) catalog(id string, provider room.HostID) map[string]capadapter.Descriptor {
	out := make(map[string]capadapter.Descriptor)
	c, ok := s.sync.Catalog(id, provider)
	if !ok {
		return out
	}
	for _, raw := range c.Descriptors {
		var d capadapter.Descriptor
		if ndjson.Decode(raw, &d, ndjson.Open) != nil || capadapter.ValidateDescriptor(d) != nil {
			continue
		}
		out[d.CapabilityID] = d
	}
	return out
}

// lookup finds the publication of capability by provider in room id, as this host sees it.
func (s *Service) lookup(id string, provider room.HostID, capability string) (room.Publication, bool) {
	if provider == s.key.ID() {
		return s.pubs.Lookup(id, capability)
	}
	for _, proj := range s.sync.Projections(id) {
		if proj.Provider != provider {
			continue
		}
		for _, p := range proj.Publications {
			if p.Capability == capability {
				return p, true
			}
		}
	}
	return room.Publication{}, false
}
