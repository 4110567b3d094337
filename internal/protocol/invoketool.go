package protocol

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"

	"github.com/airlockhq/airlock/internal/ndjson"
)

// invokeToolRaw mirrors InvokeToolPayload member for member, each kept as JSON text, so that
// the strict decoder checks and splits the payload in one pass, without encoding/json's
// reflective second one.
type invokeToolRaw struct {
	ToolCallID json.RawMessage `json:"toolCallId"`
	Operation  json.RawMessage `json:"operation"`
	Arguments  json.RawMessage `json:"arguments"`
}

// DecodeInvokeToolPayload decodes the payload of an invokeTool command exactly as DecodePayload
// does into an InvokeToolPayload: the same value, and for a payload it refuses the same error
// (TestDecodeInvokeToolPayload, FuzzDecodeInvokeToolPayload). A well-typed payload, the usual
// case, costs one walk; anything else goes through DecodePayload, which names the failure.
func DecodeInvokeToolPayload(cmd *Command) (*InvokeToolPayload, *Error) {
	// The payload and its raw members share one allocation. cmd.Payload is the command's own
	// copy and never changes, so the members, and Arguments, may be slices of it.
	st := &struct {
		p InvokeToolPayload
		r invokeToolRaw
	}{}
	r := &st.r
	if ndjson.DecodeAliased(cmd.Payload, r, ndjson.Open) == nil {
		id, okID := plainRawString(r.ToolCallID)
		op, okOp := plainRawString(r.Operation)
		if okID && okOp {
			st.p = InvokeToolPayload{ToolCallID: id, Operation: op, Arguments: r.Arguments}
			return &st.p, nil
		}
	}
	var p InvokeToolPayload
	if e := DecodePayload(cmd, &p); e != nil {
		return nil, e
	}
	return &p, nil
}

// plainRawString decodes a member that is absent (the zero string, as encoding/json leaves it)
// or a JSON string. Escapes and invalid UTF-8 go through encoding/json; anything else reports
// false.
func plainRawString(raw json.RawMessage) (string, bool) {
	if raw == nil {
		return "", true
	}
	if len(raw) < 2 || raw[0] != '"' {
		return "", false
	}
	if inner := raw[1 : len(raw)-1]; bytes.IndexByte(inner, '\\') < 0 && utf8.Valid(inner) {
		return string(inner), true
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}

// CompactToolResult is a ToolResult whose Data is vouched for: one well-formed JSON value
// without whitespace between tokens, as the tool-adapter connection guarantees for the data it
// returns. It encodes exactly as the ToolResult it embeds (encoding/json promotes the members),
// and the hand-written encoder copies its Data as it stands instead of walking up to 4 MiB once
// more.
type CompactToolResult struct {
	ToolResult
}

// AbortToolPayload is the payload of abortTool (2.x): the requestId of an invokeTool command in
// flight on the same connection. Its adapter request is aborted (the adapter gets a targeted
// abort frame) and the invokeTool is answered adapter_request_aborted, retryable.
type AbortToolPayload struct {
	RequestID string `json:"requestId"`
}

// Validate checks requestId against the envelope's requestId rules: an id no command can have
// is a bad field, not a call that is not in flight.
func (p *AbortToolPayload) Validate() *Error {
	if !validIdentifier(p.RequestID, MaxRequestIDLen) {
		return invalidField("payload.requestId", "must be a string of 1 to %d characters without control characters", MaxRequestIDLen)
	}
	return nil
}
