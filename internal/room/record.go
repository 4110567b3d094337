package room

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"time"

	"github.com/airlockhq/airlock/internal/ndjson"
)

// MaxRecordBytes bounds one encoded room record.
const MaxRecordBytes = 32 << 10

// Kinds of room record. Each kind says whose key must sign it: a roster the room's owner, a
// presence or a projection the host it describes.
const (
	KindRoster     = "roster"
	KindPresence   = "presence"
	KindProjection = "projection"
)

// recordDomain separates record signatures from call and reply signatures.
const recordDomain = "airlock-room-record-v1\n"

// wireRecord is a signed record on the bus: the signer's id, the body exactly as signed, and
// the signature over the domain, kind, signer and body.
type wireRecord struct {
	V      int             `json:"v"`
	Kind   string          `json:"kind"`
	Signer HostID          `json:"signer"`
	Body   json.RawMessage `json:"body"`
	Sig    string          `json:"sig"`
}

func recordMessage(kind string, signer HostID, body []byte) []byte {
	msg := make([]byte, 0, len(recordDomain)+len(kind)+len(signer)+len(body)+2)
	msg = append(msg, recordDomain...)
	msg = append(msg, kind...)
	msg = append(msg, '\n')
	msg = append(msg, signer...)
	msg = append(msg, '\n')
	return append(msg, body...)
}

// signRecord encodes body as a record of kind signed by key.
func signRecord(key *HostKey, kind string, body any) ([]byte, error) {
	b, err := marshal(body)
	if err != nil {
		return nil, err
	}
	sig := key.Sign(recordMessage(kind, key.ID(), b))
	out, err := marshal(wireRecord{V: 1, Kind: kind, Signer: key.ID(), Body: b, Sig: base64.StdEncoding.EncodeToString(sig)})
	if err != nil {
		return nil, err
	}
	if len(out) > MaxRecordBytes {
		return nil, newError(CodeTooLarge, "record over MaxRecordBytes")
	}
	return out, nil
}

// openRecord checks a record's envelope, kind and signature (by signer, when signer is not
// empty) and decodes its body into v strictly. It returns the signer.
func openRecord(data []byte, kind string, signer HostID, v any) (HostID, error) {
	if len(data) > MaxRecordBytes {
		return "", newError(CodeInvalidRecord, "record over MaxRecordBytes")
	}
	var w wireRecord
	if err := ndjson.Decode(data, &w, ndjson.Closed); err != nil || w.V != 1 || w.Kind != kind || !w.Signer.Valid() {
		return "", newError(CodeInvalidRecord, "malformed "+kind+" record")
	}
	if signer != "" && w.Signer != signer {
		return "", newError(CodeInvalidRecord, kind+" record signed by another host")
	}
	sig, err := base64.StdEncoding.Strict().DecodeString(w.Sig)
	if err != nil || len(sig) != ed25519.SignatureSize ||
		!ed25519.Verify(w.Signer.PublicKey(), recordMessage(kind, w.Signer, w.Body), sig) {
		return "", newError(CodeInvalidRecord, kind+" record with a bad signature")
	}
	if err := ndjson.Decode(w.Body, v, ndjson.Closed); err != nil {
		return "", newError(CodeInvalidRecord, "malformed "+kind+" body")
	}
	return w.Signer, nil
}

// SignRoster encodes r as a roster record signed by key, which must be the room's owner.
func SignRoster(key *HostKey, r Roster) ([]byte, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	if r.Owner != key.ID() {
		return nil, newError(CodeInvalidRecord, "a roster is signed by its room's owner")
	}
	return signRecord(key, KindRoster, r)
}

// OpenRoster verifies a roster record against the owner the reader trusts for the room and
// decodes it.
func OpenRoster(data []byte, owner HostID) (Roster, error) {
	var r Roster
	if _, err := openRecord(data, KindRoster, owner, &r); err != nil {
		return Roster{}, err
	}
	if err := r.Validate(); err != nil {
		return Roster{}, err
	}
	if r.Owner != owner {
		return Roster{}, newError(CodeInvalidRecord, "roster of another owner")
	}
	return r, nil
}

// Presence says a host is in a room at a time. A presence record lives in a bucket whose
// entries expire (PresenceTTL); the host rewrites it every PresenceRefresh.
type Presence struct {
	Room string `json:"room"`
	Host HostID `json:"host"`
	// Time is the writer's clock at writing, Unix milliseconds.
	Time int64 `json:"time"`
}

// SignPresence encodes a presence record of key's host in room at t.
func SignPresence(key *HostKey, room string, t time.Time) ([]byte, error) {
	if !ValidRoomID(room) {
		return nil, newError(CodeInvalidRecord, "presence: bad room id")
	}
	return signRecord(key, KindPresence, Presence{Room: room, Host: key.ID(), Time: t.UnixMilli()})
}

// OpenPresence verifies a presence record of host and decodes it.
func OpenPresence(data []byte, host HostID) (Presence, error) {
	var p Presence
	if _, err := openRecord(data, KindPresence, host, &p); err != nil {
		return Presence{}, err
	}
	if p.Host != host || !ValidRoomID(p.Room) {
		return Presence{}, newError(CodeInvalidRecord, "presence of another host")
	}
	return p, nil
}

// Projection is what a provider shows a room of its publications: discovery for members,
// never authority (the provider checks its own table on every call).
type Projection struct {
	Room         string        `json:"room"`
	Provider     HostID        `json:"provider"`
	Version      uint64        `json:"version"`
	Publications []Publication `json:"publications"`
}

// SignProjection encodes p as a projection record signed by key, which must be p's provider.
func SignProjection(key *HostKey, p Projection) ([]byte, error) {
	if p.Provider != key.ID() || !ValidRoomID(p.Room) || len(p.Publications) > MaxPublicationsPerRoom {
		return nil, newError(CodeInvalidRecord, "projection: bad room, provider or size")
	}
	for i := range p.Publications {
		if err := p.Publications[i].Validate(); err != nil || p.Publications[i].Room != p.Room {
			return nil, newError(CodeInvalidRecord, "projection: bad publication")
		}
	}
	if p.Publications == nil {
		p.Publications = []Publication{}
	}
	return signRecord(key, KindProjection, p)
}

// OpenProjection verifies a projection record of provider and decodes it.
func OpenProjection(data []byte, provider HostID) (Projection, error) {
	var p Projection
	if _, err := openRecord(data, KindProjection, provider, &p); err != nil {
		return Projection{}, err
	}
	if p.Provider != provider || !ValidRoomID(p.Room) || len(p.Publications) > MaxPublicationsPerRoom {
		return Projection{}, newError(CodeInvalidRecord, "projection of another provider")
	}
	for i := range p.Publications {
		if err := p.Publications[i].Validate(); err != nil || p.Publications[i].Room != p.Room {
			return Projection{}, newError(CodeInvalidRecord, "projection: bad publication")
		}
	}
	return p, nil
}
