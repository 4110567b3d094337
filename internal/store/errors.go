package store

import (
	"errors"

	"github.com/airlockhq/airlock/internal/ndjson"
)

// Error codes the store adds to those of package protocol. Both are stable and not retryable.
const (
	// CodeStateLocked: another process (another airlockd) holds the state database.
	CodeStateLocked = "state_locked"
	// CodeCatalogFull: the catalog already holds MaxRecords records.
	CodeCatalogFull = "catalog_full"
)

// decodeCause turns a strict-decoding failure into a cause that is safe to log: the reason and
// the member path, never the Detail, which for a malformed timestamp quotes the stored value.
func decodeCause(err error) error {
	var de *ndjson.DecodeError
	if errors.As(err, &de) {
		return &ndjson.DecodeError{Reason: de.Reason, Path: de.Path}
	}
	return errors.New("json: malformed value")
}
