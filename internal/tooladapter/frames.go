package tooladapter

// This file owns the frame model and its decoding: the kinds, Identity, Frame and its member
// rules, DecodeFrame and DecodeBoundFrame, and the checks every frame passes.

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"

	"github.com/airlockhq/airlock/internal/ndjson"
	"github.com/airlockhq/airlock/internal/protocol"
)

// Kind is a frame kind.
type Kind string

// The eight frame kinds. Lifecycle kinds never double as operations.
const (
	KindBind    Kind = "bind"    // daemon → adapter: the only frame that carries the handle
	KindBound   Kind = "bound"   // adapter → daemon: echoes operations and limits
	KindInvoke  Kind = "invoke"  // daemon → adapter
	KindResult  Kind = "result"  // adapter → daemon
	KindAbort   Kind = "abort"   // daemon → adapter: targets one in-flight invoke
	KindAborted Kind = "aborted" // adapter → daemon
	KindRevoke  Kind = "revoke"  // daemon → adapter
	KindRevoked Kind = "revoked" // adapter → daemon
)

// Identity is the wire identity every frame carries besides protocolVersion and kind.
type Identity struct {
	AdapterID      string `json:"adapterId"`
	AdapterVersion string `json:"adapterVersion"`
	HostInstanceID string `json:"hostInstanceId"`
	SessionID      string `json:"sessionId"`
	Generation     int64  `json:"generation"`
}

// checkBinding validates the host, session and generation members.
func (id Identity) checkBinding(prefix, code string) *protocol.Error {
	switch {
	case !validText(id.HostInstanceID, MaxHostInstanceIDLen):
		return fieldError(code, prefix+"hostInstanceId", "hostInstanceId must be 1 to %d characters without control characters", MaxHostInstanceIDLen)
	case !validText(id.SessionID, MaxSessionIDLen):
		return fieldError(code, prefix+"sessionId", "sessionId must be 1 to %d characters without control characters", MaxSessionIDLen)
	case id.Generation < 0 || id.Generation > maxSafeInteger:
		return fieldError(code, prefix+"generation", "generation must be an integer from 0 to %d", maxSafeInteger)
	}
	return nil
}

// ErrorBody is the error of a failed result or abort acknowledgement.
type ErrorBody struct {
	Code      string `json:"code"`
	Message   string `json:"message"`
	Retryable bool   `json:"retryable"`
}

// Frame is one adapter protocol frame. Which members a kind carries is fixed:
//
//	bind     Operations, Limits, CapabilityHandle
//	bound    Operations, Limits
//	invoke   RequestID, IdempotencyKey, Operation, Payload
//	result   RequestID, IdempotencyKey, Operation, OK, and Data (OK) or Error (not OK)
//	abort    RequestID, TargetRequestID
//	aborted  RequestID, TargetRequestID, Aborted, and optionally Error when not Aborted
//	revoke, revoked: identity only
//
// Members a kind does not carry must be zero.
type Frame struct {
	Kind Kind
	Identity
	CapabilityHandle Handle
	Operations       []string
	Limits           *Limits
	RequestID        string
	TargetRequestID  string
	IdempotencyKey   string
	Operation        string
	Payload          json.RawMessage
	OK               bool
	Data             json.RawMessage
	Error            *ErrorBody
	Aborted          bool
}

// wireFrame is a frame as it travels. Pointers tell a missing member from a zero one; the
// member order is the order frames are written in.
type wireFrame struct {
	ProtocolVersion  *string         `json:"protocolVersion,omitempty"`
	Kind             *string         `json:"kind,omitempty"`
	AdapterID        *string         `json:"adapterId,omitempty"`
	AdapterVersion   *string         `json:"adapterVersion,omitempty"`
	HostInstanceID   *string         `json:"hostInstanceId,omitempty"`
	SessionID        *string         `json:"sessionId,omitempty"`
	Generation       *int64          `json:"generation,omitempty"`
	CapabilityHandle *string         `json:"capabilityHandle,omitempty"`
	Operations       *[]string       `json:"operations,omitempty"`
	Limits           *rawLimits      `json:"limits,omitempty"`
	RequestID        *string         `json:"requestId,omitempty"`
	TargetRequestID  *string         `json:"targetRequestId,omitempty"`
	IdempotencyKey   *string         `json:"idempotencyKey,omitempty"`
	Operation        *string         `json:"operation,omitempty"`
	Payload          json.RawMessage `json:"payload,omitempty"`
	OK               *bool           `json:"ok,omitempty"`
	Data             json.RawMessage `json:"data,omitempty"`
	Error            *rawErrorBody   `json:"error,omitempty"`
	Aborted          *bool           `json:"aborted,omitempty"`
}

type rawErrorBody struct {
	Code      *string `json:"code"`
	Message   *string `json:"message"`
	Retryable *bool   `json:"retryable"`
}

// member is a bit set of the kind-specific members of a frame.
type member uint16

const (
	mHandle member = 1 << iota
	mOps
	mLimits
	mReq
	mTarget
	mKey
	mOp
	mPayload
	mOK
	mData
	mError
	mAborted
)

var kindMembers = map[Kind]struct{ required, optional member }{
	KindBind:    {mHandle | mOps | mLimits, 0},
	KindBound:   {mOps | mLimits, 0},
	KindInvoke:  {mReq | mKey | mOp | mPayload, 0},
	KindResult:  {mReq | mKey | mOp | mOK, mData | mError},
	KindAbort:   {mReq | mTarget, 0},
	KindAborted: {mReq | mTarget | mAborted, mError},
	KindRevoke:  {},
	KindRevoked: {},
}

// ValidWireID reports whether s matches ^[A-Za-z0-9][A-Za-z0-9._:-]*$ with 1 to max bytes: the
// grammar of requestId, targetRequestId and idempotencyKey.
func ValidWireID(s string, max int) bool {
	return validToken(s, max, "._:-")
}

func frameError(field, format string, args ...any) *protocol.Error {
	e := protocol.Errorf(CodeProtocolInvalid, format, args...)
	if field != "" {
		e = e.With(DetailField, field)
	}
	return e
}

// DecodeFrame decodes and validates one frame line (without its LF) strictly: one closed JSON
// object, exactly the members of its kind, the wire identity, id formats, the error body rules,
// and the typed payload (invoke) or result data (result) of its operation. Any failure is
// adapter_protocol_invalid with details.field; messages never quote values.
//
// DecodeFrame checks the frame alone. Whether its kind may arrive, and whether its identity is
// the expected one, is the receiver's business.
func DecodeFrame(line []byte) (*Frame, *protocol.Error) { return decodeFrame(line, false, nil) }

// DecodeBoundFrame is DecodeFrame for a connection bound to the identity bound, which has been
// checked already: a frame that carries exactly it skips the identity's format checks, which
// bound passed. The frame's Payload and Data are slices of line instead of a copy, valid only
// as long as line is: a connection that reads a result of several MiB into its line buffer
// hands the data on without copying it once more. Whether the frame's identity is bound is
// still the caller's check.
func DecodeBoundFrame(line []byte, bound Identity) (*Frame, *protocol.Error) {
	return decodeFrame(line, true, &bound)
}

// decodeFrame is DecodeFrame; with alias set, the frame's Payload and Data are slices of line
// (see DecodeBoundFrame). bound, when not nil, is an identity already checked.
func decodeFrame(line []byte, alias bool, bound *Identity) (*Frame, *protocol.Error) {
	// The frame and every stage of its decoding share one allocation.
	d := &struct {
		f  Frame
		r  rawFrame
		st wireStorage
	}{}
	decode := ndjson.Decode
	if alias {
		decode = ndjson.DecodeAliased
	}
	if err := decode(line, &d.r, ndjson.Closed); err != nil {
		return nil, decodeFrameError(err, "")
	}
	w, e := d.r.wire(&d.st)
	if e != nil {
		return nil, e
	}
	f := &d.f
	if e := w.toFrame(f); e != nil {
		return nil, e
	}
	if e := f.check(true, bound != nil && f.Identity == *bound); e != nil {
		return nil, e
	}
	if f.Data != nil {
		// Callers may copy the data into their own output as it stands (see toolclient.Conn.Invoke).
		f.Data = compactWalked(f.Data)
	}
	return f, nil
}

func decodeFrameError(err error, prefix string) *protocol.Error {
	var de *ndjson.DecodeError
	if errors.As(err, &de) {
		field := de.Path
		if prefix != "" {
			field = strings.TrimSuffix(prefix+field, ".")
		}
		return frameError(field, "frame is not a closed frame object (%s)", de.Reason)
	}
	return frameError(strings.TrimSuffix(prefix, "."), "frame is not a closed frame object")
}

// rawFrame is the first stage of decoding: a struct of raw members lets ndjson check the whole
// line (syntax, closed keys, duplicates, case variants) in one pass without a reflective second
// pass; wire then converts each member, most of them plain strings, by hand.
type rawFrame struct {
	ProtocolVersion  json.RawMessage `json:"protocolVersion"`
	Kind             json.RawMessage `json:"kind"`
	AdapterID        json.RawMessage `json:"adapterId"`
	AdapterVersion   json.RawMessage `json:"adapterVersion"`
	HostInstanceID   json.RawMessage `json:"hostInstanceId"`
	SessionID        json.RawMessage `json:"sessionId"`
	Generation       json.RawMessage `json:"generation"`
	CapabilityHandle json.RawMessage `json:"capabilityHandle"`
	Operations       json.RawMessage `json:"operations"`
	Limits           json.RawMessage `json:"limits"`
	RequestID        json.RawMessage `json:"requestId"`
	TargetRequestID  json.RawMessage `json:"targetRequestId"`
	IdempotencyKey   json.RawMessage `json:"idempotencyKey"`
	Operation        json.RawMessage `json:"operation"`
	Payload          json.RawMessage `json:"payload"`
	OK               json.RawMessage `json:"ok"`
	Data             json.RawMessage `json:"data"`
	Error            json.RawMessage `json:"error"`
	Aborted          json.RawMessage `json:"aborted"`
}

// wireStorage holds a wireFrame and the values its pointers refer to, so that they take no
// allocation of their own.
type wireStorage struct {
	w    wireFrame
	strs [11]string
	gen  int64
	bits [2]bool
}

// wire converts r into st's wireFrame. The plain strings, nearly all of them, share one
// allocation.
func (r *rawFrame) wire(st *wireStorage) (*wireFrame, *protocol.Error) {
	w := &st.w
	members := [len(st.strs)]struct {
		raw  json.RawMessage
		name string
		dst  **string
	}{
		{r.ProtocolVersion, "protocolVersion", &w.ProtocolVersion}, {r.Kind, "kind", &w.Kind},
		{r.AdapterID, "adapterId", &w.AdapterID}, {r.AdapterVersion, "adapterVersion", &w.AdapterVersion},
		{r.HostInstanceID, "hostInstanceId", &w.HostInstanceID}, {r.SessionID, "sessionId", &w.SessionID},
		{r.CapabilityHandle, "capabilityHandle", &w.CapabilityHandle}, {r.RequestID, "requestId", &w.RequestID},
		{r.TargetRequestID, "targetRequestId", &w.TargetRequestID}, {r.IdempotencyKey, "idempotencyKey", &w.IdempotencyKey},
		{r.Operation, "operation", &w.Operation},
	}
	var plain [len(members)]bool
	size := 0
	for i, m := range members {
		if m.raw == nil {
			continue
		}
		if plain[i] = plainString(m.raw); plain[i] {
			size += len(m.raw) - 2
			continue
		}
		s, ok := rawString(m.raw)
		if !ok {
			return nil, frameError(m.name, "frame member %s must be a string", m.name)
		}
		st.strs[i] = s
		*m.dst = &st.strs[i]
	}
	var sb strings.Builder
	sb.Grow(size)
	for i, m := range members {
		if plain[i] {
			sb.Write(m.raw[1 : len(m.raw)-1])
		}
	}
	all, at := sb.String(), 0
	for i, m := range members {
		if plain[i] {
			n := len(m.raw) - 2
			st.strs[i] = all[at : at+n]
			at += n
			*m.dst = &st.strs[i]
		} else if m.raw != nil {
			*m.dst = &st.strs[i]
		}
	}
	if r.Generation != nil {
		g, err := strconv.ParseInt(string(r.Generation), 10, 64)
		if err != nil {
			return nil, frameError("generation", "frame member generation must be an integer")
		}
		st.gen = g
		w.Generation = &st.gen
	}
	for i, b := range [...]struct {
		raw  json.RawMessage
		dst  **bool
		name string
	}{{r.OK, &w.OK, "ok"}, {r.Aborted, &w.Aborted, "aborted"}} {
		if b.raw == nil {
			continue
		}
		v := string(b.raw) == "true"
		if !v && string(b.raw) != "false" {
			return nil, frameError(b.name, "frame member %s must be a boolean", b.name)
		}
		st.bits[i] = v
		*b.dst = &st.bits[i]
	}
	if r.Operations != nil {
		var ops []string
		if err := ndjson.Decode(r.Operations, &ops, ndjson.Closed); err != nil {
			return nil, decodeFrameError(err, "operations.")
		}
		w.Operations = &ops
	}
	if r.Limits != nil {
		w.Limits = &rawLimits{}
		if err := ndjson.Decode(r.Limits, w.Limits, ndjson.Closed); err != nil {
			return nil, decodeFrameError(err, "limits.")
		}
	}
	if r.Error != nil {
		w.Error = &rawErrorBody{}
		if err := ndjson.Decode(r.Error, w.Error, ndjson.Closed); err != nil {
			return nil, decodeFrameError(err, "error.")
		}
	}
	w.Payload, w.Data = r.Payload, r.Data
	return w, nil
}

// plainString reports whether raw is a JSON string of plain ASCII without escapes, whose
// contents are its value as they stand.
func plainString(raw json.RawMessage) bool {
	if len(raw) < 2 || raw[0] != '"' {
		return false
	}
	for _, c := range raw[1 : len(raw)-1] {
		if c == '\\' || c < 0x20 || c >= 0x80 {
			return false
		}
	}
	return true
}

// rawString decodes a JSON string member. Plain ASCII without escapes, the common case, is
// sliced out directly; anything else goes through encoding/json, so that escapes and invalid
// UTF-8 are treated exactly as everywhere else.
func rawString(raw json.RawMessage) (string, bool) {
	if len(raw) < 2 || raw[0] != '"' {
		return "", false
	}
	if plainString(raw) {
		return string(raw[1 : len(raw)-1]), true
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", false
	}
	return s, true
}

// toFrame checks the member set of w against its kind and fills f, a zero Frame, from it.
func (w *wireFrame) toFrame(f *Frame) *protocol.Error {
	switch {
	case w.ProtocolVersion == nil:
		return frameError("protocolVersion", "frame member protocolVersion is required")
	case *w.ProtocolVersion != ProtocolVersion:
		return frameError("protocolVersion", "frame protocol version must be %q", ProtocolVersion)
	case w.Kind == nil:
		return frameError("kind", "frame member kind is required")
	}
	kind := Kind(*w.Kind)
	spec, ok := kindMembers[kind]
	if !ok {
		return frameError("kind", "unknown frame kind")
	}
	for _, m := range []struct {
		name string
		ok   bool
	}{
		{"adapterId", w.AdapterID != nil}, {"adapterVersion", w.AdapterVersion != nil},
		{"hostInstanceId", w.HostInstanceID != nil}, {"sessionId", w.SessionID != nil},
		{"generation", w.Generation != nil},
	} {
		if !m.ok {
			return frameError(m.name, "frame member %s is required", m.name)
		}
	}
	present := []struct {
		m    member
		name string
		ok   bool
	}{
		{mHandle, "capabilityHandle", w.CapabilityHandle != nil}, {mOps, "operations", w.Operations != nil},
		{mLimits, "limits", w.Limits != nil}, {mReq, "requestId", w.RequestID != nil},
		{mTarget, "targetRequestId", w.TargetRequestID != nil}, {mKey, "idempotencyKey", w.IdempotencyKey != nil},
		{mOp, "operation", w.Operation != nil}, {mPayload, "payload", w.Payload != nil},
		{mOK, "ok", w.OK != nil}, {mData, "data", w.Data != nil},
		{mError, "error", w.Error != nil}, {mAborted, "aborted", w.Aborted != nil},
	}
	for _, p := range present {
		switch {
		case p.ok && (spec.required|spec.optional)&p.m == 0:
			return frameError(p.name, "member %s is not allowed in a %s frame", p.name, kind)
		case !p.ok && spec.required&p.m != 0:
			return frameError(p.name, "member %s is required in a %s frame", p.name, kind)
		}
	}
	f.Kind, f.Identity = kind, Identity{
		AdapterID: *w.AdapterID, AdapterVersion: *w.AdapterVersion,
		HostInstanceID: *w.HostInstanceID, SessionID: *w.SessionID, Generation: *w.Generation,
	}
	if w.CapabilityHandle != nil {
		f.CapabilityHandle = Handle{v: *w.CapabilityHandle}
		if f.CapabilityHandle.IsZero() {
			return frameError("capabilityHandle", "capabilityHandle is invalid")
		}
	}
	if w.Operations != nil {
		f.Operations = *w.Operations
		if f.Operations == nil {
			f.Operations = []string{}
		}
	}
	if w.Limits != nil {
		l, e := w.Limits.toLimits("limits.")
		if e != nil {
			return frameError(e.Details[DetailField].(string), "frame limits are invalid")
		}
		f.Limits = &l
	}
	deref := func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	}
	f.RequestID, f.TargetRequestID = deref(w.RequestID), deref(w.TargetRequestID)
	f.IdempotencyKey, f.Operation = deref(w.IdempotencyKey), deref(w.Operation)
	f.Payload, f.Data = w.Payload, w.Data
	if w.OK != nil {
		f.OK = *w.OK
	}
	if w.Aborted != nil {
		f.Aborted = *w.Aborted
	}
	if w.Error != nil {
		eb := w.Error
		switch {
		case eb.Code == nil:
			return frameError("error.code", "error member code is required")
		case eb.Message == nil:
			return frameError("error.message", "error member message is required")
		case eb.Retryable == nil:
			return frameError("error.retryable", "error member retryable is required")
		}
		f.Error = &ErrorBody{Code: *eb.Code, Message: *eb.Message, Retryable: *eb.Retryable}
	}
	return nil
}

// validate checks the values of a frame whose member set is already right for its kind.
func (f *Frame) validate() *protocol.Error { return f.check(false, false) }

// check is validate; walked tells that the frame's line was walked by the strict decoder, so
// that its payload or data is known to be well-formed without duplicate keys, and
// identityChecked that its identity passed the identity checks before.
func (f *Frame) check(walked, identityChecked bool) *protocol.Error {
	if !identityChecked {
		if e := f.checkIdentity(); e != nil {
			return e
		}
	}
	if _, ok := kindMembers[f.Kind]; !ok {
		return frameError("kind", "unknown frame kind")
	}
	switch f.Kind {
	case KindBind, KindBound:
		if f.Kind == KindBind && !validHandle(f.CapabilityHandle.v) {
			return frameError("capabilityHandle", "capabilityHandle is invalid")
		}
		if _, e := checkOperations(f.Operations, "operations", CodeProtocolInvalid); e != nil {
			return e
		}
		if f.Limits == nil {
			return frameError("limits", "limits are required")
		}
		if e := f.Limits.check("limits."); e != nil {
			return frameError(e.Details[DetailField].(string), "frame limits are invalid")
		}
	case KindInvoke, KindResult:
		if !ValidWireID(f.RequestID, MaxRequestIDLen) {
			return frameError("requestId", "requestId must be 1 to %d characters of [A-Za-z0-9._:-] starting with a letter or digit", MaxRequestIDLen)
		}
		if !ValidWireID(f.IdempotencyKey, MaxIdempotencyKeyLen) {
			return frameError("idempotencyKey", "idempotencyKey must be 1 to %d characters of [A-Za-z0-9._:-] starting with a letter or digit", MaxIdempotencyKeyLen)
		}
		if !knownOperation(f.Operation) {
			return frameError("operation", "operation is not a tool operation")
		}
		if f.Kind == KindInvoke {
			if e := ValidatePayload(f.Operation, f.Payload); e != nil {
				return frameError("payload", "invoke payload is invalid")
			}
			break
		}
		switch {
		case f.OK && (f.Data == nil || f.Error != nil):
			return frameError("data", "a successful result carries data and no error")
		case !f.OK && (f.Data != nil || f.Error == nil):
			return frameError("error", "a failed result carries an error and no data")
		case f.OK && walked && validResultWalked(f.Operation, f.Data):
			// A valid read or stat result, settled without decoding it again.
		case f.OK:
			if e := ValidateResult(f.Operation, f.Data); e != nil {
				return frameError("data", "result data is invalid")
			}
		}
	case KindAbort, KindAborted:
		if !ValidWireID(f.RequestID, MaxRequestIDLen) {
			return frameError("requestId", "requestId is invalid")
		}
		if !ValidWireID(f.TargetRequestID, MaxRequestIDLen) {
			return frameError("targetRequestId", "targetRequestId is invalid")
		}
		if f.Kind == KindAborted && f.Aborted && f.Error != nil {
			return frameError("error", "a successful abort acknowledgement carries no error")
		}
	}
	if f.Error != nil {
		if !validText(f.Error.Code, MaxErrorCodeLen) {
			return frameError("error.code", "error code must be 1 to %d characters without control characters", MaxErrorCodeLen)
		}
		if f.Error.Message == "" || len([]rune(f.Error.Message)) > MaxErrorMessageLen {
			return frameError("error.message", "error message must be 1 to %d characters", MaxErrorMessageLen)
		}
	}
	return nil
}

// checkIdentity checks the formats of the frame's adapter identity and binding.
func (f *Frame) checkIdentity() *protocol.Error {
	if !validAdapterIdentity(f.AdapterID, f.AdapterVersion) {
		if checkAdapterID(f.AdapterID, "") != nil {
			return frameError("adapterId", "frame adapterId is invalid")
		}
		return frameError("adapterVersion", "frame adapterVersion is invalid")
	}
	return f.Identity.checkBinding("", CodeProtocolInvalid)
}

func validAdapterIdentity(id, version string) bool {
	return checkAdapterID(id, "") == nil && checkAdapterVersion(version, "") == nil
}
