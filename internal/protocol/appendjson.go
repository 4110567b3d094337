package protocol

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
	"time"

	"github.com/airlockhq/airlock/internal/ndjson"
)

// Hand-written JSON for the records the daemon sends most often: host and session status and
// tool results. They
// produce byte for byte what encoding/json does (with HTML escaping off, as ndjson.Marshal
// sets it) — TestAppendJSONMatchesEncodingJSON proves it on generated values — at a fraction of
// the cost, which matters because status is the probe of every supervisor and orchestrator.

// JSONAppender is response data of a package outside this one that encodes itself: AppendJSON
// appends byte for byte what encoding/json (with HTML escaping off) writes for it, or reports
// false, having appended anything, for the caller to fall back to encoding/json.
type JSONAppender interface {
	AppendJSON(b []byte) ([]byte, bool)
}

// AppendLine appends r as one NDJSON line when its data is a type with a hand-written encoding
// and it carries no error; otherwise it returns ok false and the caller uses encoding/json.
func (r *Response) AppendLine(b []byte) (_ []byte, ok bool) {
	if r.Error != nil {
		return b, false
	}
	var data func([]byte) []byte
	var tool *ToolResult
	var compact bool
	var appender JSONAppender
	switch d := r.Data.(type) {
	case HostSnapshot:
		data = d.appendJSON
	case *HostSnapshot:
		data = d.appendJSON
	case *SessionSnapshot:
		data = d.appendJSON
	case *ToolResult:
		if d == nil {
			return b, false
		}
		tool = d
	case *CompactToolResult:
		if d == nil {
			return b, false
		}
		tool, compact = &d.ToolResult, true
	case JSONAppender:
		appender = d
	default:
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
	if tool != nil || appender != nil {
		var ok bool
		if tool != nil {
			b, ok = tool.appendJSON(b, compact)
		} else {
			b, ok = appender.AppendJSON(b)
		}
		if !ok {
			return b[:start], false
		}
	} else {
		b = data(b)
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

func (h *HostSnapshot) appendJSON(b []byte) []byte {
	b = append(b, `{"hostInstanceId":`...)
	b = ndjson.AppendString(b, h.HostInstanceID)
	b = appendBoolField(b, "ready", h.Ready)
	b = appendBoolField(b, "durable", h.Durable)
	b = appendBoolField(b, "draining", h.Draining)
	b = append(b, `,"limits":`...)
	b = h.Limits.appendJSON(b)
	b = appendIntField(b, "activeTurns", int64(h.ActiveTurns))
	b = appendIntField(b, "queuedTurns", int64(h.QueuedTurns))
	b = appendIntField(b, "connections", int64(h.Connections))
	b = append(b, `,"startedAt":`...)
	b = appendTime(b, h.StartedAt)
	b = appendIntField(b, "uptimeMs", h.UptimeMs)
	b = append(b, `,"memory":{"totalBytes":`...)
	b = strconv.AppendUint(b, h.Memory.TotalBytes, 10)
	b = append(b, `,"heapBytes":`...)
	b = strconv.AppendUint(b, h.Memory.HeapBytes, 10)
	b = append(b, `,"goroutines":`...)
	b = strconv.AppendUint(b, h.Memory.Goroutines, 10)
	b = append(b, `},"metrics":`...)
	b = appendUintMap(b, h.Metrics)
	b = append(b, `,"recovery":`...)
	b = h.Recovery.appendJSON(b)
	b = append(b, `,"sessions":`...)
	if h.Sessions == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i := range h.Sessions {
			if i > 0 {
				b = append(b, ',')
			}
			b = h.Sessions[i].appendJSON(b)
		}
		b = append(b, ']')
	}
	b = appendIntField(b, "dormantSessions", int64(h.DormantSessions))
	if len(h.Adapters) > 0 {
		b = append(b, `,"adapters":[`...)
		for i := range h.Adapters {
			if i > 0 {
				b = append(b, ',')
			}
			b = h.Adapters[i].appendJSON(b)
		}
		b = append(b, ']')
	}
	return append(b, '}')
}

func (a *AdapterState) appendJSON(b []byte) []byte {
	b = append(b, `{"name":`...)
	b = ndjson.AppendString(b, a.Name)
	b = append(b, `,"command":`...)
	b = ndjson.AppendString(b, a.Command)
	b = append(b, `,"args":`...)
	b = appendStrings(b, a.Args)
	b = append(b, `,"state":`...)
	b = ndjson.AppendString(b, a.State)
	if a.PID != 0 {
		b = appendIntField(b, "pid", int64(a.PID))
	}
	b = appendIntField(b, "restarts", int64(a.Restarts))
	if a.LastFailure != "" {
		b = append(b, `,"lastFailure":`...)
		b = ndjson.AppendString(b, a.LastFailure)
	}
	b = append(b, `,"capabilities":`...)
	b = appendStrings(b, a.Capabilities)
	return append(b, '}')
}

func appendStrings(b []byte, ss []string) []byte {
	if ss == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i, s := range ss {
		if i > 0 {
			b = append(b, ',')
		}
		b = ndjson.AppendString(b, s)
	}
	return append(b, ']')
}

func (l *Limits) appendJSON(b []byte) []byte {
	b = append(b, `{"maxConnections":`...)
	b = strconv.AppendInt(b, int64(l.MaxConnections), 10)
	b = appendIntField(b, "maxInFlightRequestsPerConnection", int64(l.MaxInFlightRequestsPerConnection))
	b = appendIntField(b, "maxLineBytes", int64(l.MaxLineBytes))
	b = appendIntField(b, "maxEventBytes", int64(l.MaxEventBytes))
	b = appendIntField(b, "maxResponseBytes", int64(l.MaxResponseBytes))
	b = appendIntField(b, "maxOutboundBytesPerConnection", int64(l.MaxOutboundBytesPerConnection))
	b = append(b, `,"multiplexer":{"maxSessions":`...)
	b = strconv.AppendInt(b, int64(l.Multiplexer.MaxSessions), 10)
	b = appendIntField(b, "maxConcurrentTurns", int64(l.Multiplexer.MaxConcurrentTurns))
	b = appendIntField(b, "maxSessionQueueDepth", int64(l.Multiplexer.MaxSessionQueueDepth))
	return append(b, '}', '}')
}

func (r *RecoveryHealth) appendJSON(b []byte) []byte {
	b = append(b, `{"phase":`...)
	b = ndjson.AppendString(b, r.Phase)
	b = appendIntField(b, "pendingReplays", int64(r.PendingReplays))
	b = appendIntField(b, "openedSessions", int64(r.OpenedSessions))
	b = appendIntField(b, "restoredSessions", int64(r.RestoredSessions))
	b = appendIntField(b, "replayedRequests", int64(r.ReplayedRequests))
	b = appendIntField(b, "indeterminateRequests", int64(r.IndeterminateRequests))
	b = appendIntField(b, "failureCount", int64(r.FailureCount))
	b = append(b, `,"failureCodes":`...)
	if r.FailureCodes == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '{')
		var buf [16]string
		for i, k := range sortedKeys(buf[:0], r.FailureCodes) {
			if i > 0 {
				b = append(b, ',')
			}
			b = ndjson.AppendString(b, k)
			b = append(b, ':')
			b = strconv.AppendInt(b, int64(r.FailureCodes[k]), 10)
		}
		b = append(b, '}')
	}
	b = append(b, `,"quarantinedSessions":`...)
	if r.QuarantinedSessions == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, q := range r.QuarantinedSessions {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"sessionId":`...)
			b = ndjson.AppendString(b, q.SessionID)
			b = appendIntField(b, "generation", q.Generation)
			b = append(b, `,"state":`...)
			b = ndjson.AppendString(b, q.State)
			b = append(b, `,"code":`...)
			b = ndjson.AppendString(b, q.Code)
			b = appendBoolField(b, "retryable", q.Retryable)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	if r.StartedAt != nil {
		b = append(b, `,"startedAt":`...)
		b = appendTime(b, *r.StartedAt)
	}
	if r.CompletedAt != nil {
		b = append(b, `,"completedAt":`...)
		b = appendTime(b, *r.CompletedAt)
	}
	return append(b, '}')
}

func (s *SessionSnapshot) appendJSON(b []byte) []byte {
	b = append(b, `{"sessionId":`...)
	b = ndjson.AppendString(b, s.SessionID)
	b = appendIntField(b, "generation", s.Generation)
	b = append(b, `,"protocolVersion":`...)
	b = ndjson.AppendString(b, s.ProtocolVersion)
	if s.Name != "" {
		b = append(b, `,"name":`...)
		b = ndjson.AppendString(b, s.Name)
	}
	b = append(b, `,"state":`...)
	b = ndjson.AppendString(b, s.State)
	b = append(b, `,"residency":`...)
	b = ndjson.AppendString(b, s.Residency)
	b = append(b, `,"sequence":`...)
	b = strconv.AppendUint(b, s.Sequence, 10)
	b = appendIntField(b, "queuedTurns", int64(s.QueuedTurns))
	if s.ActiveRequestID != "" {
		b = append(b, `,"activeRequestId":`...)
		b = ndjson.AppendString(b, s.ActiveRequestID)
	}
	if s.LastErrorCode != "" {
		b = append(b, `,"lastErrorCode":`...)
		b = ndjson.AppendString(b, s.LastErrorCode)
	}
	if s.Model != nil {
		b = append(b, `,"model":{"provider":`...)
		b = ndjson.AppendString(b, s.Model.Provider)
		b = append(b, `,"id":`...)
		b = ndjson.AppendString(b, s.Model.ID)
		if s.Model.ThinkingLevel != "" {
			b = append(b, `,"thinkingLevel":`...)
			b = ndjson.AppendString(b, s.Model.ThinkingLevel)
		}
		b = append(b, '}')
	}
	b = appendIntField(b, "attachedConnections", int64(s.Attached))
	b = append(b, `,"lastUsedAt":`...)
	b = appendTime(b, s.LastUsedAt)
	b = appendIntField(b, "idleForMs", s.IdleForMs)
	if s.HostToolAdapterQueue != nil {
		// Rare and nested: encoding/json writes it, exactly as it would inside the whole.
		q, err := marshalNoEscape(s.HostToolAdapterQueue)
		if err == nil {
			b = append(b, `,"hostToolAdapterQueue":`...)
			b = append(b, q...)
		}
	}
	return append(b, '}')
}

func marshalNoEscape(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

func appendIntField(b []byte, name string, n int64) []byte {
	b = append(b, ',', '"')
	b = append(b, name...)
	b = append(b, '"', ':')
	return strconv.AppendInt(b, n, 10)
}

func appendBoolField(b []byte, name string, v bool) []byte {
	b = append(b, ',', '"')
	b = append(b, name...)
	b = append(b, '"', ':')
	return strconv.AppendBool(b, v)
}

func appendUintMap(b []byte, m map[string]uint64) []byte {
	if m == nil {
		return append(b, "null"...)
	}
	b = append(b, '{')
	var buf [16]string
	for i, k := range sortedKeys(buf[:0], m) {
		if i > 0 {
			b = append(b, ',')
		}
		b = ndjson.AppendString(b, k)
		b = append(b, ':')
		b = strconv.AppendUint(b, m[k], 10)
	}
	return append(b, '}')
}

// sortedKeys appends m's keys to buf and sorts them; with a buffer on the caller's stack, small
// maps cost no allocation.
func sortedKeys[V any](buf []string, m map[string]V) []string {
	for k := range m {
		buf = append(buf, k)
	}
	slices.Sort(buf)
	return buf
}

// appendTime writes t as time.Time's MarshalJSON does.
func appendTime(b []byte, t time.Time) []byte {
	b = append(b, '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"')
}
