package room

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/busport"
	"github.com/airlockhq/airlock/internal/ndjson"
)

// InvokeTimeout bounds the local invoker's work on one call, as the original runtime's 8 s
// handler context does inside the room's 10 s deadline: the reply still fits the caller's
// deadline after the invoker gives up.
const InvokeTimeout = 8 * time.Second

// DefaultProviderConcurrency bounds the calls one provider runs at once, over all callers and
// rooms; a call beyond it is answered busy at once.
const DefaultProviderConcurrency = 64

// Invoker runs a capability locally. In the daemon it is the capability supervisor; its
// errors are mapped to wire codes by ProviderConfig.ErrorCode. Implementations must be safe
// for concurrent use and honour ctx's deadline.
type Invoker interface {
	Observe(ctx context.Context, capability string) (json.RawMessage, error)
	Invoke(ctx context.Context, capability, action string, args json.RawMessage) (json.RawMessage, error)
}

// CallRecord describes one call a provider answered, for a call log. It holds no args and no
// result.
type CallRecord struct {
	Room       string
	Caller     HostID
	Capability string
	Operation  Operation
	Action     string
	RequestID  string
	// Code is empty for success, else the error code the caller got.
	Code string
	// Retry is set when the reply was the recorded reply of an earlier copy of the call.
	Retry    bool
	Duration time.Duration
}

// ProviderConfig configures a Provider. Key, Directory, Publications and Invoker are
// required, and Conn for Start.
type ProviderConfig struct {
	Key          *HostKey
	Conn         busport.Conn
	Directory    *Directory
	Publications *Publications
	Invoker      Invoker
	// Approvals holds calls of ApproveEach publications; nil makes such calls wait for a
	// decision nobody can give, so they end approval_timeout.
	Approvals *Approvals
	// ErrorCode maps an invoker error to a wire code ([a-z][a-z_]{0,31}); nil, or a code
	// outside that grammar, gives internal.
	ErrorCode func(error) string
	// Concurrency bounds calls running at once; zero means DefaultProviderConcurrency.
	Concurrency int
	// OnCall, when not nil, is called after each reply is decided. It must not block.
	OnCall func(CallRecord)
}

// Provider answers room calls to this host's published capabilities. For every call it
// checks, in order: the call is well formed and addressed to this host on the subject of its
// room; the caller is a member of the room's current roster whose key record this host
// verified, its MAC is right under the key of the link from the caller to this host, and its
// time is within ClockWindow; the caller and this host are members of the room's current
// roster, and a publication of the capability into the room allows the caller the operation
// and action (unauthorized); the duplicate window
// and the caller's in-flight bound (duplicate_request, busy); a per-call approval, when the
// publication asks for one. It then runs the invoker, bounds the result, authorizes again —
// the publication, the roster and the caller's presence may have changed — and only then
// sends the result, to the caller's reply inbox alone.
//
// A provider serves one subject per room it serves (ServeRoom), without wildcard: a NATS hub
// tells a leaf node about a subscription only when the leaf's user may publish to all of it,
// and a host's broker permissions allow calls into its own rooms only.
type Provider struct {
	cfg    ProviderConfig
	id     HostID
	window *window
	// slots bounds the calls running at once over all rooms' subscriptions.
	slots chan struct{}

	mu      sync.Mutex
	started bool
	rooms   map[string]busport.Subscription // nil value: to serve at Start
}

// NewProvider returns a provider; Start makes it serve.
func NewProvider(cfg ProviderConfig) (*Provider, error) {
	if cfg.Key == nil || cfg.Directory == nil || cfg.Publications == nil || cfg.Invoker == nil {
		return nil, errors.New("room: provider: incomplete configuration")
	}
	if cfg.Approvals == nil {
		cfg.Approvals = NewApprovals(nil)
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = DefaultProviderConcurrency
	}
	return &Provider{cfg: cfg, id: cfg.Key.ID(), window: newWindow(),
		slots: make(chan struct{}, cfg.Concurrency), rooms: make(map[string]busport.Subscription)}, nil
}

// Start makes the provider serve the rooms ServeRoom named, and from then on each room at
// once when ServeRoom names it.
func (p *Provider) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.started {
		return nil
	}
	if p.cfg.Conn == nil {
		return errors.New("room: provider: no bus connection")
	}
	p.started = true
	for room, sub := range p.rooms {
		if sub != nil {
			continue
		}
		if err := p.serveRoom(room); err != nil {
			return err
		}
	}
	return nil
}

// ServeRoom serves calls to this host in room, on the room's call subject; once started, it
// returns when the subject is served. It is idempotent.
func (p *Provider) ServeRoom(room string) error {
	if !ValidRoomID(room) {
		return fmt.Errorf("room: provider: invalid room id")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if sub, ok := p.rooms[room]; ok && (sub != nil || !p.started) {
		return nil
	}
	if !p.started {
		p.rooms[room] = nil
		return nil
	}
	return p.serveRoom(room)
}

// serveRoom subscribes room's call subject; p.mu is held.
func (p *Provider) serveRoom(room string) error {
	sub, err := p.cfg.Conn.Serve(CallSubject(room, p.id), p.cfg.Concurrency, (*providerHandler)(p))
	if err != nil {
		return fmt.Errorf("room: provider: %w", err)
	}
	p.rooms[room] = sub
	return nil
}

// StopRoom stops serving room: calls of the room still running see their context cancelled
// and are answered before it returns. It is idempotent.
func (p *Provider) StopRoom(room string) error {
	p.mu.Lock()
	sub := p.rooms[room]
	delete(p.rooms, room)
	p.mu.Unlock()
	if sub == nil {
		return nil
	}
	return sub.Stop()
}

// Close stops serving every room; calls still running see their context cancelled and are
// answered before Close returns. It is idempotent.
func (p *Provider) Close() error {
	p.mu.Lock()
	subs := p.rooms
	p.rooms = make(map[string]busport.Subscription)
	p.started = false
	p.mu.Unlock()
	var errs []error
	for _, sub := range subs {
		if sub != nil {
			errs = append(errs, sub.Stop())
		}
	}
	return errors.Join(errs...)
}

// providerHandler is the Provider as a busport.Handler.
type providerHandler Provider

func (h *providerHandler) Serve(ctx context.Context, subject string, payload []byte) []byte {
	p := (*Provider)(h)
	select {
	case p.slots <- struct{}{}:
		defer func() { <-p.slots }()
	default:
		return h.Overloaded(subject, payload)
	}
	return p.serve(ctx, subject, payload, time.Now())
}

func (h *providerHandler) Overloaded(_ string, payload []byte) []byte {
	p := (*Provider)(h)
	r := replyTo(payload)
	r.Code = CodeBusy
	return p.refuse(r)
}

// replyTo is an error reply addressed as well as payload allows, for calls refused before or
// without a full decode.
func replyTo(payload []byte) *Reply {
	var w struct {
		Room      string `json:"room"`
		Caller    HostID `json:"caller"`
		RequestID string `json:"requestId"`
	}
	if len(payload) <= MaxCallBytes {
		_ = json.Unmarshal(payload, &w)
	}
	return &Reply{Room: w.Room, Caller: w.Caller, RequestID: w.RequestID}
}

// refuse authenticates a refusal of a call that was not decoded or not verified: busy, when
// the provider is overloaded, with the link key of the caller it names if that caller is a
// member whose key this host already holds (cheap, and a busy it could not have asked for is
// of no use to anyone); any other refusal, and a busy to an unknown caller, with the host key.
// Neither reads the bus, so an overloaded provider answers at once.
func (p *Provider) refuse(r *Reply) []byte {
	var link *linkKeys
	if r.Code == CodeBusy && r.Caller.Valid() && ValidRoomID(r.Room) {
		if pub, ok := p.cfg.Directory.memberKey(context.Background(), r.Room, r.Caller, false); ok {
			link, _ = p.cfg.Key.link(r.Caller, p.id, pub)
		}
	}
	return sealReply(p.cfg.Key, link, r)
}

// serve answers one call received at now.
func (p *Provider) serve(ctx context.Context, subject string, payload []byte, now time.Time) []byte {
	c, err := DecodeCall(payload)
	if err != nil {
		r := replyTo(payload)
		r.Code = CodeOf(err)
		return p.refuse(r)
	}
	reply, retry, code := p.answer(ctx, subject, c, now)
	if p.cfg.OnCall != nil {
		p.cfg.OnCall(CallRecord{
			Room: c.Room, Caller: c.Caller, Capability: c.Capability, Operation: c.Operation,
			Action: c.Action, RequestID: c.RequestID, Code: code, Retry: retry, Duration: time.Since(now),
		})
	}
	return reply
}

// answer decides the reply to a decoded call, and whether it was a retry's recorded reply.
func (p *Provider) answer(ctx context.Context, subject string, c *Call, now time.Time) ([]byte, bool, string) {
	// link is the caller's link to this host once the call's MAC verified under it; until
	// then a refusal is signed with the host key, so that a caller with a stale key still
	// gets a refusal it can authenticate, and a forged call no MAC of the caller's link.
	var link *linkKeys
	fail := func(err error) ([]byte, bool, string) {
		code := CodeOf(err)
		return sealReply(p.cfg.Key, link, &Reply{Room: c.Room, Caller: c.Caller, RequestID: c.RequestID, Code: code}), false, code
	}
	if c.Provider != p.id || roomOfSubject(subject) != c.Room {
		return fail(newError(CodeUnauthorized, "call addressed to another provider or room"))
	}
	// The caller must be a member whose key record this host verified; its MAC is then
	// checked with the key of the link from it to this host.
	callerKey, ok := p.cfg.Directory.memberKey(ctx, c.Room, c.Caller, true)
	if !ok {
		return fail(newError(CodeUnauthorized, "the caller is not a member with a known key"))
	}
	l, err := p.cfg.Key.link(c.Caller, p.id, callerKey)
	if err != nil {
		return fail(err)
	}
	auth := c.AuthBytes()
	if err := verifyCall(c, auth, l, now); err != nil {
		return fail(err)
	}
	link = l
	pub, err := p.authorize(c)
	if err != nil {
		return fail(err)
	}
	// The caller's deadline, on this host's clock: its timeout less the time the call has
	// already spent since signing (as far as the clocks agree).
	deadline := now.Add(c.Timeout - min(max(now.Sub(c.Time), 0), c.Timeout))
	e, retry, err := p.window.admit(c, auth, now)
	if err != nil {
		return fail(err)
	}
	if retry {
		timer := time.NewTimer(time.Until(deadline))
		defer timer.Stop()
		select {
		case <-e.done:
			return e.reply, true, replyCode(e.reply)
		case <-timer.C:
			return fail(newError(CodeTimeout, "the first copy of the call is still running"))
		case <-ctx.Done():
			return fail(newError(CodeUnavailable, "the provider is stopping"))
		}
	}
	departed, _ := p.cfg.Directory.departures(c.Room, c.Caller)
	r := p.run(ctx, c, pub, now, deadline, departed)
	reply := sealReply(p.cfg.Key, link, r)
	p.window.finish(c.Caller, e, reply)
	return reply, false, r.Code
}

// replyCode is the code a recorded reply carries, for the call log.
func replyCode(reply []byte) string {
	var w struct {
		Code string `json:"code"`
	}
	_ = json.Unmarshal(reply, &w)
	return w.Code
}

// authorize checks that c's caller and this host are members of the room's current roster
// and that a publication allows the call. Every refusal is the same unauthorized, so a caller
// learns nothing of what it may not see.
func (p *Provider) authorize(c *Call) (Publication, error) {
	d := p.cfg.Directory
	if !d.IsMember(c.Room, c.Caller) || !d.IsMember(c.Room, p.id) {
		return Publication{}, newError(CodeUnauthorized, "not a member of the room")
	}
	pub, ok := p.cfg.Publications.Lookup(c.Room, c.Capability)
	if !ok || !pub.Allows(c.Caller, c.Operation, c.Action) {
		return Publication{}, newError(CodeUnauthorized, "not published to the caller")
	}
	return pub, nil
}

// run waits for approval when pub asks for it, invokes, bounds the result and authorizes
// again. It returns the reply unauthenticated.
func (p *Provider) run(ctx context.Context, c *Call, pub Publication, now, deadline time.Time, departed uint64) *Reply {
	r := &Reply{Room: c.Room, Caller: c.Caller, RequestID: c.RequestID}
	fail := func(code string) *Reply { r.Code = code; return r }

	if pub.ApproveEach && c.Operation == Invoke && c.Caller != p.id {
		// The invoke keeps InvokeTimeout of the caller's deadline after the decision.
		until := earliest(now.Add(ApprovalTimeout), deadline.Add(-InvokeTimeout))
		if !until.After(now) {
			return fail(CodeApprovalTimeout)
		}
		d := argsDigest(c.Args)
		err := p.cfg.Approvals.wait(ctx, PendingApproval{
			Room: c.Room, Caller: c.Caller, Capability: c.Capability, Action: c.Action,
			ArgsDigest: hex.EncodeToString(d[:]), RequestID: c.RequestID, Since: now,
		}, until)
		if err != nil {
			return fail(CodeOf(err))
		}
		// The wait was long: the publication or the roster may have changed meanwhile.
		if _, err := p.authorize(c); err != nil {
			return fail(CodeUnauthorized)
		}
	}

	ictx, cancel := context.WithDeadline(ctx, earliest(deadline, time.Now().Add(InvokeTimeout)))
	defer cancel()
	var result json.RawMessage
	var err error
	if c.Operation == Observe {
		result, err = p.cfg.Invoker.Observe(ictx, c.Capability)
	} else {
		result, err = p.cfg.Invoker.Invoke(ictx, c.Capability, c.Action, c.Args)
	}
	switch {
	case err != nil && ctx.Err() != nil:
		return fail(CodeUnavailable)
	case err != nil && (ictx.Err() != nil || errors.Is(err, context.DeadlineExceeded)):
		return fail(CodeTimeout)
	case err != nil:
		return fail(p.errorCode(err))
	case len(result) > MaxResultBytes:
		return fail(CodeTooLarge)
	}
	compact, cerr := ndjson.AppendCompact(nil, result)
	if cerr != nil || len(compact) == 0 {
		return fail(CodeInternal)
	}

	// Authorized again at result time: still published to the caller, the caller still a
	// member, and no departure of the caller seen since the call was admitted.
	if _, err := p.authorize(c); err != nil {
		return fail(CodeUnauthorized)
	}
	if now, ok := p.cfg.Directory.departures(c.Room, c.Caller); !ok || now != departed {
		return fail(CodeUnauthorized)
	}
	r.Result = compact
	return r
}

func (p *Provider) errorCode(err error) string {
	if p.cfg.ErrorCode == nil {
		return CodeInternal
	}
	code := p.cfg.ErrorCode(err)
	if !validCode(code) {
		return CodeInternal
	}
	return code
}

func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
