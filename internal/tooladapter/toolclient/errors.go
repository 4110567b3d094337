package toolclient

import (
	"github.com/airlockhq/airlock/internal/protocol"
	"github.com/airlockhq/airlock/internal/tooladapter"
)

// Details this client adds to the wire's errors (codes and the other details are the wire's,
// tooladapter.Code*): which connection failure closed a session, and that an error came from
// the adapter rather than from the daemon's checks.
const (
	detailCause   = "cause"
	detailOrigin  = "origin"
	originAdapter = "adapter"
)

// fieldError returns a non-retryable error that names the offending member in details.field.
// The message never quotes the member's value: values may be secrets or private paths.
func fieldError(code, field, format string, args ...any) *protocol.Error {
	return protocol.Errorf(code, format, args...).With(tooladapter.DetailField, field)
}

// indeterminate marks e as the failure of a request the adapter may already have executed.
func indeterminate(e *protocol.Error) *protocol.Error {
	return e.With(tooladapter.DetailIndeterminate, true)
}
