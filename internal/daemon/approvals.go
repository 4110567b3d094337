package daemon

// This file wires the daemon's one approval queue (internal/approval): the gate's approver
// for a call the policy marks ask at any door, the room provider's approver for the calls of
// an approve-each publication, the owner-socket commands that list and decide it
// (listApprovals, decideApproval, listRememberedApprovals, forgetApproval), and its one
// event stream: the session's attached clients, the web page, and Config.OnApproval.

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/approval"
	"github.com/airlockhq/airlock/internal/gate"
	"github.com/airlockhq/airlock/internal/protocol"
	"github.com/airlockhq/airlock/internal/room"
	"github.com/airlockhq/airlock/internal/web"
)

// Approvals returns the daemon's approval queue, where the audit journal and the metrics may
// read it (Config.OnApproval tells of its events).
func (d *Daemon) Approvals() *approval.Queue { return d.srv.approvals }

// startApprovals makes the queue and installs it as the gate's approver. It runs before the
// socket accepts.
func (d *Daemon) startApprovals() {
	d.srv.onApproval = d.cfg.OnApproval
	d.srv.approvals = approval.NewQueue(approval.Config{Timeout: d.cfg.ApprovalTimeout, OnEvent: d.srv.approvalEvent})
	d.srv.gate.SetApprover(d.srv.approvals)
}

// ApprovalEvent is the data of an approval event (protocol.EventApproval) on a session's
// attachment, and what the page's stream carries: what happened to which request or memory.
type ApprovalEvent struct {
	Type     string             `json:"type"`
	Entry    *approval.Entry    `json:"entry,omitempty"`
	Decision *approval.Decision `json:"decision,omitempty"`
	Memory   *approval.Memory   `json:"memory,omitempty"`
	Time     time.Time          `json:"time"`
}

func approvalEventOf(ev approval.Event) *ApprovalEvent {
	out := &ApprovalEvent{Type: ev.Type, Memory: ev.Memory, Time: ev.Time}
	if ev.Entry.ID != "" {
		e := ev.Entry
		out.Entry = &e
	}
	if ev.Decision.ID != "" {
		d := ev.Decision
		out.Decision = &d
	}
	return out
}

// approvalEvent is the queue's OnEvent: it runs on the goroutine that caused the event, with
// no lock of the queue held, and hands the event on without blocking.
func (s *Server) approvalEvent(ev approval.Event) {
	s.auditApproval(ev)
	if s.onApproval != nil {
		s.onApproval(ev)
	}
	data := approvalEventOf(ev)
	scope := approval.ScopeOf(ev.Entry.Actor)
	if ev.Memory != nil {
		scope = ev.Memory.Scope
	}
	if scope.Session != "" {
		s.sessions.Emit(scope.Session, scope.Generation, protocol.EventApproval, data)
	}
	s.approvalFeed.publish(data)
}

// approvalFeed fans the queue's events out to the page's streams: each subscriber has a
// bounded channel that drops its oldest event for a slow reader, and is closed when its
// context ends.
type approvalFeed struct {
	mu   sync.Mutex
	subs map[chan *ApprovalEvent]struct{} // guarded by mu
}

// approvalFeedBuffer bounds the events queued for one subscriber.
const approvalFeedBuffer = 64

func (f *approvalFeed) subscribe(ctx context.Context) <-chan *ApprovalEvent {
	ch := make(chan *ApprovalEvent, approvalFeedBuffer)
	f.mu.Lock()
	if f.subs == nil {
		f.subs = make(map[chan *ApprovalEvent]struct{})
	}
	f.subs[ch] = struct{}{}
	f.mu.Unlock()
	context.AfterFunc(ctx, func() {
		f.mu.Lock()
		delete(f.subs, ch)
		close(ch)
		f.mu.Unlock()
	})
	return ch
}

func (f *approvalFeed) publish(ev *ApprovalEvent) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for ch := range f.subs {
		select {
		case ch <- ev:
			continue
		default:
		}
		select {
		case <-ch: // full: drop the oldest
		default:
		}
		// Only publish sends, under mu: there is room now.
		ch <- ev
	}
}

// roomApprover is the room provider's approver: a call of an approve-each publication waits
// in the one queue, its actor the room and the calling host, rememberable for that
// membership.
type roomApprover struct{ q *approval.Queue }

var _ room.Approver = roomApprover{}

// ReasonRoomApproveEach is the Reason of a room call that waits because its publication
// asks for a per-call approval.
const ReasonRoomApproveEach = "room approve-each: the publication asks the operator before each call by another host"

func (r roomApprover) WaitApproval(ctx context.Context, p room.PendingApproval) error {
	// The operator's --approval-timeout bounds it, as every call's; the caller's deadline
	// too (TestRoomApprovalWaitsTheApprovalTimeout: it waited the caller's minute).
	wait := min(time.Until(p.Deadline), r.q.Timeout())
	if wait <= 0 {
		return &room.Error{Code: room.CodeApprovalTimeout, Detail: "no time left to wait for approval"}
	}
	_, err := r.q.Ask(ctx, approval.Request{Kind: approval.KindCall,
		Actor:  gate.Actor{Door: gate.DoorRoom, Room: p.Room, Host: string(p.Caller)},
		Target: p.Capability + "." + p.Action, Args: p.Args, Reason: ReasonRoomApproveEach,
		Timeout: wait, Rememberable: true})
	if err == nil {
		return nil
	}
	switch protocol.AsError(err).Code {
	case approval.CodeApprovalDenied:
		return &room.Error{Code: room.CodeApprovalDenied, Detail: "the provider's operator denied the call"}
	case approval.CodeQueueFull:
		return &room.Error{Code: room.CodeBusy, Detail: "too many requests wait for the provider's operator"}
	}
	return &room.Error{Code: room.CodeApprovalTimeout, Detail: "no decision within the approval bound"}
}

// ApprovalList is the data of listApprovals: every request waiting in the queue, oldest
// first.
type ApprovalList struct {
	Approvals []approval.Entry `json:"approvals"`
}

// ApprovalDecision is the data of decideApproval; Memory is the remembered approval it
// stored, when it remembered one.
type ApprovalDecision struct {
	ApprovalID string           `json:"approvalId"`
	Approved   bool             `json:"approved"`
	Memory     *approval.Memory `json:"memory,omitempty"`
}

// RememberedList is the data of listRememberedApprovals, oldest first.
type RememberedList struct {
	Remembered []approval.Memory `json:"remembered"`
}

// ApprovalForgotten is the data of forgetApproval.
type ApprovalForgotten struct {
	MemoryID  string `json:"memoryId"`
	Forgotten bool   `json:"forgotten"`
}

// runApprovals runs the approval queue's commands.
func (s *Server) runApprovals(cmd *protocol.Command) (any, error) {
	q := s.approvals
	switch cmd.Operation {
	case protocol.OpListApprovals:
		if e := protocol.DecodePayload(cmd, &protocol.EmptyPayload{}); e != nil {
			return nil, e
		}
		return &ApprovalList{Approvals: q.Pending()}, nil
	case protocol.OpListRememberedApprovals:
		if e := protocol.DecodePayload(cmd, &protocol.EmptyPayload{}); e != nil {
			return nil, e
		}
		return &RememberedList{Remembered: q.Remembered()}, nil
	case protocol.OpDecideApproval:
		var p protocol.DecideApprovalPayload
		if e := decodeValid(cmd, &p); e != nil {
			return nil, e
		}
		return decideApproval(q, &p, approval.ByCLI)
	case protocol.OpForgetApproval:
		var p protocol.ForgetApprovalPayload
		if e := decodeValid(cmd, &p); e != nil {
			return nil, e
		}
		if err := q.Forget(p.MemoryID); err != nil {
			return nil, err
		}
		return &ApprovalForgotten{MemoryID: p.MemoryID, Forgotten: true}, nil
	}
	return nil, protocol.Errorf(protocol.CodeUnknownOperation, "unknown operation").With("operation", cmd.Operation)
}

// decideApproval applies one decision, by "cli" or "page".
func decideApproval(q *approval.Queue, p *protocol.DecideApprovalPayload, by string) (*ApprovalDecision, error) {
	var err error
	switch {
	case !*p.Approve:
		err = q.Deny(p.ApprovalID, by)
	case p.Remember:
		err = q.ApproveRemember(p.ApprovalID, by, approval.Remember{Pattern: p.Pattern, AnyArgs: p.AnyArgs})
	default:
		err = q.Approve(p.ApprovalID, by, false)
	}
	if err != nil {
		return nil, err
	}
	out := &ApprovalDecision{ApprovalID: p.ApprovalID, Approved: *p.Approve}
	if p.Remember {
		for _, m := range q.Remembered() {
			if m.From == p.ApprovalID {
				out.Memory = &m
				break
			}
		}
	}
	return out, nil
}

// mayAsk reports whether x's call could wait for the operator at the gate, so that a door on
// a connection's reader runs it on a goroutine of its own instead.
func (x *gated) mayAsk() bool { return x.g.MayAsk(&x.call, x.rules) }

// approvalArgs is what an entry's args are for the page: valid JSON, or null.
func approvalArgs(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 || !json.Valid(raw) {
		return nil
	}
	return raw
}

// The web page's view of the queue (web.Backend): every entry, its decision, remember and
// the memories.

// Approvals lists every waiting request, with its args (which the page shows as text).
func (b *webBackend) Approvals(context.Context) ([]web.Approval, error) {
	pending := b.srv.approvals.Pending()
	out := make([]web.Approval, 0, len(pending))
	for _, e := range pending {
		a := web.Approval{ID: e.ID, Kind: string(e.Kind), Who: e.Actor.Describe(), Target: e.Target, Path: e.Path,
			Reason: e.Reason, Args: approvalArgs(e.Args), ArgsTruncated: e.ArgsTruncated, Detail: approvalArgs(e.Detail),
			Rememberable: e.Rememberable && !approval.ScopeOf(e.Actor).IsZero(), Expires: e.Deadline}
		if e.Actor.Door == gate.DoorRoom {
			a.Room, a.Caller = e.Actor.Room, e.Actor.Host
			a.Capability, a.Action, _ = strings.Cut(e.Target, ".")
		}
		out = append(out, a)
	}
	return out, nil
}

// Decide approves or denies a waiting request, by "page".
func (b *webBackend) Decide(_ context.Context, approvalID string, approve bool) error {
	if approve {
		return approvalWebError(b.srv.approvals.Approve(approvalID, approval.ByPage, false))
	}
	return approvalWebError(b.srv.approvals.Deny(approvalID, approval.ByPage))
}

// ApproveRemember approves a waiting call and remembers it, by "page".
func (b *webBackend) ApproveRemember(_ context.Context, approvalID string, r web.Remember) error {
	return approvalWebError(b.srv.approvals.ApproveRemember(approvalID, approval.ByPage,
		approval.Remember{Pattern: r.Pattern, AnyArgs: r.AnyArgs}))
}

// Remembered lists the memories.
func (b *webBackend) Remembered(context.Context) ([]web.Memory, error) {
	mem := b.srv.approvals.Remembered()
	out := make([]web.Memory, 0, len(mem))
	for _, m := range mem {
		out = append(out, web.Memory{ID: m.ID, Scope: m.Scope.String(), Target: m.Target, Match: memoryMatch(&m), Since: m.Since, Uses: m.Uses})
	}
	return out, nil
}

// Forget revokes a memory.
func (b *webBackend) Forget(_ context.Context, memoryID string) error {
	return approvalWebError(b.srv.approvals.Forget(memoryID))
}

// approvalWebError gives the queue's refusals (protocol errors whose messages quote no
// argument) the page's form.
func approvalWebError(err error) error {
	if err == nil {
		return nil
	}
	pe := protocol.AsError(err)
	if pe.Code == protocol.CodeInternal {
		return &web.Error{Code: web.CodeInternal, Message: "the request failed", Err: err}
	}
	return &web.Error{Code: pe.Code, Message: pe.Message, Err: err}
}

// memoryMatch describes what a memory matches, for a person.
func memoryMatch(m *approval.Memory) string {
	switch {
	case m.Pattern != "":
		return m.Pattern
	case m.Path != "":
		return m.Path
	case m.AnyArgs:
		return "any arguments"
	case len(m.Args) > 0:
		return string(m.Args)
	}
	return "these arguments"
}

// webApprovalEvent is an approval event as the page's call log shows it.
func webApprovalEvent(e *ApprovalEvent) web.Event {
	outcome := e.Type
	if e.Type == approval.EventAsked {
		outcome = "pending"
	}
	we := web.Event{Kind: web.EventApproval, Time: e.Time, Outcome: outcome}
	switch {
	case e.Entry != nil:
		we.Target, we.Who = e.Entry.Target, e.Entry.Actor.Describe()
		if e.Entry.Actor.Door == gate.DoorRoom {
			we.Room, we.Caller = e.Entry.Actor.Room, e.Entry.Actor.Host
			we.Capability, we.Action, _ = strings.Cut(e.Entry.Target, ".")
			we.Operation = "invoke"
		}
	case e.Memory != nil:
		we.Target, we.Who = e.Memory.Target, e.Memory.Scope.String()
	}
	return we
}
