package tooladapter

// This file owns frame encoding: EncodeFrame, the one serializer of frames (marshalFrame), the
// per-binding InvokeEncoder, and the normalized bind and bound frames of a descriptor.

import (
	"bytes"
	"encoding/json"

	"github.com/airlockhq/airlock/internal/ndjson"
	"github.com/airlockhq/airlock/internal/protocol"
)

// EncodeFrame validates f and serializes it as one line, LF included. A line longer than
// maxBytes (when maxBytes > 0) is refused with adapter_request_too_large.
func EncodeFrame(f *Frame, maxBytes int) ([]byte, *protocol.Error) {
	if e := f.validate(); e != nil {
		return nil, protocol.Errorf(CodeRequestInvalid, "frame is invalid").With(DetailField, e.Details[DetailField])
	}
	b, err := marshalFrame(f)
	if err != nil {
		return nil, protocol.Errorf(CodeRequestInvalid, "frame is not serializable")
	}
	if maxBytes > 0 && len(b) > maxBytes {
		return nil, protocol.Errorf(CodeRequestTooLarge, "frame of %d bytes exceeds the limit of %d", len(b), maxBytes)
	}
	return b, nil
}

// marshalFrame serializes f without validating it. It is the only reader of the handle's value
// outside the reflection check.
func marshalFrame(f *Frame) ([]byte, error) {
	pv, kind := ProtocolVersion, string(f.Kind)
	id := f.Identity
	w := wireFrame{
		ProtocolVersion: &pv, Kind: &kind,
		AdapterID: &id.AdapterID, AdapterVersion: &id.AdapterVersion,
		HostInstanceID: &id.HostInstanceID, SessionID: &id.SessionID, Generation: &id.Generation,
	}
	spec := kindMembers[f.Kind]
	has := func(m member) bool { return (spec.required|spec.optional)&m != 0 }
	if has(mHandle) {
		w.CapabilityHandle = &f.CapabilityHandle.v
	}
	if has(mOps) {
		ops := f.Operations
		w.Operations = &ops
	}
	if has(mLimits) && f.Limits != nil {
		l := *f.Limits
		w.Limits = &rawLimits{&l.MaxRequestBytes, &l.MaxResponseBytes, &l.MaxConcurrentRequests,
			&l.MaxQueuedRequests, &l.RequestTimeoutMs, &l.MaxIdempotencyKeys, &l.IdempotencyTtlMs}
	}
	if has(mReq) {
		w.RequestID = &f.RequestID
	}
	if has(mTarget) {
		w.TargetRequestID = &f.TargetRequestID
	}
	if has(mKey) {
		w.IdempotencyKey = &f.IdempotencyKey
	}
	if has(mOp) {
		w.Operation = &f.Operation
	}
	if has(mPayload) {
		w.Payload = f.Payload
	}
	switch f.Kind {
	case KindResult:
		ok := f.OK
		w.OK = &ok
		if ok {
			w.Data = f.Data
		}
	case KindAborted:
		ab := f.Aborted
		w.Aborted = &ab
	}
	if has(mError) && f.Error != nil && !(f.Kind == KindResult && f.OK) {
		eb := *f.Error
		w.Error = &rawErrorBody{&eb.Code, &eb.Message, &eb.Retryable}
	}
	return ndjson.Marshal(&w)
}

// InvokeEncoder encodes the invoke frames of one binding. Every member before requestId is the
// binding's identity, so that part is encoded once; the rest is appended by hand. The output is
// byte for byte marshalFrame's (TestInvokeEncoder), which it falls back to for any value that
// would need escaping.
type InvokeEncoder struct {
	id     Identity
	prefix []byte // the frame up to the comma before requestId
}

// invokeTail is how marshalFrame ends an invoke frame whose requestId, idempotencyKey and
// operation are empty and whose payload is nil.
const invokeTail = `,"requestId":"","idempotencyKey":"","operation":""}` + "\n"

// NewInvokeEncoder returns the invoke encoder of the binding whose frames carry id.
func NewInvokeEncoder(id Identity) *InvokeEncoder {
	e := &InvokeEncoder{id: id}
	if b, err := marshalFrame(&Frame{Kind: KindInvoke, Identity: id}); err == nil && bytes.HasSuffix(b, []byte(invokeTail)) {
		e.prefix = b[:len(b)-len(invokeTail)]
	}
	return e
}

// Encode returns the invoke frame line, LF included. It does not validate the members.
func (e *InvokeEncoder) Encode(requestID, key, op string, payload json.RawMessage) ([]byte, error) {
	return e.encodePayload(requestID, key, op, payload, false)
}

// EncodeWalked is Encode for a payload the strict decoder has walked whole (ValidatePayload
// does), which is known to be one well-formed value: its whitespace is found with the cheap
// scan of compactWalked instead of a second walk.
func (e *InvokeEncoder) EncodeWalked(requestID, key, op string, payload json.RawMessage) ([]byte, error) {
	return e.encodePayload(requestID, key, op, payload, true)
}

func (e *InvokeEncoder) encodePayload(requestID, key, op string, payload json.RawMessage, walked bool) ([]byte, error) {
	if e.prefix == nil || payload == nil || !plainJSON(requestID) || !plainJSON(key) || !plainJSON(op) {
		return marshalFrame(&Frame{Kind: KindInvoke, Identity: e.id, RequestID: requestID, IdempotencyKey: key, Operation: op, Payload: payload})
	}
	b := make([]byte, 0, len(e.prefix)+len(requestID)+len(key)+len(op)+len(payload)+64)
	b = append(b, e.prefix...)
	b = append(b, `,"requestId":"`...)
	b = append(b, requestID...)
	b = append(b, `","idempotencyKey":"`...)
	b = append(b, key...)
	b = append(b, `","operation":"`...)
	b = append(b, op...)
	b = append(b, `","payload":`...)
	// encoding/json writes a json.RawMessage compacted, and without HTML escaping (as
	// ndjson.Marshal sets it) exactly as json.Compact does, which ndjson.AppendCompact does.
	if walked {
		b = append(b, compactWalked(payload)...)
	} else {
		var err error
		if b, err = ndjson.AppendCompact(b, payload); err != nil {
			return nil, err
		}
	}
	return append(b, '}', '\n'), nil
}

// plainJSON reports whether encoding/json writes s between quotes as it is: printable ASCII
// without quote or backslash.
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// BindFrame is the normalized bind frame of a descriptor: the only frame that carries the
// capability handle.
func (d *Descriptor) BindFrame() *Frame {
	l := d.Limits
	return &Frame{Kind: KindBind, Identity: d.Identity(), CapabilityHandle: d.Binding.CapabilityHandle,
		Operations: d.Operations, Limits: &l}
}

// BoundFrame is the bound frame a conforming adapter answers bind with.
func (d *Descriptor) BoundFrame() *Frame {
	l := d.Limits
	return &Frame{Kind: KindBound, Identity: d.Identity(), Operations: d.Operations, Limits: &l}
}
