package protocol

import (
	"encoding/json"
	"regexp"
)

// Adapter proposals (2.x): an agent's request to run, and optionally publish, an adapter it
// wrote into its session's workspace (internal/proposal; the daemon's proposals.go).
const (
	// OpProposeAdapter files a proposal for the session generation the envelope names.
	OpProposeAdapter = "proposeAdapter"
	// OpListProposals lists proposals: those of the envelope's session generation, or every
	// proposal when the envelope names no session (the operator's view).
	OpListProposals = "listProposals"
)

// proposalOperations are the proposal operations in handshake order.
var proposalOperations = []string{OpProposeAdapter, OpListProposals}

// MaxProposalBytes bounds proposeAdapter's proposal member (proposal.MaxBytes; a test holds
// the two equal).
const MaxProposalBytes = 16 << 10

// proposalIDPattern is a proposal id: 24 lowercase hex digits.
var proposalIDPattern = regexp.MustCompile(`^[0-9a-f]{24}$`)

// ProposeAdapterPayload is the payload of proposeAdapter. The payload is open, as every
// command payload is, but Proposal is closed: the daemon decodes it with proposal.Parse,
// which refuses unknown, duplicate and case-variant keys with the field.
type ProposeAdapterPayload struct {
	Proposal json.RawMessage `json:"proposal"`
}

// Validate checks that a proposal is present and within its bound.
func (p *ProposeAdapterPayload) Validate() *Error {
	switch {
	case len(p.Proposal) == 0 || p.Proposal[0] != '{':
		return invalidField("payload.proposal", "must be an object")
	case len(p.Proposal) > MaxProposalBytes:
		return invalidField("payload.proposal", "must be at most %d bytes", MaxProposalBytes)
	}
	return nil
}

// ListProposalsPayload is the payload of listProposals: ID, when set, names one proposal.
type ListProposalsPayload struct {
	ID string `json:"id,omitempty"`
}

// Validate checks the id's grammar.
func (p *ListProposalsPayload) Validate() *Error {
	if p.ID != "" && !proposalIDPattern.MatchString(p.ID) {
		return invalidField("payload.id", "must match %s", proposalIDPattern.String())
	}
	return nil
}
