package protocol

import (
	"strconv"

	"github.com/airlockhq/airlock/internal/ndjson"
)

// Hand-written JSON for the one record whose encoding users feel: a tool result, often most
// of its line (a whole file read). It produces byte for byte what encoding/json does (with HTML
// escaping off, as ndjson.Marshal sets it; TestAppendToolResultMatchesEncodingJSON), and copies
// the result's data as it stands instead of validating and compacting it once more through
// reflection: fs.read of 4 KiB through airlockd at 16 clients, make bench-fs, does about a third
// more calls per second with it. Every other record goes through encoding/json.

// AppendLine appends r as one NDJSON line when its data is a tool result and it carries no
// error; otherwise it returns ok false and the caller uses encoding/json.
func (r *Response) AppendLine(b []byte) (_ []byte, ok bool) {
	if r.Error != nil {
		return b, false
	}
	var tool *ToolResult
	var compact bool
	switch d := r.Data.(type) {
	case *ToolResult:
		tool = d
	case *CompactToolResult:
		if d != nil {
			tool, compact = &d.ToolResult, true
		}
	}
	if tool == nil {
		return b, false
	}
	start := len(b)
	b = append(b, `{"protocolVersion":`...)
	b = ndjson.AppendString(b, r.ProtocolVersion)
	b = append(b, `,"kind":`...)
	b = ndjson.AppendString(b, r.Kind)
	b = append(b, `,"requestId":`...)
	b = ndjson.AppendString(b, r.RequestID)
	b = append(b, `,"hostInstanceId":`...)
	b = ndjson.AppendString(b, r.HostInstanceID)
	if r.SessionID != "" {
		b = append(b, `,"sessionId":`...)
		b = ndjson.AppendString(b, r.SessionID)
	}
	if r.Sequence != nil {
		b = append(b, `,"sequence":`...)
		b = strconv.AppendUint(b, *r.Sequence, 10)
	}
	b = append(b, `,"ok":`...)
	b = strconv.AppendBool(b, r.OK)
	b = append(b, `,"data":`...)
	b, ok = tool.appendJSON(b, compact)
	if !ok {
		return b[:start], false
	}
	return append(b, '}', '\n'), true
}

// appendJSON writes a tool result. Its data, often most of the line (a whole file read), is
// copied as it stands when it is compact, as adapters write it, after one fast walk, or none
// when compact vouches for it (CompactToolResult); encoding/json would check and compact it the same way. Data
// that is not one JSON value reports false, so that the caller's encoding/json fallback names
// the failure.
func (t *ToolResult) appendJSON(b []byte, compact bool) ([]byte, bool) {
	b = append(b, `{"toolCallId":`...)
	b = ndjson.AppendString(b, t.ToolCallID)
	b = append(b, `,"operation":`...)
	b = ndjson.AppendString(b, t.Operation)
	b = append(b, `,"data":`...)
	switch {
	case t.Data == nil:
		b = append(b, "null"...)
	case compact:
		b = append(b, t.Data...)
	default:
		var err error
		if b, err = ndjson.AppendCompact(b, t.Data); err != nil {
			return b, false
		}
	}
	return append(b, '}'), true
}
