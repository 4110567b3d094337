package server

import (
	"errors"
	"path/filepath"

	"github.com/airlockhq/airlock/internal/ndjson"
	"github.com/airlockhq/airlock/internal/protocol"
)

// Admin operations (the "op" member of an admin request).
const (
	OpGrant       = "grant"
	OpGrants      = "grants"
	OpRevokeGrant = "revoke-grant"
)

// Admin error codes. Grant requests also fail with the descriptor codes of
// internal/tooladapter (invalid_tool_adapter_binding, unsupported_tool_operation,
// invalid_tool_adapter_limit, invalid_tool_adapter_identity, invalid_tool_adapter_endpoint),
// because a grant is checked by the same parser the daemon runs on the descriptor it prints,
// and with confinement_unavailable when the kernel lacks openat2.
const (
	CodeInvalidRequest = "invalid_request" // not one closed admin request object
	CodeRootInvalid    = "root_invalid"    // the grant root cannot be opened as a directory
	CodeGrantNotFound  = "grant_not_found" // revoke-grant of an unknown grant id
	CodeGrantExists    = "grant_exists"    // grant naming a grantId that is live already
	CodeGrantCapacity  = "grant_capacity"  // MaxGrants live grants already
	CodeServerClosing  = "server_closing"  // the server is shutting down
	// CodeLineTimeout: no request line within the admin line timeout of connecting or of the
	// last answer (retryable); the connection is closed.
	CodeLineTimeout = "line_timeout"
	// CodeConnectionEvicted: the idle connection was closed to admit another (retryable).
	CodeConnectionEvicted = "connection_evicted"
)

// maxAdminLineBytes bounds one admin request line; a grant request is well under 2 KiB.
const maxAdminLineBytes = 64 << 10

// LimitsRequest holds the limits of a grant request; a missing member takes its default
// (DefaultLimits).
type LimitsRequest struct {
	MaxRequestBytes       *int64 `json:"maxRequestBytes,omitempty"`
	MaxResponseBytes      *int64 `json:"maxResponseBytes,omitempty"`
	MaxConcurrentRequests *int64 `json:"maxConcurrentRequests,omitempty"`
	MaxQueuedRequests     *int64 `json:"maxQueuedRequests,omitempty"`
	RequestTimeoutMs      *int64 `json:"requestTimeoutMs,omitempty"`
	MaxIdempotencyKeys    *int64 `json:"maxIdempotencyKeys,omitempty"`
	IdempotencyTtlMs      *int64 `json:"idempotencyTtlMs,omitempty"`
}

// AdminRequest is one request on the admin socket, one NDJSON line:
//
//	{"op":"grant","root":DIR,"hostInstanceId":ID,"sessionId":ID,"generation":N,
//	 "operations":[…],"limits":{…}?,"adapterId":ID?,"grantId":ID?}
//	{"op":"grants"}
//	{"op":"revoke-grant","grantId":ID}
//
// Members an op does not take are refused. A grant's grantId, when given, names the grant
// instead of a fresh random id, so that a caller that loses the answer (airlockd minting for a
// session, whose deadline passed) can still revoke exactly that grant; an id already live is
// refused grant_exists.
type AdminRequest struct {
	Op             string         `json:"op"`
	Root           *string        `json:"root,omitempty"`
	HostInstanceID *string        `json:"hostInstanceId,omitempty"`
	SessionID      *string        `json:"sessionId,omitempty"`
	Generation     *int64         `json:"generation,omitempty"`
	Operations     *[]string      `json:"operations,omitempty"`
	Limits         *LimitsRequest `json:"limits,omitempty"`
	AdapterID      *string        `json:"adapterId,omitempty"`
	GrantID        *string        `json:"grantId,omitempty"`
}

// AdminResponse is the answer to one admin request: Data on success, Error otherwise.
type AdminResponse struct {
	OK    bool            `json:"ok"`
	Data  any             `json:"data,omitempty"`
	Error *protocol.Error `json:"error,omitempty"`
}

// DecodeAdminRequest decodes one admin request line strictly (closed objects, no duplicate or
// case-variant keys) and checks that it has exactly the members of its op. It checks shapes
// only; the grant's values are checked when the grant is made. Errors are invalid_request with
// details.field, and never quote a value.
func DecodeAdminRequest(line []byte) (*AdminRequest, *protocol.Error) {
	if len(line) > maxAdminLineBytes {
		return nil, invalid("", "request exceeds %d bytes", maxAdminLineBytes)
	}
	var r AdminRequest
	if err := ndjson.Decode(line, &r, ndjson.Closed); err != nil {
		var de *ndjson.DecodeError
		if errors.As(err, &de) {
			return nil, invalid(de.Path, "request is not a closed admin request object (%s)", de.Reason)
		}
		return nil, invalid("", "request is not a closed admin request object")
	}
	grantOnly := []struct {
		field   string
		present bool
	}{
		{"root", r.Root != nil}, {"hostInstanceId", r.HostInstanceID != nil}, {"sessionId", r.SessionID != nil},
		{"generation", r.Generation != nil}, {"operations", r.Operations != nil}, {"limits", r.Limits != nil},
		{"adapterId", r.AdapterID != nil},
	}
	switch r.Op {
	case OpGrant:
		for _, m := range grantOnly[:5] {
			if !m.present {
				return nil, invalid(m.field, "grant requires %s", m.field)
			}
		}
		if r.GrantID != nil && !validGrantID(*r.GrantID) {
			return nil, invalid("grantId", "grantId must be 1 to %d letters, digits, '.', '_' or '-'", maxGrantIDLen)
		}
		if !filepath.IsAbs(*r.Root) {
			return nil, invalid("root", "root must be an absolute path")
		}
	case OpGrants, OpRevokeGrant:
		for _, m := range grantOnly {
			if m.present {
				return nil, invalid(m.field, "%s does not take %s", r.Op, m.field)
			}
		}
		if (r.Op == OpRevokeGrant) != (r.GrantID != nil) {
			if r.Op == OpRevokeGrant {
				return nil, invalid("grantId", "revoke-grant requires grantId")
			}
			return nil, invalid("grantId", "grants does not take grantId")
		}
	case "":
		return nil, invalid("op", "request requires op")
	default:
		return nil, invalid("op", "op must be grant, grants or revoke-grant")
	}
	return &r, nil
}

// maxGrantIDLen bounds a caller-chosen grant id.
const maxGrantIDLen = 64

// validGrantID reports whether id may name a grant: 1 to maxGrantIDLen ASCII letters, digits,
// '.', '_' or '-', so that it prints in the grants table as it is.
func validGrantID(id string) bool {
	if id == "" || len(id) > maxGrantIDLen {
		return false
	}
	for _, c := range []byte(id) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

func invalid(field, format string, args ...any) *protocol.Error {
	e := protocol.Errorf(CodeInvalidRequest, format, args...)
	if field != "" {
		e = e.With("field", field)
	}
	return e
}
