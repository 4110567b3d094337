package room

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"slices"
	"sync"
	"time"
)

// Bounds of per-call approval.
const (
	// ApprovalTimeout bounds how long a call waits for the provider's operator to approve it.
	// A person answers from a web page or the CLI; a minute is long enough to read the call
	// and short enough that the caller's deadline stays meaningful.
	ApprovalTimeout = 60 * time.Second
	// MaxPendingApprovals bounds the calls waiting for a decision at one provider (each
	// caller has at most MaxInFlightPerCaller of them).
	MaxPendingApprovals = 64
)

// PendingApproval is a call waiting for the provider's operator: what the operator sees to
// decide. It holds the call's args (a JSON object of at most MaxArgsBytes) while the call
// waits, in memory only, and their digest.
type PendingApproval struct {
	ID         string
	Room       string
	Caller     HostID
	Capability string
	Action     string
	// Args are the call's args, which the operator reads before deciding; they are shared
	// with the waiting call and must not be modified.
	Args       json.RawMessage
	ArgsDigest string
	RequestID  string
	Since      time.Time
	Deadline   time.Time
}

// Approver decides the per-call approvals of ApproveEach publications at a provider.
// WaitApproval blocks until the call p describes is approved (nil), denied (an *Error
// approval_denied), not decided by p.Deadline or ctx ends (approval_timeout), or cannot wait
// (busy, or any *Error whose code a room reply may carry). p.ID is empty: the approver names
// the request itself. It must be safe for concurrent use. *Approvals is one; airlockd's one
// approval queue (internal/approval, adapted in internal/daemon) is another.
type Approver interface {
	WaitApproval(ctx context.Context, p PendingApproval) error
}

var _ Approver = (*Approvals)(nil)

// Approvals holds the calls waiting for a decision. It is safe for concurrent use.
type Approvals struct {
	mu      sync.Mutex
	pending map[string]*approval
	notify  func(PendingApproval)
}

type approval struct {
	info     PendingApproval
	decision chan bool // buffered 1: one decision, never blocking the decider
}

// NewApprovals returns an empty set. notify, when not nil, is called (without blocking: it
// must hand off) when a call starts waiting, so a page or a CLI can show it.
func NewApprovals(notify func(PendingApproval)) *Approvals {
	return &Approvals{pending: make(map[string]*approval), notify: notify}
}

// Pending returns the calls waiting for a decision, oldest first.
func (a *Approvals) Pending() []PendingApproval {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]PendingApproval, 0, len(a.pending))
	for _, p := range a.pending {
		out = append(out, p.info)
	}
	slices.SortFunc(out, func(x, y PendingApproval) int { return x.Since.Compare(y.Since) })
	return out
}

// Approve lets the waiting call id run.
func (a *Approvals) Approve(id string) error { return a.decide(id, true) }

// Deny refuses the waiting call id with approval_denied.
func (a *Approvals) Deny(id string) error { return a.decide(id, false) }

func (a *Approvals) decide(id string, ok bool) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	p, found := a.pending[id]
	if !found {
		return newError(CodeUnknownApproval, "no call waits for that approval")
	}
	delete(a.pending, id)
	p.decision <- ok
	return nil
}

// WaitApproval is wait until p.Deadline.
func (a *Approvals) WaitApproval(ctx context.Context, p PendingApproval) error {
	return a.wait(ctx, p, p.Deadline)
}

// wait blocks until the operator decides on info's call, until deadline (approval_timeout),
// or until ctx ends (approval_timeout too: the provider is stopping or the caller is gone).
func (a *Approvals) wait(ctx context.Context, info PendingApproval, deadline time.Time) error {
	var idb [12]byte
	_, _ = rand.Read(idb[:])
	info.ID = hex.EncodeToString(idb[:])
	info.Deadline = deadline
	p := &approval{info: info, decision: make(chan bool, 1)}
	a.mu.Lock()
	if len(a.pending) >= MaxPendingApprovals {
		a.mu.Unlock()
		return newError(CodeBusy, "too many calls wait for approval")
	}
	a.pending[info.ID] = p
	a.mu.Unlock()
	if a.notify != nil {
		a.notify(info)
	}

	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case ok := <-p.decision:
		if !ok {
			return newError(CodeApprovalDenied, "the provider's operator denied the call")
		}
		return nil
	case <-timer.C:
	case <-ctx.Done():
	}
	a.mu.Lock()
	_, still := a.pending[info.ID]
	delete(a.pending, info.ID)
	a.mu.Unlock()
	if !still {
		// A decision raced the timeout and won the lock first: honour it.
		if <-p.decision {
			return nil
		}
		return newError(CodeApprovalDenied, "the provider's operator denied the call")
	}
	return newError(CodeApprovalTimeout, "no decision within the approval bound")
}
