package protocol

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"strings"
	"time"
	"unicode/utf8"
)

// Agent-turn operations that version 2 adds: the durable state of a wake, and an operator's
// verdict on one that a restart left indeterminate.
const (
	OpTicket    = "ticket"
	OpReconcile = "reconcile"
)

// Bounds of the agent-turn payloads, in Unicode code points.
const (
	MaxPromptChars  = 262144
	MaxMessageChars = 262144
	MaxSourceLen    = 128
	// TicketIDLen is the length of a ticket id: "ticket-" and 43 base64url characters.
	TicketIDLen = len(ticketPrefix) + 43
)

const ticketPrefix = "ticket-"

// Error codes of agent turns, the wake journal, recovery and quarantine. Each is stable.
const (
	CodeSessionQueueFull         = "session_queue_full"
	CodeSessionNotRunning        = "session_not_running"
	CodeSessionFailed            = "session_failed"
	CodeSessionPrecondition      = "session_precondition_failed"
	CodeIdempotencyConflict      = "idempotency_conflict"
	CodeRequestIndeterminate     = "request_indeterminate"
	CodeDurableAdmission         = "durable_admission_unavailable"
	CodeTicketNotFound           = "ticket_not_found"
	CodeTicketNotIndeterminate   = "ticket_not_indeterminate"
	CodeTurnFailed               = "turn_failed"
	CodeAborted                  = "aborted"
	CodeReprovisionRequired      = "tool_adapter_reprovision_required"
	CodeCredentialsRequired      = "credentials_required"
	CodeRecoveryOpenTimeout      = "recovery_open_timeout"
	CodeRecoveryDeadline         = "recovery_deadline_exceeded"
	CodeRestoreOpenFailed        = "restore_open_failed"
	CodeRestoreWakeFailed        = "restore_wake_failed"
	CodeManifestGenerationDiffer = "manifest_generation_mismatch"
	CodeConversationMissing      = "conversation_identity_missing"
)

// RecoveryReprovisionRequired is the state of a quarantined session's recovery condition.
const RecoveryReprovisionRequired = "reprovision_required"

// Event names of agent turns.
const (
	EventPromptAccepted = "promptAccepted"
	EventTurnStart      = "turnStart"
	EventMessageStart   = "messageStart"
	EventMessageUpdate  = "messageUpdate"
	EventMessageEnd     = "messageEnd"
	EventToolStart      = "toolStart"
	EventToolEnd        = "toolEnd"
	EventTurnEnd        = "turnEnd"
	EventSessionIdle    = "sessionIdle"
	EventRequestFailed  = "requestFailed"
)

// WakePayload is the payload of wake.
type WakePayload struct {
	Prompt          string  `json:"prompt"`
	Source          *string `json:"source,omitempty"`
	WaitForTerminal *bool   `json:"waitForTerminal,omitempty"`
}

// Validate checks the bounds of a wake.
func (p *WakePayload) Validate() *Error {
	if e := checkText("payload.prompt", p.Prompt, MaxPromptChars); e != nil {
		return e
	}
	if p.Source != nil && !validIdentifier(*p.Source, MaxSourceLen) {
		return invalidField("payload.source", "must be 1 to %d characters without control characters", MaxSourceLen)
	}
	return nil
}

// Wait reports the effective waitForTerminal (default true).
func (p *WakePayload) Wait() bool { return p.WaitForTerminal == nil || *p.WaitForTerminal }

// SourceText returns the source, or "".
func (p *WakePayload) SourceText() string {
	if p.Source == nil {
		return ""
	}
	return *p.Source
}

// MessagePayload is the payload of steer and followUp.
type MessagePayload struct {
	Message string `json:"message"`
}

// Validate checks the bounds of a steer or followUp message.
func (p *MessagePayload) Validate() *Error {
	return checkText("payload.message", p.Message, MaxMessageChars)
}

func checkText(field, s string, max int) *Error {
	if s == "" {
		return invalidField(field, "must not be empty")
	}
	if utf8.RuneCountInString(s) > max {
		return invalidField(field, "must be at most %d characters", max)
	}
	return nil
}

// TicketPayload is the payload of ticket (2.x).
type TicketPayload struct {
	TicketID string `json:"ticketId"`
}

// Validate checks the form of a ticket id.
func (p *TicketPayload) Validate() *Error { return checkTicketID(p.TicketID) }

// Reconcile outcomes.
const (
	OutcomeSucceeded = "succeeded"
	OutcomeFailed    = "failed"
)

// ReconcilePayload is the payload of reconcile (2.x): an operator's verdict on an indeterminate
// wake.
type ReconcilePayload struct {
	TicketID string `json:"ticketId"`
	Outcome  string `json:"outcome"`
}

// Validate checks the ticket id and the outcome.
func (p *ReconcilePayload) Validate() *Error {
	if e := checkTicketID(p.TicketID); e != nil {
		return e
	}
	if p.Outcome != OutcomeSucceeded && p.Outcome != OutcomeFailed {
		return invalidField("payload.outcome", "must be %q or %q", OutcomeSucceeded, OutcomeFailed)
	}
	return nil
}

func checkTicketID(id string) *Error {
	rest, ok := strings.CutPrefix(id, ticketPrefix)
	if !ok || len(id) != TicketIDLen {
		return invalidField("payload.ticketId", "must be %q and 43 base64url characters", ticketPrefix)
	}
	for i := 0; i < len(rest); i++ {
		c := rest[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return invalidField("payload.ticketId", "must be %q and 43 base64url characters", ticketPrefix)
		}
	}
	return nil
}

// TicketID returns the ticket id of a wake: "ticket-" and the first 43 characters of the
// base64url SHA-256 of "WAKE\n" + sessionId + "\n" + idempotencyKey. A retry of the same wake
// has the same ticket.
func TicketID(sessionID, idempotencyKey string) string {
	sum := sha256.Sum256([]byte("WAKE\n" + sessionID + "\n" + idempotencyKey))
	return ticketPrefix + base64.RawURLEncoding.EncodeToString(sum[:])[:43]
}

// WakeFingerprint is the lowercase hex SHA-256 of the canonical JSON of
// {sessionId, generation, idempotencyKey, payload} where payload is the wake payload without
// waitForTerminal: two wakes with one key are the same request exactly when this agrees.
// Canonical JSON has its object keys sorted and no insignificant space.
func WakeFingerprint(sessionID string, generation int64, idempotencyKey string, p *WakePayload) string {
	payload := map[string]any{"prompt": p.Prompt}
	if p.Source != nil {
		payload["source"] = *p.Source
	}
	b, err := json.Marshal(map[string]any{
		"sessionId":      sessionID,
		"generation":     generation,
		"idempotencyKey": idempotencyKey,
		"payload":        payload,
	})
	if err != nil {
		panic("protocol: wake fingerprint not serializable: " + err.Error())
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Ticket states as a ticket resource names them.
const (
	TicketQueued        = "queued"
	TicketRunning       = "running"
	TicketSucceeded     = "succeeded"
	TicketFailed        = "failed"
	TicketIndeterminate = "indeterminate"
)

// Usage counts the tokens of a turn's model calls, as the provider reported them.
type Usage struct {
	PromptTokens     int `json:"promptTokens"`
	CompletionTokens int `json:"completionTokens"`
	TotalTokens      int `json:"totalTokens"`
}

// TurnResult is the outcome of a completed agent turn.
type TurnResult struct {
	RequestID  string `json:"requestId"`
	Text       string `json:"text"`
	StopReason string `json:"stopReason"`
	ModelCalls int    `json:"modelCalls"`
	ToolCalls  int    `json:"toolCalls"`
	Usage      Usage  `json:"usage"`
}

// WakeResult is the data of a wake that waited for its turn to end.
// Session is the snapshot of the session's generation, absent when it stopped being resident
// before the answer (closed or replaced meanwhile).
type WakeResult struct {
	Result  json.RawMessage  `json:"result"`
	Session *SessionSnapshot `json:"session,omitempty"`
}

// TicketResource is the durable state of one wake.
type TicketResource struct {
	TicketID       string          `json:"ticketId"`
	RequestID      string          `json:"requestId"`
	IdempotencyKey string          `json:"idempotencyKey"`
	Operation      string          `json:"operation"` // always "prompt"
	State          string          `json:"state"`
	SubmittedAt    time.Time       `json:"submittedAt"`
	UpdatedAt      time.Time       `json:"updatedAt"`
	SessionID      string          `json:"sessionId"`
	Generation     int64           `json:"generation"`
	Reconciled     bool            `json:"reconciled,omitempty"`
	Result         json.RawMessage `json:"result,omitempty"`
	Error          *Error          `json:"error,omitempty"`
}

// TicketResult is the data of wake with waitForTerminal:false, of ticket and of reconcile.
type TicketResult struct {
	Ticket TicketResource `json:"ticket"`
}

// QueuedResult is the data of steer and followUp.
type QueuedResult struct {
	Queued bool `json:"queued"`
}

// AbortResult is the data of abort: false when no turn was active.
type AbortResult struct {
	Aborted bool `json:"aborted"`
}

// PromptAcceptedData is the data of a promptAccepted event.
type PromptAcceptedData struct {
	IdempotencyKey string `json:"idempotencyKey"`
	TicketID       string `json:"ticketId,omitempty"`
	QueuedTurns    int    `json:"queuedTurns"`
}

// RequestFailedData is the data of a requestFailed event.
type RequestFailedData struct {
	Error *Error `json:"error"`
}

// ConversationRef names a session's conversation transcript: the JSONL file a restart reopens.
type ConversationRef struct {
	ID   string `json:"id"`
	File string `json:"file"`
}
