package capadapter

import "errors"

// Protocol error codes: the closed set an adapter may answer with, and the codes a caller of
// this package sees for the same conditions when they are found locally (an undeclared action
// is unsupported_action whether the adapter or the supervisor notices it).
const (
	CodeInvalidRequest    = "invalid_request"
	CodeUnsupportedMethod = "unsupported_method"
	CodeUnknownCapability = "unknown_capability"
	CodeUnsupportedAction = "unsupported_action"
	CodeInvalidArgs       = "invalid_args"
	CodeUnavailable       = "unavailable"
	CodeTooLarge          = "too_large"
	CodeInternal          = "internal"
)

// Local codes: conditions the runtime classifies itself. None of them is ever sent to an
// adapter; WireCode maps each to the closed protocol set for projection.
const (
	// CodeTimeout: the adapter did not answer within the call deadline (the child is
	// killed), or, from Supervisor.Close, a child could not be reaped in time.
	CodeTimeout = "timeout"
	// CodeMalformedResponse: a response frame that is not valid protocol: bad framing or
	// UTF-8, not strict JSON, wrong version or id, both or neither of result and error, an
	// unknown error code, or an unsolicited or duplicate frame (the child is killed).
	CodeMalformedResponse = "malformed_response"
	// CodeResultWithheld: the adapter answered an observe or invoke with a well-formed result,
	// paired with its request, that fails one of the result screens (Error.Screen names which;
	// see ScreenResult). The call ran: an invoke's effect happened. Its result is withheld
	// from the caller, for this call only; the child is not killed, since an answer that
	// paired correctly leaves no stale answer to pair with a later request. Not retryable:
	// the same call would run again and be withheld again.
	CodeResultWithheld = "result_withheld"
	// CodeInvalidDescriptor: a descriptor that breaks the descriptor rules, or a describe
	// that differs from the listed descriptor (the child is killed).
	CodeInvalidDescriptor = "invalid_descriptor"
	// CodeCapabilityCount: list returned no descriptor, or more than MaxCapabilities.
	CodeCapabilityCount = "capability_count"
	// CodeDescriptorChanged: a restarted adapter no longer lists exactly the descriptors it
	// was registered with; the operator must register it again.
	CodeDescriptorChanged = "descriptor_changed"
	// CodeInvalidRegistration: a registration that breaks the registration bounds.
	CodeInvalidRegistration = "invalid_registration"
	// CodeCapabilityConflict: a registration whose capability ids another adapter owns.
	CodeCapabilityConflict = "capability_conflict"
	// CodeUnknownAdapter: no registration has that name.
	CodeUnknownAdapter = "unknown_adapter"
	// CodeTooManyAdapters: the supervisor already runs MaxAdapters adapters.
	CodeTooManyAdapters = "too_many_adapters"
	// CodeAdapterChanged: the executable (or the script passed to an interpreter) of a
	// registration is no longer the file whose SHA-256 was recorded when it was approved; the
	// adapter is not started until the operator approves it again.
	CodeAdapterChanged = "adapter_changed"
	// CodeLeaseExpired: the registration's lease has ended (a registration restored or
	// submitted after its expiry).
	CodeLeaseExpired = "lease_expired"
)

// protocolCodes is the closed set of error codes an adapter may send.
var protocolCodes = map[string]bool{
	CodeInvalidRequest:    true,
	CodeUnsupportedMethod: true,
	CodeUnknownCapability: true,
	CodeUnsupportedAction: true,
	CodeInvalidArgs:       true,
	CodeUnavailable:       true,
	CodeTooLarge:          true,
	CodeInternal:          true,
}

// IsProtocolCode reports whether code is one of the closed set of adapter error codes.
func IsProtocolCode(code string) bool { return protocolCodes[code] }

// Error is every error this package returns: a stable code, whether the adapter itself
// reported it, and a detail written by this package. Detail never quotes adapter output,
// arguments, results or the child's environment, so an Error is safe to log or project.
//
// Errors compare by code: errors.Is(err, ErrTimeout) holds for any timeout.
type Error struct {
	Code string
	// FromAdapter is set when the adapter answered with this code in an error response; the
	// child is then healthy and keeps running.
	FromAdapter bool
	Detail      string
	// Screen names the result screen a result_withheld result failed (one of the Screen
	// constants); it is empty for every other code. It never carries the matched text.
	Screen string
}

func (e *Error) Error() string {
	s := "capadapter: " + e.Code
	if e.FromAdapter {
		s += " (reported by the adapter)"
	}
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// WireMessage is err as the message of a wire error whose code is code (CodeOf or WireCode of
// err). An *Error gives its detail, after its own code only when code is another one (a
// timeout projected to unavailable), and says when the adapter reported it; Error's
// "capadapter: CODE: " would repeat the code the message travels with
// ("airlock: invalid_args: capadapter: invalid_args: …"). Any other error gives Error().
func WireMessage(err error, code string) string {
	var e *Error
	if !errors.As(err, &e) {
		return err.Error()
	}
	msg := e.Detail
	switch {
	case e.Code != code && msg != "":
		msg = e.Code + ": " + msg
	case e.Code != code, msg == "" && !e.FromAdapter:
		msg = e.Code
	}
	switch {
	case e.FromAdapter && msg != "":
		msg += " (reported by the adapter)"
	case e.FromAdapter:
		msg = "reported by the adapter"
	}
	return msg
}

// Is reports whether target is an *Error with the same code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// Sentinels for errors.Is; compare by code only.
var (
	ErrInvalidRequest      = &Error{Code: CodeInvalidRequest}
	ErrUnsupportedMethod   = &Error{Code: CodeUnsupportedMethod}
	ErrUnknownCapability   = &Error{Code: CodeUnknownCapability}
	ErrUnsupportedAction   = &Error{Code: CodeUnsupportedAction}
	ErrInvalidArgs         = &Error{Code: CodeInvalidArgs}
	ErrUnavailable         = &Error{Code: CodeUnavailable}
	ErrTooLarge            = &Error{Code: CodeTooLarge}
	ErrInternal            = &Error{Code: CodeInternal}
	ErrTimeout             = &Error{Code: CodeTimeout}
	ErrMalformedResponse   = &Error{Code: CodeMalformedResponse}
	ErrResultWithheld      = &Error{Code: CodeResultWithheld}
	ErrInvalidDescriptor   = &Error{Code: CodeInvalidDescriptor}
	ErrCapabilityCount     = &Error{Code: CodeCapabilityCount}
	ErrDescriptorChanged   = &Error{Code: CodeDescriptorChanged}
	ErrInvalidRegistration = &Error{Code: CodeInvalidRegistration}
	ErrCapabilityConflict  = &Error{Code: CodeCapabilityConflict}
	ErrUnknownAdapter      = &Error{Code: CodeUnknownAdapter}
	ErrTooManyAdapters     = &Error{Code: CodeTooManyAdapters}
	ErrAdapterChanged      = &Error{Code: CodeAdapterChanged}
	ErrLeaseExpired        = &Error{Code: CodeLeaseExpired}
)

func newError(code, detail string) *Error { return &Error{Code: code, Detail: detail} }

// CodeOf returns the code of err's *Error, or CodeInternal for any other error (and "" for nil).
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

// WireCode maps err to the closed protocol set, for projecting a failure to a peer that only
// knows protocol codes. Transport failures (timeout, malformed or unsolicited responses, bad
// descriptors, a dead child) all become unavailable, as the protocol specifies; registration
// problems become invalid_request. result_withheld is kept as it is: it is no transport
// failure (the call ran and the child serves on), and a caller told unavailable would retry
// an invoke that already took effect. No adapter ever sends it.
func WireCode(err error) string {
	code := CodeOf(err)
	switch {
	case code == "":
		return ""
	case protocolCodes[code], code == CodeResultWithheld:
		return code
	case code == CodeInvalidRegistration, code == CodeCapabilityConflict, code == CodeUnknownAdapter, code == CodeLeaseExpired:
		return CodeInvalidRequest
	}
	return CodeUnavailable
}
