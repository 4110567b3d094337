package room

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
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

// StartInvoker is an Invoker that can also start a call without waiting for it: done
// receives exactly what Observe or Invoke would return, exactly once, on the goroutine that
// ends the call (before the Start method returns, when the call is refused at once). The
// Start methods must not block, and done may not be called with a lock held that the
// provider's callbacks could need. The daemon's capability supervisor is one; a provider
// whose invoker is one runs a call without a goroutine of its own.
type StartInvoker interface {
	Invoker
	StartObserve(ctx context.Context, capability string, done func(json.RawMessage, error))
	StartInvoke(ctx context.Context, capability, action string, args json.RawMessage, done func(json.RawMessage, error))
}

// ProvidedCall is what a provider's Invoker learns, from its ctx, of the room call it runs:
// the room and the calling host, both authorized by then. The daemon's gate records them as
// the call's actor.
type ProvidedCall struct {
	Room   string
	Caller HostID
}

type providedCallKey struct{}

// CallOf returns the room call an Invoker's ctx carries, if it runs one.
func CallOf(ctx context.Context) (ProvidedCall, bool) {
	pc, ok := ctx.Value(providedCallKey{}).(ProvidedCall)
	return pc, ok
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
	// Approver, when set, decides the calls of ApproveEach publications instead of
	// Approvals (airlockd's one approval queue).
	Approver Approver
	// ErrorCode maps an invoker error to a wire code ([a-z][a-z_]{0,31}); nil, or a code
	// outside that grammar, gives internal.
	ErrorCode func(error) string
	// Concurrency bounds calls running at once; zero means DefaultProviderConcurrency.
	Concurrency int
	// OnCall, when not nil, is called after each reply is decided. It must not block.
	OnCall func(CallRecord)
	// Floors keeps the callers' floor leases durable, so that no call runs twice across a
	// restart of this provider; NewProvider loads them. Nil keeps the duplicate window in
	// memory only: after a restart, a call captured before it runs again if it is sent again
	// within ClockWindow of its signing.
	Floors Floors
}

// Provider answers room calls to this host's published capabilities. For every call it
// checks, in order: the call is well formed and addressed to this host on the subject of its
// room; the caller is a member of the room's current roster whose key record this host
// verified, its MAC is right under the key of the link from the caller to this host, and its
// time is within ClockWindow; the caller and this host are members of the room's current
// roster, and a publication of the capability into the room allows the caller the operation
// and action (unauthorized); the duplicate window
// and the caller's in-flight bound (duplicate_request, busy); with Floors, the caller's
// durable floor lease, raised first when the call is signed after it (unavailable when it
// cannot be written); a per-call approval, when the publication asks for one. It then runs the invoker, bounds the result, authorizes again —
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
	if cfg.Approver == nil {
		cfg.Approver = cfg.Approvals
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = DefaultProviderConcurrency
	}
	w := newWindow()
	if cfg.Floors != nil {
		leases, err := cfg.Floors.Load(time.Now().Add(-FloorRetention))
		if err != nil {
			return nil, fmt.Errorf("room: provider: loading the callers' floors: %w", err)
		}
		w = newDurableWindow(leases)
	}
	return &Provider{cfg: cfg, id: cfg.Key.ID(), window: w,
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
	sub, err := p.cfg.Conn.ServeMsg(CallSubject(room, p.id), p.cfg.Concurrency, (*providerHandler)(p))
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

// providerHandler is the Provider as a busport.MsgHandler.
type providerHandler Provider

// ServeMsg takes one of the slots shared by every room's subscription until the call is
// answered, or answers busy at once when none is free.
func (h *providerHandler) ServeMsg(ctx context.Context, subject string, m busport.Msg, respond func(busport.Msg)) {
	p := (*Provider)(h)
	select {
	case p.slots <- struct{}{}:
	default:
		respond(h.OverloadedMsg(subject, m))
		return
	}
	p.start(ctx, subject, m, time.Now(), func(r busport.Msg) {
		respond(r)
		<-p.slots
	})
}

func (h *providerHandler) OverloadedMsg(_ string, m busport.Msg) busport.Msg {
	p := (*Provider)(h)
	r := replyTo(m)
	r.Code = CodeBusy
	return p.refuse(r)
}

// replyTo is an error reply addressed as well as m's header allows, for calls refused before
// or without a full decode.
func replyTo(m busport.Msg) *Reply {
	return &Reply{Room: field(m.Header, hdrRoom), Caller: HostID(field(m.Header, hdrCaller)), RequestID: field(m.Header, hdrRequestID)}
}

// refuse authenticates a refusal of a call that was not decoded or not verified: busy, when
// the provider is overloaded, with the link key of the caller it names if that caller is a
// member whose key this host already holds (cheap, and a busy it could not have asked for is
// of no use to anyone); any other refusal, and a busy to an unknown caller, with the host key.
// Neither reads the bus, so an overloaded provider answers at once.
func (p *Provider) refuse(r *Reply) busport.Msg {
	var link *linkKeys
	if r.Code == CodeBusy && r.Caller.Valid() && ValidRoomID(r.Room) {
		if pub, ok := p.cfg.Directory.memberKey(context.Background(), r.Room, r.Caller, false); ok {
			link, _ = p.cfg.Key.link(r.Caller, p.id, pub)
		}
	}
	return sealReply(p.cfg.Key, link, r)
}

// serve answers one call received at now and returns the reply, once it is decided.
func (p *Provider) serve(ctx context.Context, subject string, m busport.Msg, now time.Time) busport.Msg {
	ch := make(chan busport.Msg, 1)
	p.start(ctx, subject, m, now, func(r busport.Msg) { ch <- r })
	return <-ch
}

// start answers one call received at now through respond, which it calls exactly once. The
// checks run on the calling goroutine, and so does the start of the invoke when the invoker
// is a StartInvoker: then the reply is sealed and sent by whichever goroutine ends the
// invoke, and no goroutine of the provider's own waits for it. Whatever else waits — a key
// record read from the bus, a retry waiting for its first copy, a raise of the caller's
// floor lease, a per-call approval, an invoker that only runs calls to their end — runs on
// a goroutine of its own, so start never blocks.
func (p *Provider) start(ctx context.Context, subject string, m busport.Msg, now time.Time, respond func(busport.Msg)) {
	c, err := DecodeCall(m)
	if err != nil {
		r := replyTo(m)
		r.Code = CodeOf(err)
		respond(p.refuse(r))
		return
	}
	p.answer(ctx, subject, c, now, false, func(reply busport.Msg, retry bool, code string) {
		if p.cfg.OnCall != nil {
			p.cfg.OnCall(CallRecord{
				Room: c.Room, Caller: c.Caller, Capability: c.Capability, Operation: c.Operation,
				Action: c.Action, RequestID: c.RequestID, Code: code, Retry: retry, Duration: time.Since(now),
			})
		}
		respond(reply)
	})
}

// answer decides the reply to a decoded call and gives it to done, with whether it was a
// retry's recorded reply and its code. With mayWait false it must not block: it goes on in a
// goroutine of its own (with mayWait) where the call needs to wait.
func (p *Provider) answer(ctx context.Context, subject string, c *Call, now time.Time, mayWait bool, done func(busport.Msg, bool, string)) {
	// link is the caller's link to this host once the call's MAC verified under it; until
	// then a refusal is signed with the host key, so that a caller with a stale key still
	// gets a refusal it can authenticate, and a forged call no MAC of the caller's link.
	var link *linkKeys
	fail := func(err error) {
		code := CodeOf(err)
		done(sealReply(p.cfg.Key, link, &Reply{Room: c.Room, Caller: c.Caller, RequestID: c.RequestID, Code: code}), false, code)
	}
	if c.Provider != p.id || roomOfSubject(subject) != c.Room {
		fail(newError(CodeUnauthorized, "call addressed to another provider or room"))
		return
	}
	// The caller must be a member whose key record this host verified; its MAC is then
	// checked with the key of the link from it to this host. A record not yet seen is read
	// from the bus, which waits.
	callerKey, ok := p.cfg.Directory.memberKey(ctx, c.Room, c.Caller, mayWait)
	if !ok && !mayWait {
		go p.answer(ctx, subject, c, now, true, done)
		return
	}
	if !ok {
		fail(newError(CodeUnauthorized, "the caller is not a member with a known key"))
		return
	}
	l, err := p.cfg.Key.link(c.Caller, p.id, callerKey)
	if err != nil {
		fail(err)
		return
	}
	auth := c.AuthBytes()
	if err := verifyCall(c, auth, l, now); err != nil {
		fail(err)
		return
	}
	link = l
	pub, err := p.authorize(c)
	if err != nil {
		fail(err)
		return
	}
	// The caller's deadline, on this host's clock: its timeout less the time the call has
	// already spent since signing (as far as the clocks agree).
	deadline := now.Add(c.Timeout - min(max(now.Sub(c.Time), 0), c.Timeout))
	e, retry, err := p.window.admit(c, auth, now)
	if err != nil {
		fail(err)
		return
	}
	if retry {
		if !mayWait {
			go p.awaitFirst(ctx, e, deadline, fail, done)
		} else {
			p.awaitFirst(ctx, e, deadline, fail, done)
		}
		return
	}
	departed, _ := p.cfg.Directory.departures(c.Room, c.Caller)
	end := func(r *Reply) {
		reply := sealReply(p.cfg.Key, link, r)
		p.window.finish(c.Caller, e, reply)
		done(reply, false, r.Code)
	}
	if e.raise != nil {
		// Signed after the caller's durable lease: the lease is raised first, which writes
		// to disk or waits for another call's write.
		if !mayWait {
			go p.lease(ctx, c, e, pub, now, deadline, departed, end)
		} else {
			p.lease(ctx, c, e, pub, now, deadline, departed, end)
		}
		return
	}
	p.dispatch(ctx, c, pub, now, deadline, departed, mayWait, end)
}

// dispatch runs an admitted call as run does: on a goroutine of its own when it may not wait
// here and the run would wait.
func (p *Provider) dispatch(ctx context.Context, c *Call, pub Publication, now, deadline time.Time, departed uint64, mayWait bool, end func(*Reply)) {
	_, async := p.cfg.Invoker.(StartInvoker)
	if !mayWait && (!async || (pub.ApproveEach && c.Operation == Invoke && c.Caller != p.id)) {
		go p.run(ctx, c, pub, now, deadline, departed, end)
		return
	}
	p.run(ctx, c, pub, now, deadline, departed, end)
}

// awaitFirst answers a retry with the first copy's recorded reply, once it has one.
func (p *Provider) awaitFirst(ctx context.Context, e *entry, deadline time.Time, fail func(error), done func(busport.Msg, bool, string)) {
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case <-e.done:
		done(e.reply, true, replyCode(e.reply))
	case <-timer.C:
		fail(newError(CodeTimeout, "the first copy of the call is still running"))
	case <-ctx.Done():
		fail(newError(CodeUnavailable, "the provider is stopping"))
	}
}

// replyCode is the code a recorded reply carries, for the call log.
func replyCode(reply busport.Msg) string { return field(reply.Header, hdrCode) }

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
// again; it gives the reply, unauthenticated, to end. With a StartInvoker it returns once
// the invoke has started, and end runs on the goroutine that ends it.
func (p *Provider) run(ctx context.Context, c *Call, pub Publication, now, deadline time.Time, departed uint64, end func(*Reply)) {
	r := &Reply{Room: c.Room, Caller: c.Caller, RequestID: c.RequestID}
	fail := func(code string) { r.Code = code; end(r) }

	if pub.ApproveEach && c.Operation == Invoke && c.Caller != p.id {
		// The invoke keeps InvokeTimeout of the caller's deadline after the decision.
		until := earliest(now.Add(ApprovalTimeout), deadline.Add(-InvokeTimeout))
		if !until.After(now) {
			fail(CodeApprovalTimeout)
			return
		}
		d := argsDigest(c.Args)
		// A caller that leaves the room (or is removed from it) while its call waits takes
		// the call out of the operator's queue at once: nobody is left to get its result.
		wctx, endWait := context.WithCancel(ctx)
		var gone atomic.Bool
		stop := p.cfg.Directory.WhileThere(c.Room, c.Caller, departed, func() { gone.Store(true); endWait() })
		err := p.cfg.Approver.WaitApproval(wctx, PendingApproval{
			Room: c.Room, Caller: c.Caller, Capability: c.Capability, Action: c.Action, Args: c.Args,
			ArgsDigest: hex.EncodeToString(d[:]), RequestID: c.RequestID, Since: now, Deadline: until,
		})
		stop()
		endWait()
		if gone.Load() {
			fail(CodeUnauthorized)
			return
		}
		if err != nil {
			fail(CodeOf(err))
			return
		}
		// The wait was long: the publication or the roster may have changed meanwhile, or the
		// caller left (its result would be withheld, so the effect would be for nobody).
		if _, err := p.authorize(c); err != nil {
			fail(CodeUnauthorized)
			return
		}
		if now, ok := p.cfg.Directory.departures(c.Room, c.Caller); !ok || now != departed {
			fail(CodeUnauthorized)
			return
		}
	}

	ictx, cancel := context.WithDeadline(context.WithValue(ctx, providedCallKey{}, ProvidedCall{Room: c.Room, Caller: c.Caller}),
		earliest(deadline, time.Now().Add(InvokeTimeout)))
	finish := func(result json.RawMessage, err error) {
		p.result(ctx, ictx, c, departed, r, result, err)
		cancel()
		end(r)
	}
	if si, ok := p.cfg.Invoker.(StartInvoker); ok {
		if c.Operation == Observe {
			si.StartObserve(ictx, c.Capability, finish)
		} else {
			si.StartInvoke(ictx, c.Capability, c.Action, c.Args, finish)
		}
		return
	}
	if c.Operation == Observe {
		finish(p.cfg.Invoker.Observe(ictx, c.Capability))
	} else {
		finish(p.cfg.Invoker.Invoke(ictx, c.Capability, c.Action, c.Args))
	}
}

// result fills r from the invoker's answer: the error's code, or the result bounded,
// compacted and authorized again.
func (p *Provider) result(ctx, ictx context.Context, c *Call, departed uint64, r *Reply, result json.RawMessage, err error) {
	switch {
	case err != nil && ctx.Err() != nil:
		r.Code = CodeUnavailable
		return
	case err != nil && (ictx.Err() != nil || errors.Is(err, context.DeadlineExceeded)):
		r.Code = CodeTimeout
		return
	case err != nil:
		r.Code = p.errorCode(err)
		return
	case len(result) > MaxResultBytes:
		r.Code = CodeTooLarge
		return
	}
	compact, cerr := ndjson.AppendCompact(nil, result)
	if cerr != nil || len(compact) == 0 {
		r.Code = CodeInternal
		return
	}

	// Authorized again at result time: still published to the caller, the caller still a
	// member, and no departure of the caller seen since the call was admitted.
	if _, err := p.authorize(c); err != nil {
		r.Code = CodeUnauthorized
		return
	}
	if now, ok := p.cfg.Directory.departures(c.Room, c.Caller); !ok || now != departed {
		r.Code = CodeUnauthorized
		return
	}
	r.Result = compact
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
