package roomhost

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/room"
)

// Kinds of event.
const (
	EventCall     = "call"
	EventApproval = "approval"
)

// Outcomes of an approval event; a call event's outcome is "ok" or its error code.
const (
	OutcomeOK       = "ok"
	OutcomePending  = "pending"
	OutcomeApproved = "approved"
	OutcomeDenied   = "denied"
)

// Event is one entry of the call log: a call this host made or answered, or an approval
// that started waiting or was decided. It holds no args and no result.
type Event struct {
	Kind       string         `json:"kind"`
	Time       time.Time      `json:"time"`
	Room       string         `json:"room"`
	Caller     room.HostID    `json:"caller"`
	Provider   room.HostID    `json:"provider"`
	Capability string         `json:"capabilityId"`
	Operation  room.Operation `json:"operation,omitempty"`
	Action     string         `json:"action,omitempty"`
	Outcome    string         `json:"outcome"`
	DurationMs int64          `json:"durationMs"`
	// ApprovalID names the approval of an approval event.
	ApprovalID string `json:"approvalId,omitempty"`
}

// Approval is a call waiting for this host's operator to approve or deny it, with its args
// (a JSON object of at most room.MaxArgsBytes, which the provider holds in memory while the
// call waits and never stores or logs) and their SHA-256 digest.
type Approval struct {
	ID         string          `json:"id"`
	Room       string          `json:"room"`
	Caller     room.HostID     `json:"caller"`
	Capability string          `json:"capabilityId"`
	Action     string          `json:"action"`
	Args       json.RawMessage `json:"args"`
	ArgsDigest string          `json:"argsDigest"`
	Since      time.Time       `json:"since"`
	Expires    time.Time       `json:"expiresAt"`
}

// Observe observes capability of provider (a host id) in room id, as a caller: the call is signed by
// this host and authorized by the provider.
func (s *Service) Observe(ctx context.Context, id, provider, capability string) (json.RawMessage, error) {
	return s.call(ctx, room.Request{Room: id, Provider: room.HostID(provider), Capability: capability, Operation: room.Observe})
}

// Invoke invokes action of capability of provider in room id with args (a JSON object;
// empty means {}), as a caller. A publication with per-call approval makes the call wait,
// up to Config.ApprovalWait, for the provider's operator.
func (s *Service) Invoke(ctx context.Context, id, provider, capability, action string, args json.RawMessage) (json.RawMessage, error) {
	if len(args) == 0 {
		args = json.RawMessage(`{}`)
	}
	return s.call(ctx, room.Request{Room: id, Provider: room.HostID(provider), Capability: capability, Operation: room.Invoke,
		Action: action, Args: args})
}

func (s *Service) call(ctx context.Context, req room.Request) (json.RawMessage, error) {
	start, err := s.begin(&req)
	if err != nil {
		return nil, err
	}
	p, err := s.caller.Prepare(req, start)
	var result json.RawMessage
	if err == nil {
		result, err = s.caller.Send(ctx, p)
	}
	return s.end(req, start, result, err)
}

// StartObserve is Observe without the wait, as StartInvoke is Invoke without it.
func (s *Service) StartObserve(ctx context.Context, id, provider, capability string, done func(json.RawMessage, error)) bool {
	return s.startCall(ctx, room.Request{Room: id, Provider: room.HostID(provider), Capability: capability, Operation: room.Observe}, done)
}

// StartInvoke is Invoke without the wait: done receives exactly what Invoke would return,
// exactly once, on the goroutine that ends the call or before StartInvoke returns. done must
// not block. When the call could not start without waiting (the provider's key record must be
// read from the bus first) StartInvoke returns false and does nothing: the call is for
// Invoke, on a goroutine that may wait.
func (s *Service) StartInvoke(ctx context.Context, id, provider, capability, action string, args json.RawMessage, done func(json.RawMessage, error)) bool {
	if len(args) == 0 {
		args = json.RawMessage(`{}`)
	}
	return s.startCall(ctx, room.Request{Room: id, Provider: room.HostID(provider), Capability: capability, Operation: room.Invoke,
		Action: action, Args: args}, done)
}

func (s *Service) startCall(ctx context.Context, req room.Request, done func(json.RawMessage, error)) bool {
	start, err := s.begin(&req)
	if err != nil {
		done(nil, err)
		return true
	}
	return s.caller.Start(ctx, req, start, func(result json.RawMessage, err error) {
		done(s.end(req, start, result, err))
	})
}

// begin checks a call of this host's and completes req, before it is prepared; it returns
// the call's start.
func (s *Service) begin(req *room.Request) (time.Time, error) {
	if _, err := s.record(req.Room); err != nil {
		return time.Time{}, err
	}
	if !req.Provider.Valid() {
		return time.Time{}, errorf(room.CodeInvalidRequest, "a provider is a host id: 64 lowercase hex digits")
	}
	start := time.Now()
	if pub, ok := s.lookup(req.Room, req.Provider, req.Capability); ok && pub.ApproveEach && req.Operation == room.Invoke && req.Provider != s.key.ID() {
		req.AwaitApproval, req.ApprovalWait = true, s.cfg.ApprovalWait
	}
	return start, nil
}

// end logs a call of this host's that ended and maps its error.
func (s *Service) end(req room.Request, start time.Time, result json.RawMessage, err error) (json.RawMessage, error) {
	outcome := OutcomeOK
	if err != nil {
		outcome = room.CodeOf(err)
	}
	s.events.add(Event{Kind: EventCall, Time: start.UTC(), Room: req.Room, Caller: s.key.ID(), Provider: req.Provider,
		Capability: req.Capability, Operation: req.Operation, Action: req.Action, Outcome: outcome,
		DurationMs: time.Since(start).Milliseconds()})
	if err != nil {
		return nil, asError(err)
	}
	return result, nil
}

// provided logs a call this host answered as provider. A call of this host to itself is
// logged once, as the caller.
func (s *Service) provided(r room.CallRecord) {
	if r.Caller == s.key.ID() {
		return
	}
	outcome := OutcomeOK
	if r.Code != "" {
		outcome = r.Code
	}
	s.events.add(Event{Kind: EventCall, Time: time.Now().Add(-r.Duration).UTC(), Room: r.Room, Caller: r.Caller,
		Provider: s.key.ID(), Capability: r.Capability, Operation: r.Operation, Action: r.Action, Outcome: outcome,
		DurationMs: r.Duration.Milliseconds()})
}

// pending logs a call that started waiting for approval. It runs on the provider's goroutine
// and does not block.
func (s *Service) pending(p room.PendingApproval) {
	s.events.add(Event{Kind: EventApproval, Time: p.Since.UTC(), Room: p.Room, Caller: p.Caller, Provider: s.key.ID(),
		Capability: p.Capability, Operation: room.Invoke, Action: p.Action, Outcome: OutcomePending, ApprovalID: p.ID})
}

// Approvals lists the calls waiting for this host's operator, oldest first.
func (s *Service) Approvals(ctx context.Context) ([]Approval, error) {
	out := []Approval{}
	for _, p := range s.approve.Pending() {
		out = append(out, Approval{ID: p.ID, Room: p.Room, Caller: p.Caller, Capability: p.Capability, Action: p.Action,
			Args: slices.Clone(p.Args), ArgsDigest: p.ArgsDigest, Since: p.Since.UTC(), Expires: p.Deadline.UTC()})
	}
	return out, nil
}

// Decide approves or denies a waiting call.
func (s *Service) Decide(ctx context.Context, approvalID string, approve bool) error {
	var info *room.PendingApproval
	for _, p := range s.approve.Pending() {
		if p.ID == approvalID {
			info = &p
			break
		}
	}
	var err error
	if approve {
		err = s.approve.Approve(approvalID)
	} else {
		err = s.approve.Deny(approvalID)
	}
	if err != nil {
		return asError(err)
	}
	if info != nil {
		outcome := OutcomeDenied
		if approve {
			outcome = OutcomeApproved
		}
		s.events.add(Event{Kind: EventApproval, Time: time.Now().UTC(), Room: info.Room, Caller: info.Caller,
			Provider: s.key.ID(), Capability: info.Capability, Operation: room.Invoke, Action: info.Action,
			Outcome: outcome, ApprovalID: approvalID})
	}
	return nil
}

// Calls returns the call log, oldest first.
func (s *Service) Calls() []Event { return s.events.snapshot() }

// Subscribe returns a channel of events from now on, closed when ctx ends or the service
// closes. A reader that falls SubscriberBuffer events behind loses the oldest.
func (s *Service) Subscribe(ctx context.Context) (<-chan Event, error) {
	return s.events.subscribe(ctx)
}

// callLog is a bounded ring of events with subscribers.
type callLog struct {
	mu     sync.Mutex
	ring   []Event
	next   int
	full   bool
	subs   map[chan Event]struct{}
	closed bool
}

func newCallLog(n int) *callLog {
	return &callLog{ring: make([]Event, n), subs: make(map[chan Event]struct{})}
}

func (l *callLog) add(e Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ring[l.next] = e
	l.next = (l.next + 1) % len(l.ring)
	if l.next == 0 {
		l.full = true
	}
	for ch := range l.subs {
		for {
			select {
			case ch <- e:
			default:
				// Drop the oldest queued event and try again; only add sends, under mu.
				select {
				case <-ch:
				default:
				}
				continue
			}
			break
		}
	}
}

func (l *callLog) snapshot() []Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Event
	if l.full {
		out = append(out, l.ring[l.next:]...)
	}
	return append(out, l.ring[:l.next]...)
}

func (l *callLog) subscribe(ctx context.Context) (<-chan Event, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, errorf(room.CodeUnavailable, "the room service is closed")
	}
	if len(l.subs) >= MaxSubscribers {
		return nil, errorf(room.CodeBusy, "%d subscribers already", MaxSubscribers)
	}
	ch := make(chan Event, SubscriberBuffer)
	l.subs[ch] = struct{}{}
	context.AfterFunc(ctx, func() { l.unsubscribe(ch) })
	return ch, nil
}

func (l *callLog) unsubscribe(ch chan Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.subs[ch]; ok {
		delete(l.subs, ch)
		close(ch)
	}
}

func (l *callLog) closeAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	for ch := range l.subs {
		delete(l.subs, ch)
		close(ch)
	}
}
