package roomhost

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/airlockhq/airlock/internal/busport"
	"github.com/airlockhq/airlock/internal/ndjson"
	"github.com/airlockhq/airlock/internal/room"
	"github.com/airlockhq/airlock/internal/store"
)

// A join code is "ajc1.<room>.<owner host id>.<secret>": what a host needs to join one
// room and nothing more. The room and owner say where to ask and which key must sign the
// roster it gets back; the secret, 32 random bytes in unpadded base64url, is a one-time
// bearer proof that the owner invited someone. The owner keeps only the secret's SHA-256, in
// memory, until it is used or expires; a restart of the owner voids every code.
const (
	codePrefix  = "ajc1"
	secretBytes = 32
	// MaxJoinCodeBytes bounds a join code.
	MaxJoinCodeBytes = 256
	// maxJoinBytes bounds a join request and its reply on the bus.
	maxJoinBytes = room.MaxRecordBytes + 1<<10
	joinDomain   = "airlock-room-join-v1\n"
	leaveDomain  = "airlock-room-leave-v1\n"
	// leaveTimeout bounds telling a room's owner that this host left (tellOwnerLeft).
	leaveTimeout = 2 * time.Second
)

type invite struct {
	room    string
	name    string
	expires time.Time
}

// Invite is a join code, for the owner to pass to one other host's operator.
type Invite struct {
	Room    string    `json:"room"`
	Code    string    `json:"code"`
	Expires time.Time `json:"expiresAt"`
}

// Invite makes a one-time join code for room id, which this host must own. name, when set,
// is the display name the joiner gets in the roster.
func (s *Service) Invite(ctx context.Context, id, name string) (Invite, error) {
	r, err := s.record(id)
	if err != nil {
		return Invite{}, err
	}
	if room.HostID(r.Owner) != s.key.ID() {
		return Invite{}, errorf(CodeNotOwner, "only the room's owner invites")
	}
	if err := validName(name); err != nil {
		return Invite{}, err
	}
	var secret [secretBytes]byte
	if _, err := rand.Read(secret[:]); err != nil {
		return Invite{}, asError(err)
	}
	now := s.now()
	s.mu.Lock()
	for h, inv := range s.invites {
		if !now.Before(inv.expires) {
			delete(s.invites, h)
		}
	}
	if len(s.invites) >= MaxInvites {
		s.mu.Unlock()
		return Invite{}, errorf(CodeTooManyInvites, "%d join codes wait to be used", MaxInvites)
	}
	inv := invite{room: id, name: name, expires: now.Add(s.cfg.InviteTTL)}
	s.invites[sha256.Sum256(secret[:])] = inv
	s.mu.Unlock()
	code := strings.Join([]string{codePrefix, id, string(s.key.ID()), base64.RawURLEncoding.EncodeToString(secret[:])}, ".")
	s.log.Info("room invite made", "room", id, "expiresAt", inv.expires.UTC())
	return Invite{Room: id, Code: code, Expires: inv.expires.UTC()}, nil
}

func validName(name string) error {
	if len(name) > room.MaxTitleBytes || !utf8.ValidString(name) || strings.ContainsFunc(name, isControl) {
		return errorf(room.CodeInvalidRequest, "a name is at most %d bytes of UTF-8 without control characters", room.MaxTitleBytes)
	}
	return nil
}

// parseCode splits a join code. Every malformed code is the same invalid_join_code.
func parseCode(code string) (id string, owner room.HostID, secret []byte, err error) {
	bad := errorf(CodeInvalidJoinCode, "the join code is malformed, unknown, used or expired")
	if len(code) > MaxJoinCodeBytes {
		return "", "", nil, bad
	}
	parts := strings.Split(code, ".")
	if len(parts) != 4 || parts[0] != codePrefix || !room.ValidRoomID(parts[1]) || !room.HostID(parts[2]).Valid() {
		return "", "", nil, bad
	}
	// Only the exact encoding of the secret is the code (FuzzParseCode found one with CRs
	// inside, which strict decoding alone takes).
	secret, derr := room.DecodeBase64(base64.RawURLEncoding, parts[3])
	if derr != nil || len(secret) != secretBytes {
		return "", "", nil, bad
	}
	return parts[1], room.HostID(parts[2]), secret, nil
}

// joinRequest asks a room's owner to add the signing host to the roster or, with Leave, to
// take it out: a member that left tells the owner, so that the roster does not keep it.
type joinRequest struct {
	Room string      `json:"room"`
	Host room.HostID `json:"host"`
	// Secret is the join code's secret, base64url; empty in a leave.
	Secret string `json:"secret"`
	Leave  bool   `json:"leave,omitempty"`
	Time   int64  `json:"time"`
	Sig    string `json:"sig"`
}

// joinReply is the owner's answer: an error code, or the roster that now lists the joiner,
// signed by the owner.
type joinReply struct {
	Code   string          `json:"code,omitempty"`
	Roster json.RawMessage `json:"roster,omitempty"`
}

// joinMessage is what a join or leave request's signature covers; the two have domains of
// their own, so that neither signature stands for the other.
func joinMessage(r *joinRequest) []byte {
	msg := []byte(joinDomain)
	if r.Leave {
		msg = []byte(leaveDomain)
	}
	for _, f := range []string{r.Room, string(r.Host)} {
		msg = binary.BigEndian.AppendUint32(msg, uint32(len(f)))
		msg = append(msg, f...)
	}
	if !r.Leave {
		digest := sha256.Sum256([]byte(r.Secret))
		msg = append(msg, digest[:]...)
	}
	return binary.BigEndian.AppendUint64(msg, uint64(r.Time))
}

func joinSubject(roomID string, owner room.HostID) string {
	return "airlock.room." + roomID + ".join." + string(owner)
}

// Join joins the room a join code names: it asks the owner, over the bus, to add this host to
// the roster, checks that the roster the owner signs lists it, and follows the room.
func (s *Service) Join(ctx context.Context, code string) (Room, error) {
	id, owner, secret, err := parseCode(code)
	if err != nil {
		return Room{}, err
	}
	s.mu.Lock()
	_, exists := s.joined[id]
	s.mu.Unlock()
	if exists {
		return Room{}, errorf(CodeRoomExists, "this host is already in that room")
	}
	if owner == s.key.ID() {
		return Room{}, errorf(CodeInvalidJoinCode, "the join code is malformed, unknown, used or expired")
	}
	req := joinRequest{Room: id, Host: s.key.ID(), Secret: base64.RawURLEncoding.EncodeToString(secret), Time: s.now().UnixMilli()}
	req.Sig = base64.StdEncoding.EncodeToString(s.key.Sign(joinMessage(&req)))
	ctx, cancel := context.WithTimeout(ctx, busTimeout)
	defer cancel()
	data, err := s.askOwner(ctx, joinSubject(id, owner), marshal(req))
	switch {
	case errors.Is(err, busport.ErrNoResponders), errors.Is(err, busport.ErrTimeout):
		return Room{}, errorf(room.CodeUnavailable, "the room's owner is not on the bus")
	case err != nil:
		return Room{}, errorf(room.CodeUnavailable, "bus failure")
	}
	var rep joinReply
	if len(data) > maxJoinBytes || ndjson.Decode(data, &rep, ndjson.Closed) != nil {
		return Room{}, errorf(room.CodeInvalidReply, "the owner's answer is malformed")
	}
	switch rep.Code {
	case "":
	case room.CodeUnauthorized:
		// The owner checks the request's signature and its time: with this host's own key,
		// only the time can fail, and the code is not used up.
		return Room{}, errorf(rep.Code, "the room's owner refused the join request's time: this host's clock and the owner's differ by more than %v (the join code stays valid)", room.ClockWindow)
	default:
		return Room{}, errorf(rep.Code, "the room's owner refused the join")
	}
	ros, err := room.OpenRoster(rep.Roster, owner)
	if err != nil || ros.Room != id || !ros.Has(s.key.ID()) {
		return Room{}, errorf(room.CodeInvalidReply, "the owner's roster does not list this host")
	}
	rec := store.RoomRecord{ID: id, Title: ros.Title, Owner: string(owner)}
	if err := s.cfg.Store.PutRoom(rec); err != nil {
		return Room{}, err
	}
	if err := s.dir.Trust(id, owner); err != nil {
		s.forget(ctx, id)
		return Room{}, asError(err)
	}
	if _, err := s.dir.ApplyRoster(id, rep.Roster); err != nil {
		s.forget(ctx, id)
		return Room{}, asError(err)
	}
	if err := s.rejoin(ctx, rec); err != nil {
		s.forget(ctx, id)
		return Room{}, asError(err)
	}
	s.log.Info("room joined", "room", id, "owner", owner)
	return s.summary(rec), nil
}

// Pauses between the join requests askOwner sends while nobody serves the owner's subject.
const (
	joinBackoff    = 20 * time.Millisecond
	joinBackoffMax = 500 * time.Millisecond
)

// askOwner sends a join request to subject and returns the owner's answer. A "no responders"
// answer is asked again, after a pause growing from joinBackoff to joinBackoffMax, until ctx
// ends: the bus gives it at once while it knows no subscription to the subject, and a host on
// a leaf node that has just connected (or reconnected) to its hub learns the hub's
// subscriptions, the owner's among them, a moment after the connection is up. An owner that
// is away is reported when ctx ends.
func (s *Service) askOwner(ctx context.Context, subject string, payload []byte) ([]byte, error) {
	pause := joinBackoff
	for {
		data, err := s.conn.Request(ctx, subject, payload)
		if !errors.Is(err, busport.ErrNoResponders) {
			return data, err
		}
		if s.cfg.noResponders != nil {
			s.cfg.noResponders()
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, err
		case <-t.C:
		}
		pause = min(2*pause, joinBackoffMax)
	}
}

// joinHandler answers join requests to the rooms this host owns.
type joinHandler Service

func (h *joinHandler) Serve(ctx context.Context, subject string, payload []byte) []byte {
	return marshal((*Service)(h).admit(ctx, subject, payload, (*Service)(h).now()))
}

func (h *joinHandler) Overloaded(string, []byte) []byte {
	return marshal(joinReply{Code: room.CodeBusy})
}

// admit checks a join request and adds its host to the roster: the signature must be the
// joining host's, its time within the clock window, and its secret that of an unexpired,
// unused invite of the room, which it uses up whatever follows.
func (s *Service) admit(ctx context.Context, subject string, payload []byte, now time.Time) joinReply {
	refuse := joinReply{Code: CodeInvalidJoinCode}
	req, secret, code := decodeJoin(subject, s.key.ID(), payload, now)
	if code != "" {
		return joinReply{Code: code}
	}
	if req.Leave {
		if _, err := s.removeMember(ctx, req.Room, req.Host, "room member left"); err != nil {
			return joinReply{Code: codeOf(err)}
		}
		return joinReply{}
	}
	h := sha256.Sum256(secret)
	s.mu.Lock()
	inv, ok := s.invites[h]
	delete(s.invites, h)
	rec, joined := s.joined[req.Room]
	s.mu.Unlock()
	if !ok || inv.room != req.Room || !now.Before(inv.expires) || !joined || room.HostID(rec.Owner) != s.key.ID() {
		return refuse
	}
	ctx, cancel := context.WithTimeout(ctx, busTimeout)
	defer cancel()
	rec, err := s.addMember(ctx, req.Room, req.Host, inv.name)
	if err != nil {
		return joinReply{Code: codeOf(err)}
	}
	data, err := room.SignRoster(s.key, rosterOf(rec))
	if err != nil {
		return joinReply{Code: room.CodeInternal}
	}
	s.log.Info("room member joined", "room", req.Room, "host", req.Host)
	return joinReply{Roster: data}
}

// decodeJoin decodes and checks a join request to owner on subject at now: strictly decoded
// and bounded, addressed to owner on the subject of its room, signed by the joining host
// within the clock window, with a secret of the code's size. It returns the request and its
// secret, or the code to answer with.
func decodeJoin(subject string, owner room.HostID, payload []byte, now time.Time) (*joinRequest, []byte, string) {
	var req joinRequest
	if len(payload) > maxJoinBytes || ndjson.Decode(payload, &req, ndjson.Closed) != nil ||
		!room.ValidRoomID(req.Room) || !req.Host.Valid() || subject != joinSubject(req.Room, owner) {
		return nil, nil, room.CodeInvalidRequest
	}
	sig, err := room.DecodeBase64(base64.StdEncoding, req.Sig)
	t := time.UnixMilli(req.Time)
	if err != nil || !ed25519.Verify(req.Host.PublicKey(), joinMessage(&req), sig) ||
		t.Before(now.Add(-room.ClockWindow)) || t.After(now.Add(room.ClockWindow)) {
		return nil, nil, room.CodeUnauthorized
	}
	if req.Leave {
		if req.Secret != "" {
			return nil, nil, room.CodeInvalidRequest
		}
		return &req, nil, ""
	}
	secret, err := room.DecodeBase64(base64.RawURLEncoding, req.Secret)
	if err != nil || len(secret) != secretBytes {
		return nil, nil, CodeInvalidJoinCode
	}
	return &req, secret, ""
}

// addMember adds host to the roster of room id (owned by this host), persists it and
// publishes it.
func (s *Service) addMember(ctx context.Context, id string, host room.HostID, name string) (store.RoomRecord, error) {
	s.rosterMu.Lock()
	defer s.rosterMu.Unlock()
	s.mu.Lock()
	rec, ok := s.joined[id]
	if !ok {
		s.mu.Unlock()
		return rec, errorf(CodeInvalidJoinCode, "the join code is malformed, unknown, used or expired")
	}
	next := rec
	next.Members = append([]store.RoomMember(nil), rec.Members...)
	found := false
	for i, m := range next.Members {
		if m.Host == string(host) {
			next.Members[i].Name, found = name, true
		}
	}
	if !found {
		if len(next.Members) >= room.MaxMembers {
			s.mu.Unlock()
			return rec, errorf(room.CodeBusy, "the room has %d members", room.MaxMembers)
		}
		next.Members = append(next.Members, store.RoomMember{Host: string(host), Name: name})
	}
	next.Version++
	s.mu.Unlock()
	if err := s.cfg.Store.PutRoom(next); err != nil {
		return rec, err
	}
	if err := s.sync.PublishRoster(ctx, rosterOf(next)); err != nil {
		return rec, asError(err)
	}
	s.mu.Lock()
	s.joined[id] = next
	s.mu.Unlock()
	return next, nil
}

// RemoveMember takes host out of room id, which this host must own, and reports whether host
// was a member. The owner signs and publishes a roster without it, so that from then on every
// provider refuses its calls and withholds results of calls it made before (the roster
// decides each call at dispatch and at result), the bus takes the room's broker permissions
// from its user, and the host itself forgets the room when it reads the roster, as it would
// a closed room (Config.RoomClosed). A later join code can invite it again.
func (s *Service) RemoveMember(ctx context.Context, id string, host room.HostID) (bool, error) {
	return s.removeMember(ctx, id, host, "room member removed")
}

// removeMember is RemoveMember, logged as what.
func (s *Service) removeMember(ctx context.Context, id string, host room.HostID, what string) (bool, error) {
	s.rosterMu.Lock()
	defer s.rosterMu.Unlock()
	rec, err := s.record(id)
	if err != nil {
		return false, err
	}
	if room.HostID(rec.Owner) != s.key.ID() {
		return false, errorf(CodeNotOwner, "only the room's owner removes members")
	}
	if host == s.key.ID() {
		return false, errorf(room.CodeInvalidRequest, "the owner cannot remove itself; close the room instead")
	}
	i := slices.IndexFunc(rec.Members, func(m store.RoomMember) bool { return m.Host == string(host) })
	if i < 0 {
		return false, nil
	}
	next := rec
	next.Members = slices.Delete(slices.Clone(rec.Members), i, i+1)
	next.Version++
	if err := s.cfg.Store.PutRoom(next); err != nil {
		return false, err
	}
	ctx, cancel := context.WithTimeout(ctx, busTimeout)
	defer cancel()
	if err := s.sync.PublishRoster(ctx, rosterOf(next)); err != nil {
		return false, asError(err)
	}
	s.mu.Lock()
	s.joined[id] = next
	s.mu.Unlock()
	s.log.Info(what, "room", id, "host", host)
	return true, nil
}

// tellOwnerLeft tells the owner of room rec that this host left it, so that it takes this
// host out of its roster; best effort, within leaveTimeout: an owner that is away, or of an
// older airlock (which refuses the request), keeps this host listed until it removes it.
func (s *Service) tellOwnerLeft(ctx context.Context, rec store.RoomRecord) {
	req := joinRequest{Room: rec.ID, Host: s.key.ID(), Leave: true, Time: s.now().UnixMilli()}
	req.Sig = base64.StdEncoding.EncodeToString(s.key.Sign(joinMessage(&req)))
	ctx, cancel := context.WithTimeout(ctx, leaveTimeout)
	defer cancel()
	data, err := s.conn.Request(ctx, joinSubject(rec.ID, room.HostID(rec.Owner)), marshal(req))
	var rep joinReply
	if err == nil && ndjson.Decode(data, &rep, ndjson.Closed) == nil && rep.Code == "" {
		return
	}
	s.log.Info("the room's owner was not told of the leave: it lists this host until it removes it", "room", rec.ID, "owner", rec.Owner)
}
