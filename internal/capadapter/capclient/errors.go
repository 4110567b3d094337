package capclient

import "github.com/airlockhq/airlock/internal/capadapter"

// newError returns the *capadapter.Error of a condition this package finds itself.
func newError(code, detail string) *capadapter.Error {
	return &capadapter.Error{Code: code, Detail: detail}
}

// invalidDescriptor is the error of a handshake whose descriptors break the rules.
func invalidDescriptor(detail string) *capadapter.Error {
	return newError(capadapter.CodeInvalidDescriptor, detail)
}
