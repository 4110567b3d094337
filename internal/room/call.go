package room

import (
	"bytes"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"strconv"
	"time"

	"github.com/airlockhq/airlock/internal/busport"
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
// carry link MACs instead of Ed25519 signatures, 3 since their envelope travels in header
// fields and the args or result alone in the data.
const wireVersion = "3"

// Header fields of calls and replies on the bus (docs/rooms.md, "On the bus"). Names are
// case-sensitive; every field holds exactly one value.
const (
	hdrVersion    = "v"
	hdrRoom       = "room"
	hdrProvider   = "provider"
	hdrCaller     = "caller"
	hdrCapability = "capability"
	hdrOperation  = "operation"
	hdrAction     = "action"
	hdrRequestID  = "requestId"
	hdrTime       = "time"
	hdrTimeout    = "timeoutMs"
	hdrCode       = "code"
	hdrMAC        = "mac"
	hdrSig        = "sig"
)

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
func sealCall(key *HostKey, link *linkKeys, c *Call, now time.Time) (busport.Msg, error) {
	c.Caller = key.ID()
	c.Time = time.UnixMilli(now.UnixMilli())
	if c.Args != nil {
		// The bus encoding compacts the args; the digest is of what travels.
		compact, err := ndjson.AppendCompact(nil, c.Args)
		if err != nil {
			return busport.Msg{}, newError(CodeInvalidRequest, "call: args must be a JSON object")
		}
		c.Args = compact
	}
	if err := c.check(); err != nil {
		return busport.Msg{}, err
	}
	c.MAC = link.macCall(c.AuthBytes())
	return EncodeCall(c)
}

// EncodeCall encodes an authenticated call for the bus: its envelope in header fields, its
// args (nothing, for observe) as the data.
func EncodeCall(c *Call) (busport.Msg, error) {
	h := map[string][]string{
		hdrVersion: {wireVersion}, hdrRoom: {c.Room}, hdrProvider: {string(c.Provider)}, hdrCaller: {string(c.Caller)},
		hdrCapability: {c.Capability}, hdrOperation: {string(c.Operation)}, hdrRequestID: {c.RequestID},
		hdrTime: {strconv.FormatInt(c.Time.UnixMilli(), 10)}, hdrTimeout: {strconv.FormatInt(c.Timeout.Milliseconds(), 10)},
		hdrMAC: {base64.StdEncoding.EncodeToString(c.MAC)},
	}
	if c.Action != "" {
		h[hdrAction] = []string{c.Action}
	}
	m := busport.Msg{Header: h, Data: c.Args}
	if headerBytes(h)+len(c.Args) > MaxCallBytes {
		return busport.Msg{}, newError(CodeTooLarge, "call over MaxCallBytes")
	}
	return m, nil
}

// callFields and replyFields are the header fields a call and a reply may carry.
var (
	callFields = map[string]bool{hdrVersion: true, hdrRoom: true, hdrProvider: true, hdrCaller: true, hdrCapability: true,
		hdrOperation: true, hdrAction: true, hdrRequestID: true, hdrTime: true, hdrTimeout: true, hdrMAC: true}
	replyFields = map[string]bool{hdrVersion: true, hdrRoom: true, hdrProvider: true, hdrCaller: true, hdrRequestID: true,
		hdrCode: true, hdrMAC: true, hdrSig: true}
)

// checkHeader refuses a header with a field outside known (a case variant of a known name
// is another name, so it is refused too), a field repeated or empty, or no version field of
// this wire version.
func checkHeader(h map[string][]string, known map[string]bool) bool {
	for k, vs := range h {
		if !known[k] || len(vs) != 1 || vs[0] == "" {
			return false
		}
	}
	return field(h, hdrVersion) == wireVersion
}

// field is the value of a header field, or "" when it is absent.
func field(h map[string][]string, name string) string {
	if vs := h[name]; len(vs) > 0 {
		return vs[0]
	}
	return ""
}

// headerBytes is the size of a header's fields, as a bound counts them.
func headerBytes(h map[string][]string) int {
	n := 0
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return n
}

// millis parses a time or timeout field: decimal digits, no sign and no leading zero, up to
// 16 digits (2^50 ms is 35,000 years).
func millis(s string) (int64, bool) {
	if len(s) == 0 || len(s) > 16 || (s[0] == '0' && len(s) > 1) {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

// DecodeCall parses a call from the bus strictly: the header holds each known field once,
// and nothing else (a case-variant or unknown field, a repeated or empty one, is refused);
// every field's grammar and bound is checked; the data is the args, one JSON object without
// duplicate keys (nothing, for observe). It does not verify the MAC: the provider does, with
// the link key of the caller the call names. The args are a copy, not a slice of m's data.
func DecodeCall(m busport.Msg) (*Call, error) {
	if headerBytes(m.Header)+len(m.Data) > MaxCallBytes {
		return nil, newError(CodeTooLarge, "call over MaxCallBytes")
	}
	h := m.Header
	if !checkHeader(h, callFields) {
		return nil, newError(CodeInvalidRequest, "malformed call")
	}
	mac, err := DecodeBase64(base64.StdEncoding, field(h, hdrMAC))
	if err != nil || len(mac) != sha256.Size {
		return nil, newError(CodeInvalidRequest, "call: malformed MAC")
	}
	t, okT := millis(field(h, hdrTime))
	timeout, okD := millis(field(h, hdrTimeout))
	if !okT || !okD || timeout <= 0 || timeout > MaxCallTimeout.Milliseconds() || t <= 0 || t > 1<<50 {
		return nil, newError(CodeInvalidRequest, "call: bad time or timeout")
	}
	c := &Call{
		Room: field(h, hdrRoom), Provider: HostID(field(h, hdrProvider)), Caller: HostID(field(h, hdrCaller)),
		Capability: field(h, hdrCapability), Operation: Operation(field(h, hdrOperation)), Action: field(h, hdrAction),
		RequestID: field(h, hdrRequestID), Time: time.UnixMilli(t), Timeout: time.Duration(timeout) * time.Millisecond, MAC: mac,
	}
	if len(m.Data) > 0 {
		if len(m.Data) <= MaxArgsBytes && ndjson.Valid(m.Data) != nil {
			return nil, newError(CodeInvalidRequest, "call: args must be a JSON object")
		}
		c.Args = bytes.Clone(m.Data)
	}
	if err := c.check(); err != nil {
		return nil, err
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

// sealReply authenticates and encodes r as key's host, with link's reply key, or with the
// host key when link is nil: its envelope in header fields, its result (nothing, for an
// error) as the data.
func sealReply(key *HostKey, link *linkKeys, r *Reply) busport.Msg {
	r.Provider = key.ID()
	h := map[string][]string{
		hdrVersion: {wireVersion}, hdrRoom: {r.Room}, hdrProvider: {string(r.Provider)}, hdrCaller: {string(r.Caller)},
		hdrRequestID: {r.RequestID},
	}
	if r.Code != "" {
		h[hdrCode] = []string{r.Code}
	}
	if link != nil {
		r.MAC, r.Sig = link.macReply(r.authBytes()), nil
		h[hdrMAC] = []string{base64.StdEncoding.EncodeToString(r.MAC)}
	} else {
		r.MAC, r.Sig = nil, key.Sign(r.authBytes())
		h[hdrSig] = []string{base64.StdEncoding.EncodeToString(r.Sig)}
	}
	return busport.Msg{Header: h, Data: r.Result}
}

// openReply decodes a reply strictly, as DecodeCall does a call, and checks that it answers c
// and is authenticated by c's provider: a MAC under link's reply key, or the provider's
// host-key signature. A reply with a code has no data; one without has a result, one JSON
// value without duplicate keys.
func openReply(m busport.Msg, c *Call, link *linkKeys) (*Reply, error) {
	if headerBytes(m.Header)+len(m.Data) > MaxReplyBytes {
		return nil, newError(CodeInvalidReply, "reply over MaxReplyBytes")
	}
	h := m.Header
	if !checkHeader(h, replyFields) {
		return nil, newError(CodeInvalidReply, "malformed reply")
	}
	r := &Reply{Room: field(h, hdrRoom), Provider: HostID(field(h, hdrProvider)), Caller: HostID(field(h, hdrCaller)),
		RequestID: field(h, hdrRequestID), Code: field(h, hdrCode)}
	if len(m.Data) > 0 {
		r.Result = m.Data
	}
	if (r.Code != "" && (r.Result != nil || !validCode(r.Code))) || (r.Code == "" && (r.Result == nil || ndjson.Valid(r.Result) != nil)) {
		return nil, newError(CodeInvalidReply, "reply with an inconsistent outcome")
	}
	if r.Room != c.Room || r.Provider != c.Provider || r.Caller != c.Caller || r.RequestID != c.RequestID {
		return nil, newError(CodeInvalidReply, "reply to another call")
	}
	var ok bool
	mac, sig := field(h, hdrMAC), field(h, hdrSig)
	switch {
	case mac != "" && sig == "" && link != nil:
		got, err := DecodeBase64(base64.StdEncoding, mac)
		r.MAC = got
		ok = err == nil && hmac.Equal(link.macReply(r.authBytes()), got)
	case sig != "" && mac == "":
		got, err := DecodeBase64(base64.StdEncoding, sig)
		r.Sig = got
		ok = err == nil && ed25519.Verify(c.Provider.PublicKey(), r.authBytes(), got)
	}
	if !ok {
		return nil, newError(CodeInvalidReply, "reply not authenticated by the provider")
	}
	if len(r.Result) > MaxResultBytes {
		return nil, newError(CodeTooLarge, "result over MaxResultBytes")
	}
	return r, nil
}
