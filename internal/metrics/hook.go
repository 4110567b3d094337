package metrics

import (
	"context"

	"github.com/airlockhq/airlock/internal/gate"
)

// Codes of a capability call whose capability, or action, no adapter serves: the name is
// the caller's, so it is no label value (capadapter.CodeUnknownCapability and
// capadapter.CodeUnsupportedAction; roomhost answers the same codes).
const (
	codeUnknownCapability = "unknown_capability"
	codeUnsupportedAction = "unsupported_action"
)

// Known reports whether a capability exists on this host and whether it has action, for a
// call the gate refused before its adapter could say so. It must be safe for concurrent use
// and cheap.
type Known func(capability, action string) (hasCapability, hasAction bool)

// Hook returns the gate hook (gate.Hook) that counts every call at the gate, once, in its
// After: the calls that ran with their outcome code, and the refusals — the door's own checks
// (StageGrant), the policy's, a failed record — with theirs. The door label is the call's
// gate door; the duration is the gate's, from admission to answer (zero for a refusal of the
// door's own checks).
//
// A capability or action that no adapter serves is no label value: for a call that ran, the
// adapter's code says so (unknown_capability, unsupported_action); for a refusal before the
// adapter, known is asked (nil: every name a refused call carries is dropped).
//
// Its Before does nothing and never fails. A nil *Metrics returns a hook that counts nothing.
func (m *Metrics) Hook(known Known) gate.Hook { return &callHook{m: m, known: known} }

type callHook struct {
	m     *Metrics
	known Known
}

func (*callHook) Before(context.Context, *gate.Call) error { return nil }

func (h *callHook) After(c *gate.Call, o gate.Outcome) {
	if h.m == nil {
		return
	}
	mc := Call{Door: string(c.Actor.Door), Code: o.Code}
	switch c.Kind {
	case gate.KindTool:
		mc.Operation = c.Operation
	case gate.KindObserve:
		mc.Operation, mc.Capability = "observe", c.Capability
	default:
		mc.Operation, mc.Capability, mc.Action = "invoke", c.Capability, c.Action
	}
	if c.Kind != gate.KindTool {
		mc.Capability, mc.Action = h.labels(mc.Capability, mc.Action, o)
	}
	h.m.ObserveCall(mc, o.Duration)
}

// labels returns the capability and action label values of a capability call that ended
// with o.
func (h *callHook) labels(capability, action string, o gate.Outcome) (string, string) {
	if o.Stage == gate.StageAdapter {
		switch o.Code {
		case codeUnknownCapability:
			return "", ""
		case codeUnsupportedAction:
			return capability, ""
		}
		return capability, action
	}
	if h.known == nil {
		return "", ""
	}
	okCap, okAction := h.known(capability, action)
	if !okCap {
		return "", ""
	}
	if !okAction {
		action = ""
	}
	return capability, action
}
