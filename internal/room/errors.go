package room

import "errors"

// Error codes of room calls and room records. A call's caller sees exactly one of them; the
// codes of the provider's local invoker (the capability supervisor's, such as invalid_args or
// unsupported_action) pass through as their own codes, mapped by ProviderConfig.ErrorCode.
const (
	// CodeUnauthorized: the request is not authenticated by a member of the room with its
	// current key (no key record, a MAC that is not the caller's link's), is outside the
	// clock window, names a capability, action or operation the provider
	// has not published to the caller, or the caller stopped being a present member before the
	// result (the result is then withheld).
	CodeUnauthorized = "unauthorized"
	// CodeUnavailable: the provider is not reachable on the bus, is shutting down, or (at
	// the caller) is not a member of the room whose key record this host verified.
	CodeUnavailable = "unavailable"
	// CodeBusy: the caller already has MaxInFlightPerCaller calls at the provider, or the
	// provider's handlers are all taken.
	CodeBusy = "busy"
	// CodeTimeout: no result within the call deadline.
	CodeTimeout = "timeout"
	// CodeDuplicateRequest: the caller reused a requestId of the duplicate window for a
	// different request, or one whose record the window no longer holds.
	CodeDuplicateRequest = "duplicate_request"
	// CodeApprovalDenied: the provider's operator denied the call.
	CodeApprovalDenied = "approval_denied"
	// CodeApprovalTimeout: no decision on the call within the approval bound.
	CodeApprovalTimeout = "approval_timeout"
	// CodeInvalidRequest: a call that is not well formed (fields, grammar, digest).
	CodeInvalidRequest = "invalid_request"
	// CodeTooLarge: args over MaxArgsBytes, or a result over MaxResultBytes.
	CodeTooLarge = "too_large"
	// CodeInvalidReply: a reply that is not well formed or not authenticated by the provider
	// called.
	CodeInvalidReply = "invalid_reply"
	// CodeInvalidRecord: a room record (roster, presence, projection, key record) that is
	// malformed or not signed by the host it must come from.
	CodeInvalidRecord = "invalid_record"
	// CodeInvalidKey: a host key file that is malformed, not a regular file, or readable or
	// writable by others.
	CodeInvalidKey = "invalid_key"
	// CodeUnknownApproval: an approval decision for a call that is not waiting for one.
	CodeUnknownApproval = "unknown_approval"
	// CodeInternal: a failure with no code of its own (the invoker's uncoded errors).
	CodeInternal = "internal"
)

// Error is every error this package returns: a stable code and a detail written by this
// package. Detail never quotes arguments, results, keys or invoker output, so an Error is safe
// to log, show and send. Remote is set on a caller's error when the provider answered with it.
//
// Errors compare by code: errors.Is(err, ErrBusy) holds for any busy error.
type Error struct {
	Code   string
	Remote bool
	Detail string
}

func (e *Error) Error() string {
	s := "room: " + e.Code
	if e.Remote {
		s += " (from the provider)"
	}
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// Is reports whether target is an *Error with the same code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// Sentinels for errors.Is; they compare by code only.
var (
	ErrUnauthorized     = &Error{Code: CodeUnauthorized}
	ErrUnavailable      = &Error{Code: CodeUnavailable}
	ErrBusy             = &Error{Code: CodeBusy}
	ErrTimeout          = &Error{Code: CodeTimeout}
	ErrDuplicateRequest = &Error{Code: CodeDuplicateRequest}
	ErrApprovalDenied   = &Error{Code: CodeApprovalDenied}
	ErrApprovalTimeout  = &Error{Code: CodeApprovalTimeout}
	ErrInvalidRequest   = &Error{Code: CodeInvalidRequest}
	ErrTooLarge         = &Error{Code: CodeTooLarge}
	ErrInvalidReply     = &Error{Code: CodeInvalidReply}
	ErrInvalidRecord    = &Error{Code: CodeInvalidRecord}
	ErrInvalidKey       = &Error{Code: CodeInvalidKey}
	ErrUnknownApproval  = &Error{Code: CodeUnknownApproval}
	ErrInternal         = &Error{Code: CodeInternal}
)

func newError(code, detail string) *Error { return &Error{Code: code, Detail: detail} }

// CodeOf returns the code of err's *Error, CodeInternal for any other error, "" for nil.
func CodeOf(err error) string {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInternal
}
