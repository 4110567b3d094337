package room

import (
	"crypto/ecdh"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"time"

	"github.com/airlockhq/airlock/internal/ndjson"
)

// MaxRecordBytes bounds one encoded room record.
const MaxRecordBytes = 32 << 10

// Kinds of room record. Each kind says whose key must sign it: a roster the room's owner, a
// presence, a projection or a key record the host it describes.
const (
	KindRoster     = "roster"
	KindPresence   = "presence"
	KindProjection = "projection"
	KindKey        = "key"
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
	sig, err := DecodeBase64(base64.StdEncoding, w.Sig)
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

// OpenAnyRoster verifies a roster record against the owner it names, which must have signed
// it, and decodes it: for a reader that trusts no owner of the room yet, such as the embedded
// bus, which keeps the first owner it sees per room to confine the hosts it admits.
func OpenAnyRoster(data []byte) (Roster, error) {
	var r Roster
	signer, err := openRecord(data, KindRoster, "", &r)
	if err != nil {
		return Roster{}, err
	}
	if err := r.Validate(); err != nil {
		return Roster{}, err
	}
	if r.Owner != signer {
		return Roster{}, newError(CodeInvalidRecord, "roster signed by another host than its owner")
	}
	return r, nil
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

// KeyRecord binds a host's static X25519 public key to its identity: the host signs it with
// its Ed25519 key, and a reader verifies it once against the host id, caches the key, and
// verifies again only when the record changes. Calls and replies between two hosts are
// authenticated with keys both derive from their two X25519 keys (see docs/rooms.md, trust).
// Of two records of one host, the later Time wins, so a replayed old record cannot bring
// back a replaced key.
type KeyRecord struct {
	Room string `json:"room"`
	Host HostID `json:"host"`
	// X25519 is the public key, standard padded base64 of 32 bytes.
	X25519 string `json:"x25519"`
	// Time is the writer's clock at writing, Unix milliseconds.
	Time int64 `json:"time"`
}

// publicKey decodes the record's X25519 key.
func (r *KeyRecord) publicKey() (*ecdh.PublicKey, bool) {
	b, err := DecodeBase64(base64.StdEncoding, r.X25519)
	if err != nil || len(b) != 32 {
		return nil, false
	}
	pub, err := ecdh.X25519().NewPublicKey(b)
	return pub, err == nil
}

// SignKeyRecord encodes the key record of key's host in room at t.
func SignKeyRecord(key *HostKey, room string, t time.Time) ([]byte, error) {
	if !ValidRoomID(room) {
		return nil, newError(CodeInvalidRecord, "key record: bad room id")
	}
	return signRecord(key, KindKey, KeyRecord{
		Room: room, Host: key.ID(), X25519: base64.StdEncoding.EncodeToString(key.kxPub[:]), Time: t.UnixMilli(),
	})
}

// OpenKeyRecord verifies a key record of host and decodes it.
func OpenKeyRecord(data []byte, host HostID) (KeyRecord, error) {
	var r KeyRecord
	if _, err := openRecord(data, KindKey, host, &r); err != nil {
		return KeyRecord{}, err
	}
	if _, ok := r.publicKey(); r.Host != host || !ValidRoomID(r.Room) || !ok || r.Time <= 0 {
		return KeyRecord{}, newError(CodeInvalidRecord, "key record of another host or with a bad key")
	}
	return r, nil
}
