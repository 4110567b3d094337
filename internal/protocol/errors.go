package protocol

import (
	"errors"
	"fmt"
)

// Error codes of the daemon protocol. Each is stable: clients branch on it, and docs/protocol.md
// lists what provokes it.
const (
	// Framing and parsing.
	CodeLineTooLarge           = "line_too_large"
	CodeInvalidUTF8            = "invalid_utf8"
	CodeInvalidJSON            = "invalid_json"
	CodeInvalidField           = "invalid_field"
	CodeInvalidProtocolVersion = "invalid_protocol_version"
	CodeIncompatibleProtocol   = "incompatible_protocol"
	CodeUnknownOperation       = "unknown_operation"
	CodeUnsupportedOperation   = "unsupported_operation"
	CodeUnsupportedResource    = "unsupported_resource_policy"
	CodeInvalidToolDescriptor  = "invalid_tool_adapter_descriptor"
	CodeDuplicateRequestID     = "duplicate_request_id"
	CodeConnectionBusy         = "connection_busy"
	CodeConnectionCapacity     = "connection_capacity"
	CodeConnectionEvicted      = "connection_evicted"      // an idle connection closed to admit another
	CodeLineTimeout            = "line_timeout"            // a first or partial line not completed in time
	CodeConnectionControlOnly  = "connection_control_only" // not a ControlOperation, on a reserved-band connection
	CodeOutboundTooLarge       = "outbound_record_too_large"
	CodeOutboundNotSerializ    = "outbound_not_serializable"
	CodeInternal               = "internal_error"

	// Sessions and admission.
	CodeSessionNotFound       = "session_not_found"
	CodeStaleGeneration       = "stale_generation"
	CodeSessionPolicyConflict = "session_policy_conflict"
	CodeSessionBusy           = "session_busy"
	CodeSessionCapacity       = "session_capacity"
	CodeHostNotReady          = "host_not_ready"
	CodeHostDraining          = "host_draining"
	CodeOpenFailed            = "open_failed"
	CodeAttachmentCapacity    = "attachment_capacity" // an attachment bound, and nothing may make room

	// Durability.
	CodeInsecureStatePath = "insecure_state_path"
	CodeCorruptState      = "corrupt_state"
	CodeCatalogUpdate     = "catalog_update_failed"

	// Wake journal.
	CodeDurabilityFailed         = "durability_failed"
	CodeDurabilityCompletion     = "durability_completion_failed"
	CodeCorruptJournal           = "corrupt_journal"
	CodeInvalidJournalTransition = "invalid_journal_transition"
	CodeJournalEntryMissing      = "journal_entry_missing"
	CodeJournalRecordTooLarge    = "journal_record_too_large"
)

// Error is the error body of a response: a stable machine code, a human message, whether the
// same request may succeed later, and optional details that never carry secrets.
//
// Errors compare by code: errors.Is(err, &Error{Code: CodeStaleGeneration}) holds for any
// stale_generation error, however it was wrapped.
type Error struct {
	Code      string         `json:"code"`
	Message   string         `json:"message"`
	Retryable bool           `json:"retryable"`
	Details   map[string]any `json:"details,omitempty"`
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Is reports whether target is an *Error with the same code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// Errorf returns a non-retryable error with the given code.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Retryable returns a retryable error with the given code.
func Retryable(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...), Retryable: true}
}

// With returns e with one more detail. It modifies and returns e, for chaining at construction.
func (e *Error) With(key string, value any) *Error {
	if e.Details == nil {
		e.Details = make(map[string]any, 2)
	}
	e.Details[key] = value
	return e
}

// AsError converts any error into a wire error. An *Error anywhere in the chain is returned as
// is; anything else becomes internal_error with a fixed message, because an arbitrary Go error
// may carry paths or other detail that must not reach a client.
func AsError(err error) *Error {
	if err == nil {
		return nil
	}
	var pe *Error
	if errors.As(err, &pe) {
		return pe
	}
	return &Error{Code: CodeInternal, Message: "internal error"}
}

// Wrap pairs the wire error a client may see with the cause an operator reads in the log:
// errors.As finds class, errors.Is finds both, and Error prints both. class.Message is all a
// client sees; cause must obey the same rule about secrets, since it is logged. A nil cause
// returns class itself.
func Wrap(class *Error, cause error) error {
	if cause == nil {
		return class
	}
	return &wrapped{class: class, cause: cause}
}

type wrapped struct {
	class *Error
	cause error
}

func (e *wrapped) Error() string   { return e.class.Error() + ": " + e.cause.Error() }
func (e *wrapped) Unwrap() []error { return []error{e.class, e.cause} }
