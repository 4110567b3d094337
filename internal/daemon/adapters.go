package daemon

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/capadapter"
	"github.com/airlockhq/airlock/internal/capadapter/capclient"
	"github.com/airlockhq/airlock/internal/protocol"
	"github.com/airlockhq/airlock/internal/room"
	"github.com/airlockhq/airlock/internal/store"
)

// adapterHost joins the capability-adapter supervisor to the durable registrations: a
// registration is persisted only after its adapter started and passed validation, and a
// restart restores every persisted registration.
//
// It also ends temporary registrations: a lease ends on the supervisor's timer (the hook
// below then deletes the record), a session generation's end comes from the session
// manager (sessionEnded), a room's close from the room service (RemoveForRoom). Every
// removal or replacement is passed on to the hooks added with OnAdapterRemoved.
type adapterHost struct {
	sup      *capclient.Supervisor
	store    *store.Store
	sessions sessionView
	log      *slog.Logger
	// checkRoom refuses a registration tied to a room this host is not in (the daemon sets
	// Server.checkOpenRoom); nil refuses every room tie with unavailable.
	checkRoom func(roomID string) *protocol.Error

	// mu serializes register, approve and remove with their persistence, so the store and
	// the supervisor never disagree about which registration is current.
	mu sync.Mutex

	hooksMu sync.Mutex
	hooks   []func(capclient.Removal)
	// recorded are the capability ids each registration recorded in its durable record
	// (store.Registration.Capabilities), by name: a removal of an adapter whose child never
	// ran tells the hooks these, since the supervisor knows none.
	recorded map[string][]string
}

// sessionView is what the adapter host asks the session manager: whether a generation is
// resident (*session.Manager implements it).
type sessionView interface {
	Session(id string, generation int64, checkGen bool) (*protocol.SessionSnapshot, error)
}

// adapterStopTimeout bounds the graceful stop of an adapter removed because its session or
// room ended; Client.Close kills the child when it passes.
const adapterStopTimeout = 5 * time.Second

func newAdapterHost(sup *capclient.Supervisor, st *store.Store, sessions sessionView, log *slog.Logger) *adapterHost {
	a := &adapterHost{sup: sup, store: st, sessions: sessions, log: log, recorded: make(map[string][]string)}
	sup.OnRemove(a.supervisorRemoved)
	return a
}

// OnAdapterRemoved adds fn to the hooks told whenever a registration stops serving its
// capabilities: removed by the operator, replaced (by a registration of the same name or by
// approveAdapter), its lease ended, its room closed or its session generation ended.
// r.Capabilities are the capability ids it served (for an adapter whose child never ran,
// those its durable record recorded), r.Reason one of the capclient.Reason* constants. The
// room service uses it to withdraw the publications of those capabilities; it is the one
// place they are withdrawn, for every reason.
//
// fn runs synchronously (it is a capclient.Supervisor.OnRemove hook), before the old child
// is stopped and, for a replacement, before the new child serves, on the removing
// operation's goroutine (for an ended lease, the supervisor's lease loop). It must not block
// for long and must not call back into adapter administration (registerAdapter,
// removeAdapter, approveAdapter, RemoveForRoom), which holds the locks it runs under.
// Daemon shutdown (Supervisor.Close) is no removal: registrations and publications persist.
func (a *adapterHost) OnAdapterRemoved(fn func(r capclient.Removal)) {
	a.hooksMu.Lock()
	a.hooks = append(a.hooks, fn)
	a.hooksMu.Unlock()
}

// RemoveForRoom removes every registration tied to room roomID, durable record first, and
// stops its adapter; the OnAdapterRemoved hooks are told capclient.ReasonRoomClosed. The
// room service calls it when a room closes (and may call it at start for rooms that closed
// while the daemon was down). It returns the names removed, in name order; a room with no
// tied registration is not an error. ctx bounds the graceful part of each stop.
func (a *adapterHost) RemoveForRoom(ctx context.Context, roomID string) ([]string, error) {
	return a.removeTied(ctx, capclient.ReasonRoomClosed, func(r store.Registration) bool { return r.Room == roomID })
}

// sessionEnded is the session manager's GenerationEnded hook: generation (and every older
// one) of session id will never be resident again, so the registrations tied to them go.
func (a *adapterHost) sessionEnded(id string, generation int64) {
	ctx, cancel := context.WithTimeout(context.Background(), adapterStopTimeout)
	defer cancel()
	names, err := a.removeTied(ctx, capclient.ReasonSessionEnded, func(r store.Registration) bool {
		return r.Session == id && r.Generation <= generation
	})
	if err != nil {
		a.log.Error("adapters tied to an ended session generation not removed", "sessionId", id, "generation", generation, "err", err)
	}
	for _, n := range names {
		a.log.Info("temporary adapter removed: its session generation ended", "adapter", n, "sessionId", id, "generation", generation)
	}
}

func (a *adapterHost) removeTied(ctx context.Context, reason string, match func(store.Registration) bool) ([]string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	regs, err := a.store.Registrations()
	if err != nil {
		return nil, err
	}
	var names []string
	for _, r := range regs {
		if !match(r) {
			continue
		}
		if _, err := a.store.DeleteRegistration(r.Name); err != nil {
			return names, err
		}
		// A stored registration the supervisor never ran is removed all the same.
		if err := a.sup.RemoveBecause(ctx, r.Name, reason); capadapter.CodeOf(err) == capadapter.CodeUnknownAdapter {
			a.removedUnrun(r, reason)
		}
		names = append(names, r.Name)
	}
	return names, nil
}

// supervisorRemoved is the supervisor's removal hook; it runs before the old child stops. An
// ended lease is the one removal the supervisor makes on its own: its durable record goes
// here. It takes no a.mu (an administration operation holding it may be waiting for the
// supervisor, which is busy with this removal); none is needed, since the supervisor admits
// no registration of the name until the hook returns, and a registration installed later
// writes its own record after. Every removal is then passed on.
func (a *adapterHost) supervisorRemoved(r capclient.Removal) {
	if r.Reason == capclient.ReasonLeaseExpired {
		if _, err := a.store.DeleteRegistration(r.Registration.Name); err != nil {
			a.log.Error("expired adapter registration not deleted; it is removed at the next start", "adapter", r.Registration.Name, "err", err)
		}
		a.log.Info("temporary adapter removed: its lease ended", "adapter", r.Registration.Name)
	}
	a.tell(r)
}

// tell passes removal r on to the OnAdapterRemoved hooks.
func (a *adapterHost) tell(r capclient.Removal) {
	a.hooksMu.Lock()
	hooks := slices.Clone(a.hooks)
	// An adapter restored but never started (backoff, changed code) has no descriptors.
	if len(r.Capabilities) == 0 {
		r.Capabilities = slices.Clone(a.recorded[r.Registration.Name])
	}
	if r.Reason != capclient.ReasonReplaced {
		delete(a.recorded, r.Registration.Name)
	}
	a.hooksMu.Unlock()
	for _, fn := range hooks {
		fn(r)
	}
}

// removedUnrun tells the hooks of the removal of stored registration r, which the supervisor
// does not hold (it refused it at restore, or it is removed at start without running), with
// the capability ids r recorded.
func (a *adapterHost) removedUnrun(r store.Registration, reason string) {
	a.tell(capclient.Removal{Registration: fromStore(r), Capabilities: slices.Clone(r.Capabilities), Reason: reason})
}

// record keeps the capability ids a stored registration recorded.
func (a *adapterHost) record(r store.Registration) {
	a.hooksMu.Lock()
	a.recorded[r.Name] = slices.Clone(r.Capabilities)
	a.hooksMu.Unlock()
}

// restore starts every persisted registration. An adapter that fails to start is kept and
// retried with backoff by the supervisor; a stored registration the supervisor refuses is
// reported by name and stays stored, so the operator can see and remove it. A registration
// whose lease ended or whose session generation is no longer resident (the daemon was down
// when it ended, or did not restore it) is deleted. One without digests (stored before they
// existed) has them recorded now, at its first start after the upgrade.
func (a *adapterHost) restore(ctx context.Context, log *slog.Logger) (restored int, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	regs, err := a.store.Registrations()
	if err != nil {
		return 0, err
	}
	for _, r := range regs {
		ended, reason := "", ""
		switch {
		case !r.LeaseExpires.IsZero() && !time.Now().Before(r.LeaseExpires):
			ended, reason = "its lease ended", capclient.ReasonLeaseExpired
		case r.Session != "":
			if _, err := a.sessions.Session(r.Session, r.Generation, true); err != nil {
				ended, reason = "its session generation is not resident", capclient.ReasonSessionEnded
			}
		}
		if ended == "" {
			a.record(r)
			var got capclient.Registration
			got, err = a.sup.Restore(ctx, fromStore(r))
			switch {
			case capadapter.CodeOf(err) == capadapter.CodeLeaseExpired:
				ended, reason = "its lease ended", capclient.ReasonLeaseExpired
			case err != nil:
				log.Error("capability adapter registration not restored", "adapter", r.Name, "code", capadapter.CodeOf(err), "err", err)
				continue
			case len(r.Digests) == 0 && len(got.Digests) > 0:
				if err := a.store.PutRegistration(toStore(got, r.Capabilities)); err != nil {
					log.Error("capability adapter digests not recorded", "adapter", r.Name, "err", err)
				}
			}
		}
		if ended != "" {
			if _, err := a.store.DeleteRegistration(r.Name); err != nil {
				log.Error("ended temporary adapter registration not deleted", "adapter", r.Name, "err", err)
			}
			log.Info("temporary adapter registration removed at start: "+ended, "adapter", r.Name)
			// Its child never ran: the hooks withdraw the publications it recorded.
			a.removedUnrun(r, reason)
			continue
		}
		restored++
	}
	return restored, nil
}

func fromStore(r store.Registration) capclient.Registration {
	c := capclient.Registration{Name: r.Name, Command: r.Command, Args: r.Args, PassEnv: slices.Clone(r.PassEnv),
		Room: r.Room, Session: r.Session, Generation: r.Generation, LeaseExpires: r.LeaseExpires}
	for _, d := range r.Digests {
		c.Digests = append(c.Digests, capclient.FileDigest(d))
	}
	return c
}

// toStore is the durable record of r, recording capabilities (the ids it serves).
func toStore(r capclient.Registration, capabilities []string) store.Registration {
	s := store.Registration{Name: r.Name, Command: r.Command, Args: r.Args, PassEnv: slices.Clone(r.PassEnv),
		Room: r.Room, Session: r.Session, Generation: r.Generation, LeaseExpires: r.LeaseExpires,
		Capabilities: slices.Clone(capabilities)}
	for _, d := range r.Digests {
		s.Digests = append(s.Digests, store.FileDigest(d))
	}
	return s
}

// RegisterResult is the data of registerAdapter.
type RegisterResult struct {
	Adapter capclient.AdapterStatus `json:"adapter"`
}

func (a *adapterHost) register(ctx context.Context, p *protocol.RegisterAdapterPayload) (*RegisterResult, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	reg := capclient.Registration{Name: p.Name, Command: p.Command, Args: p.Args, PassEnv: p.PassEnv, Room: p.Room,
		Session: p.SessionID, Generation: p.Generation}
	if p.LeaseSeconds > 0 {
		reg.LeaseExpires = time.Now().Add(time.Duration(p.LeaseSeconds) * time.Second).UTC().Round(time.Millisecond)
	}
	if p.Room != "" {
		// A room that closes after this check (or that this host leaves) is forgotten by the
		// room service before its RoomClosed hook runs RemoveForRoom, which waits for a.mu
		// and so removes this registration once it is stored.
		if a.checkRoom == nil {
			return nil, protocol.Retryable(room.CodeUnavailable, "the room service is not running")
		}
		if e := a.checkRoom(p.Room); e != nil {
			return nil, e
		}
	}
	if p.SessionID != "" {
		// A generation that ends after this check waits for a.mu in sessionEnded, and so
		// removes this registration once it is stored.
		if _, err := a.sessions.Session(p.SessionID, p.Generation, true); err != nil {
			return nil, err
		}
	}
	reg, err := a.sup.Register(ctx, reg)
	if err != nil {
		return nil, adapterError(err, false)
	}
	st, _ := a.status(reg.Name)
	rec := toStore(reg, st.Capabilities)
	if err := a.store.PutRegistration(rec); err != nil {
		// What is not persisted must not run: after a restart the operator would find it gone.
		a.sup.Remove(context.WithoutCancel(ctx), reg.Name)
		return nil, err
	}
	a.record(rec)
	return &RegisterResult{Adapter: st}, nil
}

// ApproveResult is the data of approveAdapter: the adapter's status, whether it was
// restarted under new digests, and each file's digest before and after.
type ApproveResult struct {
	Adapter   capclient.AdapterStatus  `json:"adapter"`
	Restarted bool                     `json:"restarted"`
	Digests   []capclient.DigestChange `json:"digests"`
}

// approve re-records the digests of a registration's files as they are now and starts it
// (see Supervisor.Approve); the new digests are persisted, or the adapter does not run.
func (a *adapterHost) approve(ctx context.Context, name string) (*ApproveResult, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	ap, err := a.sup.Approve(ctx, name)
	if err != nil {
		return nil, adapterError(err, false)
	}
	st, _ := a.status(name)
	if ap.Restarted {
		rec := toStore(ap.Registration, st.Capabilities)
		if err := a.store.PutRegistration(rec); err != nil {
			a.sup.Remove(context.WithoutCancel(ctx), name) // the stored, older digests stay
			return nil, err
		}
		a.record(rec)
	}
	return &ApproveResult{Adapter: st, Restarted: ap.Restarted, Digests: nonNil(ap.Changes)}, nil
}

// RemoveResult is the data of removeAdapter.
type RemoveResult struct {
	Removed bool `json:"removed"`
}

// remove forgets a registration, durable record first: if that fails nothing changed, and once
// it is gone the adapter is stopped. A stored registration the supervisor never ran (its
// command was missing at startup) is removed all the same.
func (a *adapterHost) remove(ctx context.Context, name string) (*RemoveResult, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	stored, err := a.store.DeleteRegistration(name)
	if err != nil {
		return nil, err
	}
	if err := a.sup.Remove(ctx, name); err != nil {
		if stored && capadapter.CodeOf(err) == capadapter.CodeUnknownAdapter {
			a.removedUnrun(store.Registration{Name: name}, capclient.ReasonRemoved)
			return &RemoveResult{Removed: true}, nil
		}
		return nil, adapterError(err, false)
	}
	return &RemoveResult{Removed: true}, nil
}

func (a *adapterHost) status(name string) (capclient.AdapterStatus, bool) {
	for _, st := range a.sup.Status() {
		if st.Name == name {
			return st, true
		}
	}
	return capclient.AdapterStatus{}, false
}

// AdapterList is the data of listAdapters.
type AdapterList struct {
	Adapters []capclient.AdapterStatus `json:"adapters"`
}

// AdapterLogs is the data of adapterLogs: the adapter's kept stderr lines, for the operator
// who owns the socket and nobody else.
type AdapterLogs struct {
	Name  string   `json:"name"`
	Lines []string `json:"lines"`
}

// CapabilityList is the data of listCapabilities.
type CapabilityList struct {
	Capabilities []capclient.CapabilitySummary `json:"capabilities"`
}

// CapabilityDescription is the data of describeCapability.
type CapabilityDescription struct {
	Descriptor capadapter.Descriptor `json:"descriptor"`
}

// CapabilityResult is the data of observeCapability and invokeCapability: bounded semantic
// data, always an object. A non-object result is wrapped, {"state": v} for an observation and
// {"value": v} for an action, as the original runtime does.
type CapabilityResult struct {
	CapabilityID string          `json:"capabilityId"`
	Action       string          `json:"action,omitempty"`
	Result       json.RawMessage `json:"result"`
}

func wrapResult(raw json.RawMessage, key string) json.RawMessage {
	if len(raw) > 0 && raw[0] == '{' {
		return raw
	}
	wrapped, err := json.Marshal(map[string]json.RawMessage{key: raw})
	if err != nil {
		return json.RawMessage(`{}`)
	}
	return wrapped
}

// adapterError maps a supervisor error to the wire. Observations and actions are projected
// with the protocol's closed code set; administration keeps the supervisor's finer codes.
// The supervisor's messages never quote adapter output, arguments or results.
func adapterError(err error, project bool) *protocol.Error {
	code := capadapter.CodeOf(err)
	if project {
		code = capadapter.WireCode(err)
	}
	e := &protocol.Error{Code: code, Message: capadapter.WireMessage(err, code)}
	switch code {
	case capadapter.CodeUnavailable, capadapter.CodeTimeout:
		e.Retryable = true
	}
	return e
}

func (s *Server) runAdapters(ctx context.Context, c *conn, cmd *protocol.Command) (any, error) {
	a := s.adapters
	switch cmd.Operation {
	case protocol.OpRegisterAdapter:
		var p protocol.RegisterAdapterPayload
		if e := decodeValid(cmd, &p); e != nil {
			return nil, e
		}
		// A registration during recovery would race the restore of the stored ones; one while
		// draining would start work on a host that is going away.
		if e := s.sessions.Admitting(); e != nil {
			return nil, e
		}
		return a.register(ctx, &p)
	case protocol.OpRemoveAdapter:
		var p protocol.AdapterNamePayload
		if e := decodeValid(cmd, &p); e != nil {
			return nil, e
		}
		return a.remove(ctx, p.Name)
	case protocol.OpListAdapters:
		if e := protocol.DecodePayload(cmd, &protocol.EmptyPayload{}); e != nil {
			return nil, e
		}
		return &AdapterList{Adapters: nonNil(a.sup.Status())}, nil
	case protocol.OpApproveAdapter:
		var p protocol.AdapterNamePayload
		if e := decodeValid(cmd, &p); e != nil {
			return nil, e
		}
		if e := s.sessions.Admitting(); e != nil {
			return nil, e
		}
		return a.approve(ctx, p.Name)
	case protocol.OpAdapterLogs:
		var p protocol.AdapterNamePayload
		if e := decodeValid(cmd, &p); e != nil {
			return nil, e
		}
		lines, err := a.sup.Logs(p.Name)
		if err != nil {
			return nil, adapterError(err, false)
		}
		return &AdapterLogs{Name: p.Name, Lines: nonNil(lines)}, nil
	case protocol.OpListCapabilities:
		if e := protocol.DecodePayload(cmd, &protocol.EmptyPayload{}); e != nil {
			return nil, e
		}
		return &CapabilityList{Capabilities: nonNil(a.sup.List())}, nil
	case protocol.OpDescribeCapability:
		p, e := protocol.DecodeCapabilityPayload(cmd)
		if e != nil {
			return nil, e
		}
		d, err := a.sup.Describe(p.CapabilityID)
		if err != nil {
			return nil, adapterError(err, true)
		}
		return &CapabilityDescription{Descriptor: d}, nil
	case protocol.OpObserveCapability, protocol.OpInvokeCapability:
		cc, e := capabilityCallOf(cmd)
		if e != nil {
			return nil, e
		}
		x, err := s.gateCapability(ctx, c, cmd, cc)
		if err != nil {
			return nil, err
		}
		var raw json.RawMessage
		if cc.observe {
			raw, err = a.sup.Observe(ctx, cc.id)
		} else {
			raw, err = a.sup.Invoke(ctx, cc.id, cc.action, cc.args)
		}
		x.done(capabilityCode(err))
		return cc.result(raw, err)
	}
	return nil, protocol.Errorf(protocol.CodeUnknownOperation, "unknown operation").With("operation", cmd.Operation)
}

// capabilityCall is a decoded and checked observeCapability or invokeCapability command.
type capabilityCall struct {
	observe    bool
	id, action string
	args       json.RawMessage
}

func capabilityCallOf(cmd *protocol.Command) (*capabilityCall, *protocol.Error) {
	if cmd.Operation == protocol.OpObserveCapability {
		p, e := protocol.DecodeCapabilityPayload(cmd)
		if e != nil {
			return nil, e
		}
		return &capabilityCall{observe: true, id: p.CapabilityID}, nil
	}
	var p protocol.InvokeCapabilityPayload
	if e := decodeValid(cmd, &p); e != nil {
		return nil, e
	}
	args := p.Args
	if len(args) == 0 {
		args = json.RawMessage(`{}`)
	}
	return &capabilityCall{id: p.CapabilityID, action: p.Action, args: args}, nil
}

// result is the command's data, or its wire error, from the supervisor's outcome.
func (cc *capabilityCall) result(raw json.RawMessage, err error) (any, error) {
	if err != nil {
		return nil, adapterError(err, true)
	}
	if cc.observe {
		return &CapabilityResult{CapabilityID: cc.id, Result: wrapResult(raw, "state")}, nil
	}
	return &CapabilityResult{CapabilityID: cc.id, Action: cc.action, Result: wrapResult(raw, "value")}, nil
}

// startCapability runs an admitted observeCapability or invokeCapability command without a
// goroutine of its own, as startTool does for invokeTool: the reader goroutine decodes and
// checks it and hands it to the adapter's client, which writes the request at once when the
// child is idle and never waits for the pipe; the answer is sent by whichever goroutine ends
// the call, normally the child's stdout reader as soon as the result is decoded and screened.
// A slow adapter never stalls this connection: a call waits without holding a goroutine, and
// calls to a busy child queue in its client. The handlers group counts the call until its
// answer is queued, so that close answers it first.
func (c *conn) startCapability(cmd *protocol.Command) {
	c.handlers.Add(1)
	cc, e := capabilityCallOf(cmd)
	if e != nil {
		c.endCapability(cmd, nil, e)
		return
	}
	x, err := c.srv.capabilityGate(cmd, c, cc)
	if err != nil {
		c.endCapability(cmd, nil, err)
		return
	}
	if x.mayAsk() {
		// The gate may wait for the operator (approval.Queue): never on the reader. The
		// goroutine ends once the call is admitted or refused; the handlers group counts it
		// as it counts the call.
		c.handlers.Add(1)
		go func() {
			defer c.handlers.Done()
			c.startGatedCapability(cmd, cc, x)
		}()
		return
	}
	c.startGatedCapability(cmd, cc, x)
}

// startGatedCapability checks a capability call at the gate and hands it to the adapter's
// client.
func (c *conn) startGatedCapability(cmd *protocol.Command, cc *capabilityCall, x *gated) {
	x.ctx = c.ctx
	if e := x.check(""); e != nil {
		c.endCapability(cmd, nil, e)
		return
	}
	finish := func(raw json.RawMessage, err error) {
		x.done(capabilityCode(err))
		data, werr := cc.result(raw, err)
		c.endCapability(cmd, data, werr)
	}
	done := func(raw json.RawMessage, err error) {
		if !c.srv.offReader(x, raw, func(raw json.RawMessage) { finish(raw, err) }) {
			finish(raw, err)
		}
	}
	if cc.observe {
		c.srv.adapters.sup.StartObserve(c.ctx, cc.id, done)
	} else {
		c.srv.adapters.sup.StartInvoke(c.ctx, cc.id, cc.action, cc.args, done)
	}
}

func (c *conn) endCapability(cmd *protocol.Command, data any, err error) {
	defer c.handlers.Done()
	c.reply(cmd.RequestID, c.srv.respond(cmd, data, err))
}

// decodeValid decodes cmd's payload into p and checks it: the refusal of either, typed.
func decodeValid(cmd *protocol.Command, p interface{ Validate() *protocol.Error }) *protocol.Error {
	if e := protocol.DecodePayload(cmd, p); e != nil {
		return e
	}
	return p.Validate()
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
