package store

import (
	"errors"

	"github.com/airlockhq/airlock/internal/ndjson"
	"github.com/airlockhq/airlock/internal/protocol"
)

// Error codes the store adds to those of package protocol. Both are stable and not retryable.
const (
	// CodeStateLocked: another process (another airlockd) holds the state database.
	CodeStateLocked = "state_locked"
	// CodeCatalogFull: the catalog already holds MaxRecords records.
	CodeCatalogFull = "catalog_full"
)

// codedError pairs the wire error a client may see with the cause an operator reads in the log.
// errors.As finds the *protocol.Error, errors.Is finds both, and Error prints both.
//
// class.Message is all a client sees, so it names paths and session ids (neither is secret) but
// never record contents; cause is for the daemon's log and must obey the same rule.
type codedError struct {
	class *protocol.Error
	cause error
}

func (e *codedError) Error() string {
	if e.cause == nil {
		return e.class.Error()
	}
	return e.class.Error() + ": " + e.cause.Error()
}

func (e *codedError) Unwrap() []error {
	if e.cause == nil {
		return []error{e.class}
	}
	return []error{e.class, e.cause}
}

// wrap returns class with cause attached; a nil cause returns class itself.
func wrap(class *protocol.Error, cause error) error {
	if cause == nil {
		return class
	}
	return &codedError{class: class, cause: cause}
}

// decodeCause turns a strict-decoding failure into a cause that is safe to log: the reason and
// the member path, never the Detail, which for a malformed timestamp quotes the stored value.
func decodeCause(err error) error {
	var de *ndjson.DecodeError
	if errors.As(err, &de) {
		return &ndjson.DecodeError{Reason: de.Reason, Path: de.Path}
	}
	return errors.New("json: malformed value")
}
