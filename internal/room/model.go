package room

import (
	"fmt"
	"slices"
	"sync"
	"unicode/utf8"
)

// Bounds of the room model.
const (
	// MaxMembers bounds a room's roster. Facts put a room at a handful of hosts; 64 leaves
	// room for the 200-hosts-in-20-rooms simulation of issue #14 without unbounded rosters.
	MaxMembers = 64
	// MaxTitleBytes bounds a room's title and a member's display name.
	MaxTitleBytes = 128
	// MaxPublicationsPerRoom bounds one provider's publications into one room.
	MaxPublicationsPerRoom = 32
	// MaxNamedActions bounds a publication's named action subset (a descriptor declares at
	// most 4; the slack tolerates nothing a descriptor could not declare).
	MaxNamedActions = 8
)

// Member is one host of a room's roster.
type Member struct {
	Host HostID `json:"host"`
	// Name is a display name chosen by the room's owner; it carries no authority.
	Name string `json:"name,omitempty"`
}

// Roster is a room's identity and member list at one version. The owner signs it (see
// SignRoster); a provider authorizes callers against the newest roster it has verified with
// the owner key it trusts for the room, whatever carried the roster to it.
type Roster struct {
	Room    string   `json:"room"`
	Title   string   `json:"title"`
	Owner   HostID   `json:"owner"`
	Version uint64   `json:"version"`
	Members []Member `json:"members"`
}

// Validate checks the roster's grammar and bounds: the owner is a member, no host twice.
func (r *Roster) Validate() error {
	switch {
	case !ValidRoomID(r.Room):
		return newError(CodeInvalidRecord, "roster: bad room id")
	case !validText(r.Title):
		return newError(CodeInvalidRecord, "roster: bad title")
	case !r.Owner.Valid():
		return newError(CodeInvalidRecord, "roster: bad owner")
	case r.Version == 0:
		return newError(CodeInvalidRecord, "roster: version 0")
	case len(r.Members) == 0 || len(r.Members) > MaxMembers:
		return newError(CodeInvalidRecord, fmt.Sprintf("roster: %d members (1 to %d)", len(r.Members), MaxMembers))
	}
	seen := make(map[HostID]bool, len(r.Members))
	for _, m := range r.Members {
		if !m.Host.Valid() || !validText(m.Name) || seen[m.Host] {
			return newError(CodeInvalidRecord, "roster: bad or repeated member")
		}
		seen[m.Host] = true
	}
	if !seen[r.Owner] {
		return newError(CodeInvalidRecord, "roster: the owner is not a member")
	}
	return nil
}

// Has reports whether host is a member.
func (r *Roster) Has(host HostID) bool {
	return slices.ContainsFunc(r.Members, func(m Member) bool { return m.Host == host })
}

func validText(s string) bool {
	if len(s) > MaxTitleBytes || !utf8.ValidString(s) {
		return false
	}
	for _, c := range s {
		if c < 0x20 || c == 0x7f {
			return false
		}
	}
	return true
}

// Operation is what a call does with a capability.
type Operation string

// Operations of a call.
const (
	Observe Operation = "observe"
	Invoke  Operation = "invoke"
)

// Publication is the provider operator's explicit act of showing one capability of this host
// to one room. It grants no filesystem, network or secret authority: it only lets the named
// members call the named operations through the provider's own authorization.
type Publication struct {
	Room       string `json:"room"`
	Capability string `json:"capability"`
	// Actions is the named subset of the capability's actions that may be invoked; empty
	// means all of its actions.
	Actions []string `json:"actions,omitempty"`
	// Observe allows observe calls.
	Observe bool `json:"observe"`
	// Members names the member hosts that may call; empty means every member.
	Members []HostID `json:"members,omitempty"`
	// ApproveEach makes every invoke by another host wait for the provider's operator.
	ApproveEach bool `json:"approveEach,omitempty"`
}

// Validate checks the publication's grammar and bounds.
func (p *Publication) Validate() error {
	switch {
	case !ValidRoomID(p.Room):
		return newError(CodeInvalidRequest, "publication: bad room id")
	case !ValidCapabilityID(p.Capability):
		return newError(CodeInvalidRequest, "publication: bad capability id")
	case len(p.Actions) > MaxNamedActions:
		return newError(CodeInvalidRequest, "publication: too many actions")
	case len(p.Members) > MaxMembers:
		return newError(CodeInvalidRequest, "publication: too many members")
	}
	for _, a := range p.Actions {
		if !ValidAction(a) {
			return newError(CodeInvalidRequest, "publication: bad action name")
		}
	}
	for _, m := range p.Members {
		if !m.Valid() {
			return newError(CodeInvalidRequest, "publication: bad member host id")
		}
	}
	return nil
}

// Allows reports whether the publication lets caller perform op (with action, for invoke).
func (p *Publication) Allows(caller HostID, op Operation, action string) bool {
	if len(p.Members) > 0 && !slices.Contains(p.Members, caller) {
		return false
	}
	switch op {
	case Observe:
		return p.Observe && action == ""
	case Invoke:
		return action != "" && (len(p.Actions) == 0 || slices.Contains(p.Actions, action))
	}
	return false
}

// Publications is a provider's table of its own publications: the authority its provider
// consults at dispatch and at result. It is safe for concurrent use.
type Publications struct {
	mu    sync.RWMutex
	byKey map[pubKey]Publication
}

type pubKey struct{ room, capability string }

// NewPublications returns an empty table.
func NewPublications() *Publications {
	return &Publications{byKey: make(map[pubKey]Publication)}
}

// Publish adds p, or replaces the publication of the same capability into the same room.
func (t *Publications) Publish(p Publication) error {
	if err := p.Validate(); err != nil {
		return err
	}
	p.Actions, p.Members = slices.Clone(p.Actions), slices.Clone(p.Members)
	t.mu.Lock()
	defer t.mu.Unlock()
	k := pubKey{p.Room, p.Capability}
	if _, ok := t.byKey[k]; !ok {
		n := 0
		for k2 := range t.byKey {
			if k2.room == p.Room {
				n++
			}
		}
		if n >= MaxPublicationsPerRoom {
			return newError(CodeInvalidRequest, "publication: too many publications in the room")
		}
	}
	t.byKey[k] = p
	return nil
}

// Unpublish withdraws capability from room; it reports whether it was published.
func (t *Publications) Unpublish(room, capability string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := pubKey{room, capability}
	_, ok := t.byKey[k]
	delete(t.byKey, k)
	return ok
}

// WithdrawCapability withdraws capability from every room (its adapter was removed or
// replaced) and returns the rooms it was published to.
func (t *Publications) WithdrawCapability(capability string) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var rooms []string
	for k := range t.byKey {
		if k.capability == capability {
			rooms = append(rooms, k.room)
			delete(t.byKey, k)
		}
	}
	slices.Sort(rooms)
	return rooms
}

// Lookup returns the publication of capability into room.
func (t *Publications) Lookup(room, capability string) (Publication, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	p, ok := t.byKey[pubKey{room, capability}]
	return p, ok
}

// InRoom returns the publications into room, ordered by capability.
func (t *Publications) InRoom(room string) []Publication {
	t.mu.RLock()
	defer t.mu.RUnlock()
	var out []Publication
	for k, p := range t.byKey {
		if k.room == room {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b Publication) int {
		if a.Capability < b.Capability {
			return -1
		}
		if a.Capability > b.Capability {
			return 1
		}
		return 0
	})
	return out
}
