package daemon

import (
	"strings"

	"github.com/airlockhq/airlock/internal/approval"
	"github.com/airlockhq/airlock/internal/audit"
	"github.com/airlockhq/airlock/internal/gate"
)

// auditApproval records an event of the approval queue in the audit journal as a decision:
// the target's op is approval.asked, approval.approved, approval.denied, approval.timed_out,
// approval.remembered (a memory answered a request at once) or approval.forgotten; the door
// is whoever decided (owner for the CLI, web for the page, daemon for the queue itself: a
// request asked, a memory's answer, a timeout); the actor is who asked; the arguments are
// the request's (their digest, as every record's). Without a journal it does nothing.
func (s *Server) auditApproval(ev approval.Event) {
	if s.audit == nil {
		return
	}
	e := audit.Entry{Kind: audit.KindDecision, Door: approvalDoor(ev), Outcome: approvalOutcome(ev.Type)}
	if ev.Entry.ID == "" && ev.Memory != nil {
		// A memory forgotten: its target, and the scope it answered for.
		sc := ev.Memory.Scope
		e.Actor = auditActor(gate.Actor{Session: sc.Session, Generation: sc.Generation, Room: sc.Room, Host: sc.Host}, "")
		e.Target = approvalTarget(approval.KindCall, ev.Memory.Target, ev.Memory.Path)
	} else {
		e.Actor = auditActor(ev.Entry.Actor, "")
		e.Target = approvalTarget(ev.Entry.Kind, ev.Entry.Target, ev.Entry.Path)
		if !ev.Entry.ArgsTruncated {
			e.Args = ev.Entry.Args
		}
	}
	e.Target.Op = "approval." + ev.Type
	s.audit.appendLogged(e)
}

// approvalDoor is the door a queue event came through: who decided it.
func approvalDoor(ev approval.Event) audit.Door {
	switch ev.Type {
	case approval.EventApproved, approval.EventDenied:
		switch ev.Decision.By {
		case approval.ByCLI:
			return audit.DoorOwner
		case approval.ByPage:
			return audit.DoorWeb
		}
	}
	return audit.DoorDaemon
}

// approvalOutcome is a queue event's outcome code: what the asker was (or will be) told.
func approvalOutcome(typ string) string {
	switch typ {
	case approval.EventAsked:
		return "waiting"
	case approval.EventDenied:
		return approval.CodeApprovalDenied
	case approval.EventTimedOut:
		return approval.CodeApprovalTimeout
	}
	return auditOutcomeOK
}

// approvalTarget is the journal's target of a request: an fs call's operation (as the action)
// and path, a capability call's capability and action, a proposal's adapter and step (run or
// publish).
func approvalTarget(kind approval.Kind, target, path string) audit.Target {
	switch kind {
	case approval.KindRun, approval.KindPublish:
		return audit.Target{Adapter: strings.TrimPrefix(target, "adapter "), Action: string(kind)}
	}
	if strings.HasPrefix(target, "fs.") {
		return audit.Target{Action: target, Path: path}
	}
	if i := strings.LastIndexByte(target, '.'); i > 0 {
		return audit.Target{Capability: target[:i], Action: target[i+1:]}
	}
	return audit.Target{}
}
