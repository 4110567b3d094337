package protocol

import (
	"encoding/json"
)

// Kinds of outbound records.
const (
	KindResponse = "response"
	KindEvent    = "event"
)

// Response is a reply to one command. Exactly one of Data and Error is set: Data when OK.
type Response struct {
	ProtocolVersion string  `json:"protocolVersion"`
	Kind            string  `json:"kind"`
	RequestID       string  `json:"requestId"`
	HostInstanceID  string  `json:"hostInstanceId"`
	SessionID       string  `json:"sessionId,omitempty"`
	Sequence        *uint64 `json:"sequence,omitempty"`
	OK              bool    `json:"ok"`
	Data            any     `json:"data,omitempty"`
	Error           *Error  `json:"error,omitempty"`
}

// Event is a session event, delivered only to connections attached to that exact session and
// generation.
type Event struct {
	ProtocolVersion string `json:"protocolVersion"`
	Kind            string `json:"kind"`
	Event           string `json:"event"`
	HostInstanceID  string `json:"hostInstanceId"`
	SessionID       string `json:"sessionId"`
	Generation      int64  `json:"generation"`
	Sequence        uint64 `json:"sequence"`
	RequestID       string `json:"requestId,omitempty"`
	Data            any    `json:"data,omitempty"`
}

// Event names emitted by this host.
const (
	EventSessionClosed = "sessionClosed"
	EventEventDropped  = "eventDropped"
	EventHostDraining  = "hostDraining"
	// EventAttachmentEvicted is the last line of a connection whose attachment made room for
	// another at an attachment bound; the connection is then closed. Only that connection
	// receives it, so it takes no sequence of its own: it carries the session's current one.
	EventAttachmentEvicted = "attachmentEvicted"
)

// Attachment bounds an attachmentEvicted event names in its limit.
const (
	AttachmentLimitPerSession = "perSession" // the session's attachments were at maxAttachmentsPerSession
	AttachmentLimitTotal      = "total"      // the host's attachments were at maxAttachments
)

// AttachmentEvictedData is the data of an attachmentEvicted event: which bound was reached and
// both bounds. The evicted attachment was the least recently attached of the process holding
// the most attachments within that bound.
type AttachmentEvictedData struct {
	Limit                    string `json:"limit"`
	MaxAttachments           int    `json:"maxAttachments"`
	MaxAttachmentsPerSession int    `json:"maxAttachmentsPerSession"`
}

// EventDroppedData is the data of an eventDropped event, which replaces an event too large to
// send at the same sequence.
type EventDroppedData struct {
	OriginalEvent string `json:"originalEvent"`
	Error         *Error `json:"error"`
}

// Command is a parsed, identity-checked command. Payload is still raw: each operation decodes it
// with DecodePayload into its own closed type.
type Command struct {
	Version        Version
	RequestID      string
	Operation      string
	SessionID      string
	HasSession     bool
	Generation     int64
	HasGeneration  bool
	IdempotencyKey string
	// Client (2.x) is the envelope's client member: the name of the MCP client airlock mcp
	// serves, sent by the bridge with each call it makes for that client. It labels the
	// call's actor (door mcp) for the policy's hooks; it is the client's own claim, never
	// authority.
	Client  string
	Payload json.RawMessage
}

// wireCommand is the outer envelope as sent. Every member stays raw so that a bad member can be
// reported by name, and so that requestId and protocolVersion can still be echoed when another
// member is wrong.
type wireCommand struct {
	ProtocolVersion json.RawMessage `json:"protocolVersion"`
	RequestID       json.RawMessage `json:"requestId"`
	Operation       json.RawMessage `json:"operation"`
	SessionID       json.RawMessage `json:"sessionId"`
	Generation      json.RawMessage `json:"generation"`
	IdempotencyKey  json.RawMessage `json:"idempotencyKey"`
	Client          json.RawMessage `json:"client"`
	Payload         json.RawMessage `json:"payload"`
}
