package room

import (
	"bytes"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"time"

	"github.com/airlockhq/airlock/internal/ndjson"
)

// Bounds of a call, from the facts of the original room (free4chat-adapter-facts §5.1).
const (
	// MaxArgsBytes bounds an invoke's args at the room edge; the adapter protocol's own
	// tighter bound applies inside the provider.
	MaxArgsBytes = 8 << 10
	// MaxResultBytes bounds a result returned to a caller.
	MaxResultBytes = 16 << 10
	// MaxCallBytes bounds an encoded call: the args plus an envelope of bounded fields.
	MaxCallBytes = MaxArgsBytes + 2<<10
	// MaxReplyBytes bounds an encoded reply: the result plus its envelope.
	MaxReplyBytes = MaxResultBytes + 2<<10
	// CallTimeout is a call's deadline without a per-call approval wait.
	CallTimeout = 10 * time.Second
	// MaxCallTimeout is the longest deadline a caller may declare: a call that waits for its
	// approval, then runs.
	MaxCallTimeout = CallTimeout + ApprovalTimeout
	// ClockWindow is how far a call's signing time (the caller's clock when it authenticated
	// the call) may lie from the provider's clock, either way. It is half the duplicate window, so any call the provider would still accept is
	// still remembered when it comes again.
	ClockWindow = 30 * time.Second
)

// callDomain and replyDomain separate the canonical encodings of calls and replies from each
// other and from records; the link keys separate them again (see link.go).
const (
	callDomain  = "airlock-room-call-v2"
	replyDomain = "airlock-room-reply-v2"
)

// wireVersion is the version of the call and reply encodings: 2 since calls and replies
// carry link MACs instead of Ed25519 signatures.
const wireVersion = 2

// Call is an authenticated call request: what the caller's host authenticates and the
// provider verifies.
type Call struct {
	Room       string
	Provider   HostID
	Caller     HostID
	Capability string
	Operation  Operation
	// Action is empty for observe.
	Action string
	// Args is the invoke's JSON object, exactly as authenticated through its digest; nil for
	// observe.
	Args      json.RawMessage
	RequestID string
	// Time is the caller's clock when it authenticated the call, to the millisecond.
	Time time.Time
	// Timeout is how long the caller waits from Time; the provider bounds its work by it.
	Timeout time.Duration
	// MAC is the HMAC-SHA256 of AuthBytes under the call key of the link from the caller to
	// the provider.
	MAC []byte
}

// wireCall is a Call on the bus.
type wireCall struct {
	V          int             `json:"v"`
	Room       string          `json:"room"`
	Provider   HostID          `json:"provider"`
	Caller     HostID          `json:"caller"`
	Capability string          `json:"capability"`
	Operation  Operation       `json:"operation"`
	Action     string          `json:"action,omitempty"`
	Args       json.RawMessage `json:"args,omitempty"`
	ArgsDigest string          `json:"argsDigest"`
	RequestID  string          `json:"requestId"`
	Time       int64           `json:"time"`
	TimeoutMS  int64           `json:"timeoutMs"`
	MAC        string          `json:"mac"`
}

// argsDigest is the SHA-256 of the args bytes (of nothing, for observe).
func argsDigest(args []byte) [32]byte { return sha256.Sum256(args) }

// appendField appends a length-prefixed field: the canonical encoding cannot be made
// ambiguous by a field that contains another's text.
func appendField(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// AuthBytes is the canonical encoding the caller's MAC covers: the domain and every field,
// length-prefixed, the args by their SHA-256 digest, times as big-endian milliseconds. The
// provider's duplicate window also compares calls by it.
func (c *Call) AuthBytes() []byte {
	d := argsDigest(c.Args)
	b := make([]byte, 0, 256)
	b = appendField(b, callDomain)
	b = appendField(b, c.Room)
	b = appendField(b, string(c.Provider))
	b = appendField(b, string(c.Caller))
	b = appendField(b, c.Capability)
	b = appendField(b, string(c.Operation))
	b = appendField(b, c.Action)
	b = append(b, d[:]...)
	b = appendField(b, c.RequestID)
	b = binary.BigEndian.AppendUint64(b, uint64(c.Time.UnixMilli()))
	return binary.BigEndian.AppendUint64(b, uint64(c.Timeout.Milliseconds()))
}

// check validates the call's fields: grammars, operation shape and bounds. It does not check
// the MAC.
func (c *Call) check() error {
	switch {
	case !ValidRoomID(c.Room), !c.Provider.Valid(), !c.Caller.Valid(), !ValidCapabilityID(c.Capability),
		!ValidRequestID(c.RequestID):
		return newError(CodeInvalidRequest, "call: bad room, host, capability or request id")
	case c.Timeout <= 0 || c.Timeout > MaxCallTimeout || c.Timeout%time.Millisecond != 0:
		return newError(CodeInvalidRequest, "call: timeout outside (0, MaxCallTimeout]")
	case c.Time.UnixMilli() <= 0:
		return newError(CodeInvalidRequest, "call: bad time")
	}
	switch c.Operation {
	case Observe:
		if c.Action != "" || c.Args != nil {
			return newError(CodeInvalidRequest, "call: observe takes no action or args")
		}
	case Invoke:
		if !ValidAction(c.Action) {
			return newError(CodeInvalidRequest, "call: bad action")
		}
		if len(c.Args) > MaxArgsBytes {
			return newError(CodeTooLarge, "call: args over MaxArgsBytes")
		}
		if t := bytes.TrimLeft(c.Args, " \t\r\n"); len(t) == 0 || t[0] != '{' || !json.Valid(c.Args) {
			return newError(CodeInvalidRequest, "call: args must be a JSON object")
		}
	default:
		return newError(CodeInvalidRequest, "call: unknown operation")
	}
	return nil
}

// sealCall fills c's Caller, Time (to the millisecond) and MAC as key's host at now, with
// the keys of the link from key's host to c.Provider, and returns the encoded call.
func sealCall(key *HostKey, link *linkKeys, c *Call, now time.Time) ([]byte, error) {
	c.Caller = key.ID()
	c.Time = time.UnixMilli(now.UnixMilli())
	if c.Args != nil {
		// The bus encoding compacts the args; the digest is of what travels.
		compact, err := ndjson.AppendCompact(nil, c.Args)
		if err != nil {
			return nil, newError(CodeInvalidRequest, "call: args must be a JSON object")
		}
		c.Args = compact
	}
	if err := c.check(); err != nil {
		return nil, err
	}
	c.MAC = link.macCall(c.AuthBytes())
	return EncodeCall(c)
}

// EncodeCall encodes an authenticated call for the bus.
func EncodeCall(c *Call) ([]byte, error) {
	d := argsDigest(c.Args)
	out, err := marshal(wireCall{
		V: wireVersion, Room: c.Room, Provider: c.Provider, Caller: c.Caller, Capability: c.Capability,
		Operation: c.Operation, Action: c.Action, Args: c.Args, ArgsDigest: hex.EncodeToString(d[:]),
		RequestID: c.RequestID, Time: c.Time.UnixMilli(), TimeoutMS: c.Timeout.Milliseconds(),
		MAC: base64.StdEncoding.EncodeToString(c.MAC),
	})
	if err != nil {
		return nil, err
	}
	if len(out) > MaxCallBytes {
		return nil, newError(CodeTooLarge, "call over MaxCallBytes")
	}
	return out, nil
}

// DecodeCall parses an encoded call strictly (duplicate, case-variant and unknown keys
// refused; every field's grammar and bound checked; the args digest recomputed). It does not
// verify the MAC: the provider does, with the link key of the caller the call names. The args
// are a copy, not a slice of data.
func DecodeCall(data []byte) (*Call, error) {
	if len(data) > MaxCallBytes {
		return nil, newError(CodeTooLarge, "call over MaxCallBytes")
	}
	var w wireCall
	if err := ndjson.Decode(data, &w, ndjson.Closed); err != nil || w.V != wireVersion {
		return nil, newError(CodeInvalidRequest, "malformed call")
	}
	m, err := base64.StdEncoding.Strict().DecodeString(w.MAC)
	if err != nil || len(m) != sha256.Size {
		return nil, newError(CodeInvalidRequest, "call: malformed MAC")
	}
	if w.TimeoutMS <= 0 || w.TimeoutMS > MaxCallTimeout.Milliseconds() || w.Time <= 0 || w.Time > 1<<50 {
		return nil, newError(CodeInvalidRequest, "call: bad time or timeout")
	}
	c := &Call{
		Room: w.Room, Provider: w.Provider, Caller: w.Caller, Capability: w.Capability,
		Operation: w.Operation, Action: w.Action, RequestID: w.RequestID,
		Time: time.UnixMilli(w.Time), Timeout: time.Duration(w.TimeoutMS) * time.Millisecond, MAC: m,
	}
	if w.Args != nil {
		c.Args = bytes.Clone(w.Args)
	}
	if err := c.check(); err != nil {
		return nil, err
	}
	d := argsDigest(c.Args)
	if w.ArgsDigest != hex.EncodeToString(d[:]) {
		return nil, newError(CodeInvalidRequest, "call: args digest mismatch")
	}
	return c, nil
}

// verifyCall checks c's MAC, over its AuthBytes auth, under the call key of link (from
// c.Caller to c.Provider), and its time against now within ClockWindow.
func verifyCall(c *Call, auth []byte, link *linkKeys, now time.Time) error {
	if !hmac.Equal(link.macCall(auth), c.MAC) {
		return newError(CodeUnauthorized, "call: bad MAC")
	}
	if d := now.Sub(c.Time); d > ClockWindow || d < -ClockWindow {
		return newError(CodeUnauthorized, "call: signing time outside the clock window")
	}
	return nil
}

// Reply is a provider's answer to one call, authenticated by the provider over the call's
// room, caller, request id, outcome and result digest: with the reply key of the link from
// the caller (MAC), or, when the provider knows no link key for the caller it names (the call
// was refused before one was found), with its Ed25519 host key (Sig).
type Reply struct {
	Room      string
	Provider  HostID
	Caller    HostID
	RequestID string
	// Code is empty on success; else the error code and no result.
	Code   string
	Result json.RawMessage
	// Exactly one of MAC and Sig is set.
	MAC []byte
	Sig []byte
}

type wireReply struct {
	V         int             `json:"v"`
	Room      string          `json:"room"`
	Provider  HostID          `json:"provider"`
	Caller    HostID          `json:"caller"`
	RequestID string          `json:"requestId"`
	OK        bool            `json:"ok"`
	Result    json.RawMessage `json:"result,omitempty"`
	Code      string          `json:"code,omitempty"`
	MAC       string          `json:"mac,omitempty"`
	Sig       string          `json:"sig,omitempty"`
}

func (r *Reply) authBytes() []byte {
	d := sha256.Sum256(r.Result)
	b := make([]byte, 0, 256)
	b = appendField(b, replyDomain)
	b = appendField(b, r.Room)
	b = appendField(b, string(r.Provider))
	b = appendField(b, string(r.Caller))
	b = appendField(b, r.RequestID)
	b = appendField(b, r.Code)
	return append(b, d[:]...)
}

// sealReply authenticates and encodes r as key's host: with link's reply key, or with the
// host key when link is nil.
func sealReply(key *HostKey, link *linkKeys, r *Reply) []byte {
	r.Provider = key.ID()
	w := wireReply{
		V: wireVersion, Room: r.Room, Provider: r.Provider, Caller: r.Caller, RequestID: r.RequestID,
		OK: r.Code == "", Result: r.Result, Code: r.Code,
	}
	if link != nil {
		r.MAC, r.Sig = link.macReply(r.authBytes()), nil
		w.MAC = base64.StdEncoding.EncodeToString(r.MAC)
	} else {
		r.MAC, r.Sig = nil, key.Sign(r.authBytes())
		w.Sig = base64.StdEncoding.EncodeToString(r.Sig)
	}
	out, err := marshal(w)
	if err != nil {
		// Every field is a string or already-valid JSON; a failure is a broken invariant.
		panic("room: encoding a reply: " + err.Error())
	}
	return out
}

// openReply decodes a reply strictly and checks that it answers c and is authenticated by
// c's provider: a MAC under link's reply key, or the provider's host-key signature.
func openReply(data []byte, c *Call, link *linkKeys) (*Reply, error) {
	if len(data) > MaxReplyBytes {
		return nil, newError(CodeInvalidReply, "reply over MaxReplyBytes")
	}
	var w wireReply
	if err := ndjson.Decode(data, &w, ndjson.Closed); err != nil || w.V != wireVersion {
		return nil, newError(CodeInvalidReply, "malformed reply")
	}
	if w.OK != (w.Code == "") || (w.Code != "" && (w.Result != nil || !validCode(w.Code))) ||
		(w.OK && w.Result == nil) {
		return nil, newError(CodeInvalidReply, "reply with an inconsistent outcome")
	}
	if w.Room != c.Room || w.Provider != c.Provider || w.Caller != c.Caller || w.RequestID != c.RequestID {
		return nil, newError(CodeInvalidReply, "reply to another call")
	}
	r := &Reply{Room: w.Room, Provider: w.Provider, Caller: w.Caller, RequestID: w.RequestID, Code: w.Code, Result: w.Result}
	var ok bool
	switch {
	case w.MAC != "" && w.Sig == "" && link != nil:
		m, err := base64.StdEncoding.Strict().DecodeString(w.MAC)
		r.MAC = m
		ok = err == nil && hmac.Equal(link.macReply(r.authBytes()), m)
	case w.Sig != "" && w.MAC == "":
		sig, err := base64.StdEncoding.Strict().DecodeString(w.Sig)
		r.Sig = sig
		ok = err == nil && ed25519.Verify(c.Provider.PublicKey(), r.authBytes(), sig)
	}
	if !ok {
		return nil, newError(CodeInvalidReply, "reply not authenticated by the provider")
	}
	if len(r.Result) > MaxResultBytes {
		return nil, newError(CodeTooLarge, "result over MaxResultBytes")
	}
	return r, nil
}
