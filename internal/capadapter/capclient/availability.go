package capclient

// This file owns a capability's availability as List, Status and rooms show it: whether its
// adapter is ready, and whether its latest calls could reach what it fronts.

import (
	"context"
	"encoding/json"

	"github.com/airlockhq/airlock/internal/capadapter"
)

// UnavailableAfter is how many consecutive observe or invoke calls of one capability must end
// unavailable before the capability is shown unavailable (UnavailableCalls), although its
// adapter is ready: an adapter that starts and lists fine but answers every call unavailable
// (it needs a tool or a device the machine lacks) is not shown as available. Three calls, so
// that one transient failure does not flip it; the first call that returns a result makes it
// available again.
//
// It is a display, never a gate: calls of a capability shown unavailable still go to its
// adapter, since only a call can see that it works again.
const UnavailableAfter = 3

// Why a capability is shown unavailable (CapabilitySummary.UnavailableReason).
const (
	// UnavailableNotReady: its adapter is not ready (starting, in backoff after a crash,
	// failed, or changed and waiting for approval).
	UnavailableNotReady = "adapter_not_ready"
	// UnavailableCalls: its adapter is ready, but its last UnavailableAfter calls ended
	// unavailable: the adapter answered unavailable, or the call failed the child (a timeout,
	// a malformed answer, the child's exit), which a client also sees as unavailable.
	UnavailableCalls = "calls_unavailable"
)

// track wraps done so that the call's outcome updates the capability's run of unavailable
// calls first (see noteCall).
func (a *adapter) track(ctx context.Context, id string, done func(json.RawMessage, error)) func(json.RawMessage, error) {
	return func(raw json.RawMessage, err error) {
		a.noteCall(ctx, id, err)
		done(raw, err)
	}
}

// noteCall records the outcome of a call of capability id that reached a's child: a result
// (or one withheld by a screen) ends its run of unavailable calls; an outcome a client sees as unavailable (WireCode) extends
// it, unless the caller's ctx ended first (the caller gave up: that says nothing of the
// capability); any other error (invalid_args, unsupported_action, too_large…) is an answer
// about the call, not the capability, and leaves the run as it is.
func (a *adapter) noteCall(ctx context.Context, id string, err error) {
	a.hmu.Lock()
	defer a.hmu.Unlock()
	switch {
	case err == nil, capadapter.CodeOf(err) == capadapter.CodeResultWithheld:
		// A withheld result is a well-formed answer: the capability ran.
		delete(a.failing, id)
	case ctx.Err() != nil:
	case capadapter.WireCode(err) == capadapter.CodeUnavailable:
		if a.failing == nil {
			a.failing = make(map[string]int)
		}
		if a.failing[id] < UnavailableAfter {
			a.failing[id]++
		}
	}
}

// callsUnavailable reports whether capability id's last UnavailableAfter calls ended
// unavailable.
func (a *adapter) callsUnavailable(id string) bool {
	a.hmu.Lock()
	defer a.hmu.Unlock()
	return a.failing[id] >= UnavailableAfter
}

// unavailableReasonLocked says why capability id of a is shown unavailable, or "" when it is
// available. s.mu is held.
func (a *adapter) unavailableReasonLocked(id string) string {
	switch {
	case a.state != StateReady:
		return UnavailableNotReady
	case a.callsUnavailable(id):
		return UnavailableCalls
	}
	return ""
}

// UnavailableReason says why capability id is shown unavailable (UnavailableNotReady or
// UnavailableCalls, as List shows it), or "" when it is available. A capability no adapter
// serves is UnavailableNotReady.
func (s *Supervisor) UnavailableReason(id string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.owners[id]
	if a == nil || s.closed {
		return UnavailableNotReady
	}
	return a.unavailableReasonLocked(id)
}
